// A run's side of concurrency pools (docs/design.md, "Concurrency pools"): the permits it holds
// per key of its batch's pool, taken from and given back to the leases in PostgreSQL
// (sql/pools.ts), and which of its running items holds which. A batch naming no pool has no gate
// and sends none of these statements: the producer imports this file only for a batch with a pool
// (the pool's rules are pool.ts).
import type { Sql } from '../store/connect.js';
import { withTimeout } from '../store/timeout.js';
import type { Clock } from '../clock.js';
import type { RateKeyItem } from './rate.js';
import { syncPermits, type PoolLimits } from './sql/pools.js';

/** First wait before asking a full pool again, ms; it grows by half up to {@link POOL_MAX_WAIT_MS}. */
export const POOL_FIRST_WAIT_MS = 5;

/** Longest wait before asking a full pool again, ms (with jitter). */
export const POOL_MAX_WAIT_MS = 40;

/**
 * The permits one run holds of its batch's pool, per key. `available` says whether an item of a
 * key may start now; `start` and `end` count the run's items in flight under the pool; `sync`
 * sends what the run wants (what its running items hold plus what its due queued items ask) in
 * one statement at a time, bounded by `storeTimeoutMs`, and calls `onAnswer`. A failed sync is
 * reported through `onError`, and tried again by the next.
 *
 * The permits the run may use are never more than its lease rows hold: a give-back is counted
 * here before it is sent, a gain only once it is answered.
 */
export class PoolGate {
  /** Permits held per key (the store holds at least these). */
  private readonly held = new Map<string, number>();
  /** Items in flight per key, and each running item's key. */
  private readonly inUse = new Map<string, number>();
  private readonly ofItem = new Map<string, string>();
  private asking = false;
  /** Ask again when the last answer comes (something changed meanwhile). */
  private again = false;
  /** The pool holds more than its limits (a lowered limit): permits of ending items go back. */
  private over = false;
  /** The last ask got fewer permits than it wanted: the next not before then (local clock). */
  private retryAt = 0;
  private waitMs = POOL_FIRST_WAIT_MS;
  private retryTimer: AbortController | undefined;
  /** Local clock time of the last answer (renewals follow it). */
  private answeredAt = 0;
  private wants = new Map<string, number>();

  constructor(
    private readonly o: {
      sql: Sql;
      pool: string;
      runId: string;
      defaults: PoolLimits;
      key?: (item: RateKeyItem) => string;
      params: unknown;
      /** How long a lease lives without a take, ms (the run's staleMs). */
      leaseMs: number;
      clock: Clock;
      random: () => number;
      storeTimeoutMs: number;
      onAnswer: () => void;
      onError: (error: unknown) => void;
    },
  ) {}

  /** The pool's key of an item, `''` without a key function (or when it throws). */
  keyOf(item: { key: string; input: unknown }): string {
    if (!this.o.key) return '';
    try {
      return String(this.o.key({ key: item.key, input: item.input, params: this.o.params }));
    } catch {
      return '';
    }
  }

  /** Whether an item of `key` may start now (a permit of it is held and free). */
  available(key: string): boolean {
    return (this.held.get(key) ?? 0) > (this.inUse.get(key) ?? 0);
  }

  /** An item of `key` starts on a free permit (see {@link available}). */
  start(itemKey: string, key: string): void {
    this.inUse.set(key, (this.inUse.get(key) ?? 0) + 1);
    this.ofItem.set(itemKey, key);
  }

  /**
   * An item's attempt ended: its permit is free for the next item of its key, or goes back at
   * the next sync when the pool holds more than its limits.
   */
  end(itemKey: string): void {
    const key = this.ofItem.get(itemKey);
    if (key === undefined) return;
    this.ofItem.delete(itemKey);
    const n = (this.inUse.get(key) ?? 1) - 1;
    if (n > 0) this.inUse.set(key, n);
    else this.inUse.delete(key);
    if (this.over) {
      const h = (this.held.get(key) ?? 1) - 1;
      if (h > 0) this.held.set(key, h);
      else this.held.delete(key);
    }
  }

  /** Whether an answer or a wait for the pool will wake the run. */
  get pending(): boolean {
    return this.asking || this.retryTimer !== undefined;
  }

  /** Items in flight under the pool. */
  get running(): number {
    return this.ofItem.size;
  }

  /**
   * After the producer's pass: `wants` holds, per key, the due queued items that want a permit
   * (those that found none, and those kept waiting for a rate token).
   * Permits nothing will use go back at once; more are asked for when items wait (not before
   * the wait after a short answer). One statement at a time.
   */
  sync(wants: Map<string, number>): void {
    this.wants = wants;
    const now = this.o.clock.now();
    let release = false;
    for (const [key, h] of this.held) if (h > (this.inUse.get(key) ?? 0) + (wants.get(key) ?? 0)) release = true;
    let short = false;
    for (const [key, w] of wants) if ((this.inUse.get(key) ?? 0) + w > (this.held.get(key) ?? 0)) short = true;
    const ask = short && now >= this.retryAt;
    if (!release && !ask) return;
    if (this.asking) {
      this.again = true;
      return;
    }
    this.send(ask);
  }

  /** Renew the run's leases (the beat; also tells a lowered limit), when it holds any. */
  renew(): void {
    if (this.held.size === 0 || this.asking) return;
    this.send(false);
  }

  private send(ask: boolean): void {
    const targets: { key: string; target: number }[] = [];
    const keys = new Set([...this.held.keys(), ...this.inUse.keys(), ...(ask ? this.wants.keys() : [])]);
    for (const key of keys) {
      const h = this.held.get(key) ?? 0;
      const need = (this.inUse.get(key) ?? 0) + (this.wants.get(key) ?? 0);
      // Without an ask, only what is held and needed is kept; over the limits (a lowered
      // limit), only what items in flight hold: the rest goes back.
      const inUse = this.inUse.get(key) ?? 0;
      const target = this.over ? Math.min(inUse, need) : ask ? need : Math.min(h, need);
      // A give-back counts at once: what the run may use never passes what its rows hold.
      if (target < h) {
        if (target > 0) this.held.set(key, target);
        else this.held.delete(key);
      }
      targets.push({ key, target });
    }
    const wanted = new Map(targets.map((t) => [t.key, t.target]));
    this.asking = true;
    this.again = false;
    void withTimeout(
      () =>
        syncPermits(this.o.sql, {
          pool: this.o.pool,
          run: this.o.runId,
          targets,
          leaseMs: this.o.leaseMs,
          defaults: this.o.defaults,
        }),
      this.o.storeTimeoutMs,
    )
      .then(
        (a) => {
          this.answeredAt = this.o.clock.now();
          this.over = a.over;
          let short = false;
          for (const g of a.grants) {
            // Never more than asked now: a give-back counted meanwhile stays counted.
            const h = Math.min(g.held, Math.max(this.held.get(g.key) ?? 0, wanted.get(g.key) ?? 0));
            if (h > 0) this.held.set(g.key, h);
            else this.held.delete(g.key);
            if (g.held < (wanted.get(g.key) ?? 0)) short = true;
          }
          if (ask && short) this.waitAfterShort();
          else if (ask) this.waitMs = POOL_FIRST_WAIT_MS;
        },
        (error) => this.o.onError(error),
      )
      .finally(() => {
        this.asking = false;
        if (this.again) this.sync(this.wants);
        this.o.onAnswer();
      });
  }

  /** A short answer: ask again after a wait that grows (jittered), so full pools are not hammered. */
  private waitAfterShort(): void {
    const ms = this.waitMs * (0.5 + this.o.random());
    this.waitMs = Math.min(POOL_MAX_WAIT_MS, this.waitMs * 1.5);
    this.retryAt = this.o.clock.now() + ms;
    if (this.retryTimer) return;
    const timer = new AbortController();
    this.retryTimer = timer;
    void this.o.clock.sleep(ms, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.retryTimer = undefined;
      this.o.onAnswer();
    });
  }

  /** Whether the leases were last renewed `ms` ago or more. */
  renewDue(ms: number): boolean {
    return this.o.clock.now() - this.answeredAt >= ms;
  }

  /** The run is over: no timer fires any more. */
  stop(): void {
    this.retryTimer?.abort();
    this.retryTimer = undefined;
  }
}
