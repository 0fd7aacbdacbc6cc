// A run's side of fleet-wide rate limits (docs/design.md, "Rate limits"): the tokens it holds per
// key, taken in blocks from the buckets in PostgreSQL (sql/rate.ts), and when a key has none left.
// The producer imports it when its batch has a limit (the rules are rate.ts).
import type { Sql } from '../store/connect.js';
import { withTimeout } from '../store/timeout.js';
import type { Clock } from '../clock.js';
import { defaultBurst, LENT_TOKEN_TTL_MS, rateOf, TOKEN_TTL_MS, type RateKeyItem, type RateLimit } from './rate.js';
import { pauseKey, takeTokens, type TokenAsk } from './sql/rate.js';

/** A lent block is at most this many times the run's queue room. */
const LEND_ROOMS = 16;

/** What {@link RateGate.take} answers for a key: start it, ask the store, or wait `ms` more. */
export type TokenAnswer = { go: true } | { go: false; ask: true } | { go: false; ask: false; waitMs: number };

/**
 * The tokens one run holds, per key. `take` spends one if it holds one; `ask` takes more from
 * the store (one statement at a time, bounded by `storeTimeoutMs`), then calls `onAnswer`.
 * A failed ask is reported through `onError` and asked again on the next `take`.
 */
export class RateGate {
  /** Tokens held per key: `n` left of a block of `size` (`lent`: held for longer), until when (local clock, ms). */
  private readonly held = new Map<string, { n: number; size: number; lent: boolean; until: number }>();
  private readonly emptyUntil = new Map<string, number>();
  /** Keys paused by a Retry-After, until when (local clock, ms). */
  private readonly pausedUntil = new Map<string, number>();
  private asking = false;
  /** The rate the last answer named per key (the batch's own or the key's), items per second. */
  private readonly rates = new Map<string, number>();

  constructor(
    private readonly o: {
      sql: Sql;
      batchId: string;
      job: string;
      limit: RateLimit;
      clock: Clock;
      storeTimeoutMs: number;
      onAnswer: () => void;
      onError: (error: unknown) => void;
    },
  ) {}

  /** The batch's own rate as the last beat answered it (a PATCH may change it), items per second. */
  private batchRate: number | undefined;

  /** The rate of `key`, items per second: what the store last answered, else the batch's, else the limit's. */
  rate(key: string): number {
    return this.rates.get(key) ?? this.batchRate ?? rateOf(this.o.limit, key);
  }

  /**
   * The batch's own rate, as a beat answered it: when it changed (a PATCH), the rates and empty
   * buckets learnt at the old one are forgotten, so items are no longer given back spaced at the
   * old rate and a key that waited for a token at it asks again at once.
   */
  useBatchRate(perSecond: number): void {
    if (this.batchRate === perSecond) return;
    this.batchRate = perSecond;
    this.rates.clear();
    this.emptyUntil.clear();
  }

  /** The burst of `key`: the limit's, else {@link defaultBurst} of its rate. */
  private burst(key: string): number {
    return this.o.limit.burst ?? defaultBurst(this.rate(key));
  }

  /** The key of `item`, `''` without a key function; a key function that throws counts as `''`. */
  keyOf(item: RateKeyItem): string {
    if (!this.o.limit.key) return '';
    try {
      return String(this.o.limit.key(item));
    } catch {
      return '';
    }
  }

  /** Spend a token of `key` now, or say whether to ask the store or how long the key is empty. */
  take(key: string, now: number): TokenAnswer {
    const paused = this.pausedUntil.get(key);
    if (paused !== undefined) {
      if (paused > now) return { go: false, ask: false, waitMs: paused - now };
      this.pausedUntil.delete(key);
    }
    const h = this.held.get(key);
    if (h && h.n > 0 && h.until > now) {
      if (--h.n === 0) this.held.delete(key);
      return { go: true };
    }
    if (h) this.held.delete(key);
    const empty = this.emptyUntil.get(key) ?? 0;
    if (empty > now) return { go: false, ask: false, waitMs: empty - now };
    return { go: false, ask: true };
  }

  /** Tokens of `key` held now (lapsed ones not counted). */
  holding(key: string, now: number): number {
    const h = this.held.get(key);
    return h && h.until > now ? h.n : 0;
  }

  /**
   * How many tokens to ask for a key at once, at least `need`: at a high rate as many as the rate
   * gives in {@link TOKEN_TTL_MS} (at most `capacity`), so items start from tokens held while the
   * next ask is on its way, not a round trip after each other.
   */
  askSize(key: string, need: number, capacity: number): number {
    return Math.max(need, Math.min(capacity, Math.floor((this.rate(key) * TOKEN_TTL_MS) / 1000)));
  }

  /**
   * The block of `key` to ask to hold for {@link LENT_TOKEN_TTL_MS} (0: none): {@link LEND_ROOMS}
   * times `capacity`, at most a quarter of the burst, and only when that is at least twice the
   * room (else short blocks serve as well).
   */
  lendSize(key: string, capacity: number): number {
    const n = Math.floor(Math.min(LEND_ROOMS * capacity, this.burst(key) / 4));
    return n >= 2 * capacity ? n : 0;
  }

  /**
   * Whether to ask for the next block of `key` now, while tokens of the last one still start
   * items: with fewer than half of {@link askSize} held, or a quarter of a lent block (its rest
   * is dropped when the next arrives); never while the last answer said the bucket is empty.
   */
  runningLow(key: string, now: number, capacity: number): boolean {
    if ((this.emptyUntil.get(key) ?? 0) > now) return false;
    const h = this.held.get(key);
    if (h && h.until > now && h.lent) return h.n < h.size / 4;
    return this.holding(key, now) < this.askSize(key, 1, capacity) / 2;
  }

  /** Whether an ask is on its way (the next answer wakes the run). */
  get pending(): boolean {
    return this.asking;
  }

  /**
   * Pause `key` for `ms` across the fleet (an item of it was told to wait, docs/design.md,
   * "Retry-After"): the tokens this run holds of it are dropped, it starts nothing of the key
   * until then, and the key's bucket grants none to any run before then (one statement, bounded
   * by `storeTimeoutMs`; a failure is reported through `onError`, and this run still waits).
   */
  pause(key: string, ms: number): void {
    const now = this.o.clock.now();
    this.held.delete(key);
    this.pausedUntil.set(key, Math.max(this.pausedUntil.get(key) ?? 0, now + ms));
    void withTimeout(
      () => pauseKey(this.o.sql, { job: this.o.job, key, burst: this.burst(key), ms }),
      this.o.storeTimeoutMs,
    ).then(
      () => this.o.onAnswer(),
      (error) => this.o.onError(error),
    );
  }

  /**
   * Ask the store for `want` tokens of each key, or a lent block where {@link lendSize} of
   * `capacity` gives one (nothing while an ask is on its way).
   */
  ask(wants: Map<string, number>, capacity: number): void {
    if (this.asking || wants.size === 0) return;
    this.asking = true;
    const asks: TokenAsk[] = [...wants].map(([key, want]) => ({
      key,
      want,
      lend: this.lendSize(key, capacity),
      perSecond: rateOf(this.o.limit, key),
      burst: this.burst(key),
    }));
    const sentAt = this.o.clock.now();
    void withTimeout(
      () =>
        takeTokens(this.o.sql, {
          batchId: this.o.batchId,
          job: this.o.job,
          asks,
          holdMs: TOKEN_TTL_MS,
          lendMs: LENT_TOKEN_TTL_MS,
        }),
      this.o.storeTimeoutMs,
    )
      .then(
        (grants) => {
          const now = this.o.clock.now();
          for (const g of grants) {
            if (g.granted > 0)
              this.held.set(g.key, { n: g.granted, size: g.granted, lent: g.holdMs > TOKEN_TTL_MS, until: sentAt + g.holdMs });
            if (g.granted < (wants.get(g.key) ?? 0)) this.emptyUntil.set(g.key, now + Math.max(g.nextInMs, 1));
            else this.emptyUntil.delete(g.key);
          }
          for (const g of grants) {
            if (this.rates.size >= 10_000 && !this.rates.has(g.key)) this.rates.clear();
            this.rates.set(g.key, g.rate);
          }
        },
        (error) => this.o.onError(error),
      )
      .finally(() => {
        this.asking = false;
        this.o.onAnswer();
      });
  }
}
