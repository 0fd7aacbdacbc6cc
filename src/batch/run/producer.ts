// The producer of a run (docs/design.md, "The run, inside"; "Batches" and "Rate limits"): what
// the run has claimed and not yet started, when to claim again (due times), the rate gate, and
// the run's slots. It keeps the slots full: claims run ahead of execution into a local queue of
// at most `parallel + queueDepth` items (running included; deeper for short attempts, see
// `depth`); a freed slot starts the next queued item at once; an item due later (a retry) is
// claimed shortly before it is due and started by a local timer when it is due. The
// completer's statements carry its claims.
import type { ClaimedRow, StepResult } from '../sql/moves.js';
import { releaseOrphans } from '../sql/runs.js';
import { poolLimitsOf } from '../pool.js';
import type { PoolGate } from '../pool-gate.js';
import { RATE_WAIT_IN_QUEUE_MS, type RateLimit } from '../rate.js';
import type { RateGate } from '../rate-gate.js';
import { withTimeout } from '../../store/timeout.js';
import { StoreFailure, type RunContext } from './context.js';
import { givenBack } from './settled.js';
import { CLAIM_AHEAD_HORIZON_MS, CLAIM_AHEAD_MS, QUICK_ATTEMPT_MS, type Settled } from './types.js';

/** A claimed item waiting in the run's queue: start it at `startAt` (local clock; 0: at once). */
interface Queued {
  item: ClaimedRow;
  startAt: number;
  /** Its rate-limit key, once computed (rate-limited batches only). */
  rateKey?: string;
  /** Its pool key, once computed (batches with a pool only). */
  poolKey?: string;
}

/** What the producer asks of the run's other collaborators. */
export interface ProducerDeps {
  /** Whether the last good beat still keeps the batch from being taken over (lifecycle). */
  beatValid(): boolean;
  /** Whether the failures stored and settling are more than the batch tolerates (lifecycle). */
  doomed(): boolean;
  /** Items executing now (executor). */
  running(): number;
  /** The run's mean attempt, ms of real time; 0 before one settled (executor). */
  meanMs(): number;
  /** The run's mean move + claim round trip, ms of real time; 0 before one (completer). */
  stepMs(): number;
  /** Start one item's attempt (executor). */
  launch(item: ClaimedRow): void;
  /** A claimed item goes back with a move (completer). */
  settle(s: Settled): void;
}

/** Claims, the claim-ahead queue, due times, the rate gate and the slots of one run. */
export class Producer {
  /** `parallel + queueDepth`: what a rate-limited run holds (its queue never deepens), for the gate's blocks. */
  private readonly capacity: number;
  private queue: Queued[] = [];
  /** The tokens of a rate-limited batch (docs/design.md, "Rate limits"); undefined without a limit. */
  private gate: RateGate | undefined;
  /**
   * The permits of the batch's concurrency pool (docs/design.md, "Concurrency pools");
   * undefined without a pool, and then nothing here costs anything.
   */
  private pool: PoolGate | undefined;
  /** A timer that wakes the run when a rate-limited key in its queue may have a token again. */
  private rateTimer: AbortController | undefined;
  /** The store may hold due pending items this run has not claimed. */
  private moreDue = true;
  /** A claim's answer was lost: items may be running under this run that it never received. */
  private claimUncertain = false;
  /** Local clock time of the next retry known to be due, and the timer waiting for it. */
  private dueAt = Infinity;
  private dueTimer: AbortController | undefined;
  /** Local clock time when the next item claimed ahead of its due time may start, and its timer. */
  private startAt = Infinity;
  private startTimer: AbortController | undefined;

  constructor(
    private readonly ctx: RunContext,
    private readonly d: ProducerDeps,
  ) {
    const s = ctx.s;
    this.capacity = s.parallel + s.queueDepth;
  }

  /**
   * Make the gates the batch needs, its rate limit's and its pool's, before the run claims: each
   * is a chunk of its own (rate-gate.ts, pool-gate.ts, with their statements) imported here, so a
   * run of a batch with neither loads neither (docs/design.md, "Cold starts and code splitting").
   * @throws {StoreFailure} a gate's module did not load (the run ends as on a store that keeps failing).
   */
  async open(): Promise<void> {
    const ctx = this.ctx;
    const rate = ctx.batch.ratePerSecond;
    const limit = rate != null ? { ...ctx.s.rateLimit, perSecond: rate } : ctx.s.rateLimit;
    const pool = ctx.batch.pool ?? ctx.s.pool?.name;
    try {
      if (limit && !this.gate) this.gate = this.rateGate((await import('../rate-gate.js')).RateGate, limit);
      if (pool) this.pool = this.poolGate((await import('../pool-gate.js')).PoolGate, pool);
    } catch (e) {
      ctx.storeError(e, 1);
      throw new StoreFailure(`the gates of batch ${ctx.batch.id} did not load: ${(e as Error)?.message ?? e}`);
    }
  }

  /** The run's side of its batch's pool `name`: the start's, else the job's. */
  private poolGate(Gate: typeof PoolGate, name: string): PoolGate {
    const ctx = this.ctx;
    const spec = ctx.s.pool;
    return new Gate({
      sql: ctx.sql,
      pool: name,
      runId: ctx.id,
      // A pool named by a start exists (checked at start); the job's is made from its spec.
      defaults: spec && spec.name === name ? poolLimitsOf(spec) : { total: 1, perKey: null },
      key: spec?.key,
      params: ctx.batch.params,
      leaseMs: ctx.s.staleMs,
      clock: ctx.s.clock,
      random: ctx.s.random,
      storeTimeoutMs: ctx.s.storeTimeoutMs,
      onAnswer: () => ctx.wake(),
      onError: (error) => ctx.storeError(error, 1),
    });
  }

  /** An item's attempt ended: its pool permit is free for the next item (nothing without a pool). */
  ended(itemKey: string): void {
    this.pool?.end(itemKey);
  }

  /** Whether the run holds permits of a pool (its beat renews their leases). */
  pooled(): boolean {
    return this.pool !== undefined;
  }

  /** The beat: the pool's leases are renewed (they lapse staleMs after the last). */
  renewPool(): void {
    this.pool?.renew();
  }

  /**
   * The run is over: every permit it holds goes back (one statement, bounded by
   * `storeTimeoutMs`; on failure its leases lapse by themselves within staleMs).
   */
  async releasePool(): Promise<void> {
    const pool = this.pool;
    if (!pool) return;
    pool.stop();
    const ctx = this.ctx;
    try {
      // Loaded with the gate already (pool-gate.ts imports the pools' statements).
      const { releasePermits } = await import('../sql/pools.js');
      await withTimeout(
        () => releasePermits(ctx.sql, { pool: ctx.batch.pool ?? ctx.s.pool!.name, run: ctx.id }),
        ctx.s.storeTimeoutMs,
      );
    } catch (error) {
      ctx.storeError(error, 1);
    }
  }

  /** The run's side of a fleet-wide rate limit (docs/design.md, "Rate limits"). */
  private rateGate(Gate: typeof RateGate, limit: RateLimit): RateGate {
    const ctx = this.ctx;
    return new Gate({
      sql: ctx.sql,
      batchId: ctx.batch.id,
      job: ctx.batch.job,
      limit,
      clock: ctx.s.clock,
      storeTimeoutMs: ctx.s.storeTimeoutMs,
      onAnswer: () => ctx.wake(),
      onError: (error) => ctx.storeError(error, 1),
    });
  }

  /**
   * A rate the beat read from the batch: a rate set by a PATCH on a batch that had none is kept
   * from now on (a run with a gate reads the batch's rate at every take, and from the beat too,
   * so it stops spacing items it gives back at an old rate before its next take).
   */
  useBatchRate(perSecond: number): void {
    if (this.gate) {
      this.gate.useBatchRate(perSecond);
      return;
    }
    // The batch had no limit, so no gate: its module loads first (a failed load is reported, and
    // the next beat tries again).
    void import('../rate-gate.js').then(
      ({ RateGate }) => {
        if (this.gate) this.gate.useBatchRate(perSecond);
        else this.gate = this.rateGate(RateGate, { ...this.ctx.s.rateLimit, perSecond });
      },
      (e) => this.ctx.storeError(e, 1),
    );
  }

  /**
   * Retry-After with a rate limit: the item's whole key waits, across the fleet (and only that
   * key). Nothing without a limit.
   */
  pauseKey(item: ClaimedRow, ms: number): void {
    if (this.gate) this.gate.pause(this.gate.keyOf({ key: item.key, input: item.input, params: this.ctx.batch.params }), ms);
  }

  /** Items claimed and waiting in the local queue (not started). */
  queued(): number {
    return this.queue.length;
  }

  /** Items the run may hold at once now: `parallel` and the queue's {@link depth}, running ones included. */
  holds(): number {
    return this.ctx.s.parallel + this.depth();
  }

  /**
   * Items the queue may hold now beyond the running ones (docs/design.md, "The pipelined run"):
   * `queueDepth`, deepened up to `maxQueueDepth` to what the slots start within
   * {@link CLAIM_AHEAD_HORIZON_MS} and two mean move + claim round trips at the mean attempt
   * (`parallel × (horizon + 2 × round trip) / mean`), so the slots stay busy while the flusher
   * lingers and its statement travels, and a run holds no item it would not start soon.
   * Not deepened before an attempt settled, nor with a rate gate or a pool (items would wait
   * there for a token or a permit). Attempts under {@link QUICK_ATTEMPT_MS} hold twice the cap
   * (`2 × (parallel + maxQueueDepth)` in all): a run of them is bound by its statements, each
   * statement is sent before the items the last one claimed start ({@link quick}; run.ts, the
   * flusher), and the run then holds those items and room for the next claim of as many.
   */
  private depth(): number {
    const s = this.ctx.s;
    if (s.maxQueueDepth <= s.queueDepth || this.gate || this.pool) return s.queueDepth;
    const mean = this.d.meanMs();
    if (!(mean > 0)) return s.queueDepth;
    if (mean < QUICK_ATTEMPT_MS) return 2 * s.maxQueueDepth + s.parallel;
    const horizon = CLAIM_AHEAD_HORIZON_MS + 2 * this.d.stepMs();
    return Math.min(s.maxQueueDepth, Math.max(s.queueDepth, Math.ceil((s.parallel * horizon) / mean)));
  }

  /**
   * Whether the flusher sends each statement before the items the last one claimed start
   * (docs/design.md, "The pipelined run"): the run's attempts are quick, under
   * {@link QUICK_ATTEMPT_MS} on average (once one settled), so its statements are its cost; and
   * no move can end its batch early (no `minSucceeded`, no `toleratedFailures`), since those
   * items run before the statement's answer says whether the batch ended.
   */
  quick(): boolean {
    const mean = this.d.meanMs();
    const b = this.ctx.batch;
    return mean > 0 && mean < QUICK_ATTEMPT_MS && b.minSucceeded == null && b.toleratedFailures == null;
  }

  /** Claims that fit: free room in the local queue while the store may hold due items. */
  room(): number {
    if (this.ctx.reason || !this.moreDue || !this.d.beatValid() || this.d.doomed()) return 0;
    return Math.max(0, this.holds() - this.d.running() - this.queue.length);
  }

  /**
   * Whether something here will wake the run: a queued item, a due timer, a rate answer, or
   * (when items are due but the beats are too old to claim or start them) the next good beat.
   */
  waiting(): boolean {
    return (
      this.queue.length > 0 ||
      this.dueTimer !== undefined ||
      !!this.gate?.pending ||
      !!this.pool?.pending ||
      (this.moreDue && !this.d.beatValid())
    );
  }

  /** A claim's answer was lost: it may have committed, so orphans are released when idle. */
  claimLost(): void {
    this.claimUncertain = true;
  }

  /** The store may hold due pending items again (a move landed, a page of the source was stored). */
  mayBeDue(): void {
    this.moreDue = true;
  }

  /**
   * Take the items claimed by a step's answer into the queue (`claim`: the room it asked for;
   * `sentAt`: local time the statement was sent).
   */
  claimed(r: StepResult, claim: number, sentAt: number): void {
    this.moreDue = r.claimed.length >= claim;
    // Counted from the answer, which came after the database's now(): never early.
    const answeredAt = this.ctx.s.clock.now();
    for (const item of r.claimed) this.queue.push({ item, startAt: item.due_in_ms > 0 ? answeredAt + item.due_in_ms : 0 });
    if (!this.moreDue && r.nextDueMs !== null) this.dueIn(r.nextDueMs - CLAIM_AHEAD_MS, sentAt);
  }

  /**
   * With nothing running or queued, give back every item a claim whose answer was lost left
   * running under this run (each is such an orphan). Resolves to whether a statement was sent.
   */
  async releaseOrphans(): Promise<boolean> {
    if (!this.claimUncertain) return false;
    this.claimUncertain = false;
    const ctx = this.ctx;
    await ctx.store(() => releaseOrphans(ctx.sql, ctx.batch.id, ctx.id));
    this.moreDue = true;
    return true;
  }

  /** Drop the queue: the batch ended, its items go back with the end. */
  clear(): void {
    this.queue = [];
  }

  /** Empty the queue for the handoff, which gives its items back: the items it held. */
  takeQueued(): ClaimedRow[] {
    const queued = this.queue.map((e) => e.item);
    this.queue = [];
    return queued;
  }

  /** The run is over: no timer of its fires any more. */
  stop(): void {
    this.dueTimer?.abort();
    this.startTimer?.abort();
    this.rateTimer?.abort();
    this.pool?.stop();
  }

  /**
   * Start queued items on free slots, each once it is due (a timer wakes the run for one claimed
   * ahead of its time). Nothing starts once the run stops or lost its batch, nor while its beats
   * are too old to keep the batch (the next good beat starts them).
   */
  startQueued(): void {
    // A run that ended starts nothing (a slot freed by an aborted item, or the flusher's start
    // scheduled before a store failure ended the run).
    if (this.ctx.ended) return;
    if (this.ctx.reason || this.queue.length === 0 || !this.d.beatValid() || this.d.doomed()) {
      // Nothing starts: free permits go back.
      this.pool?.sync(new Map());
      return;
    }
    const s = this.ctx.s;
    let now: number | undefined;
    let next = Infinity;
    // Rate-limited batches: tokens to ask for per key (one per free slot an item of it could
    // take), the shortest wait of a key without one, and items of each key sent back so far.
    const wants = new Map<string, number>();
    let asked = 0;
    let rateWait = Infinity;
    const sentBack = new Map<string, number>();
    // Batches with a pool: due items per pool key that want a permit (docs/design.md, "Concurrency pools").
    const permitWants = this.pool && new Map<string, number>();
    for (let i = 0; i < this.queue.length && this.d.running() + asked < s.parallel;) {
      const entry = this.queue[i];
      const { item, startAt } = entry;
      if (startAt > 0 && startAt > (now ??= s.clock.now())) {
        next = Math.min(next, startAt);
        i++;
        continue;
      }
      const pool = this.pool;
      if (pool) {
        const key = (entry.poolKey ??= pool.keyOf(item));
        if (!pool.available(key)) {
          permitWants!.set(key, (permitWants!.get(key) ?? 0) + 1);
          asked++;
          i++;
          continue;
        }
      }
      if (this.gate) {
        const key = (entry.rateKey ??= this.gate.keyOf({ key: item.key, input: item.input, params: this.ctx.batch.params }));
        const t = this.gate.take(key, (now ??= s.clock.now()));
        if (t.go) {
          // Running low: ask for the next block now, while these tokens start items.
          if (this.gate.runningLow(key, now, this.capacity)) wants.set(key, wants.get(key) ?? 0);
        } else if (t.ask) {
          wants.set(key, (wants.get(key) ?? 0) + 1);
          if (permitWants) permitWants.set(entry.poolKey!, (permitWants.get(entry.poolKey!) ?? 0) + 1);
          asked++;
          i++;
          continue;
        }
        if (!t.go) {
          // The key's bucket is empty for t.waitMs: a few of its items wait here for it, the
          // rest go back to pending, each due at a later token's time, using no attempt, so they
          // hold no slot and no room of the queue that other keys' items could use.
          const n = sentBack.get(key) ?? 0;
          sentBack.set(key, n + 1);
          const keep = Math.max(1, Math.ceil((this.gate.rate(key) * RATE_WAIT_IN_QUEUE_MS) / 1000));
          if (t.waitMs <= RATE_WAIT_IN_QUEUE_MS && n < keep) {
            rateWait = Math.min(rateWait, t.waitMs);
            // It keeps the permit it found: it starts when the token comes.
            if (permitWants) permitWants.set(entry.poolKey!, (permitWants.get(entry.poolKey!) ?? 0) + 1);
            i++;
            continue;
          }
          this.queue.splice(i, 1);
          this.giveBackForRate(item, t.waitMs + ((n + 1) * 1000) / this.gate.rate(key));
          continue;
        }
      }
      this.queue.splice(i, 1);
      if (pool) pool.start(item.key, entry.poolKey!);
      this.d.launch(item);
    }
    // Permits nothing here will use go back; more are asked for when items want them.
    if (permitWants) this.pool!.sync(permitWants);
    if (this.gate && wants.size > 0) {
      for (const [key, need] of wants) wants.set(key, this.gate.askSize(key, need, this.capacity));
      this.gate.ask(wants, this.capacity);
    }
    if (rateWait < Infinity) this.wakeForRate(rateWait);
    if (next < this.startAt) this.startWhenDue(next, now!);
  }

  /** Start queued items again in `ms`, when a rate-limited key may have a token (one timer). */
  private wakeForRate(ms: number): void {
    if (this.rateTimer) return;
    const timer = new AbortController();
    this.rateTimer = timer;
    void this.ctx.s.clock.sleep(ms, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.rateTimer = undefined;
      this.startQueued();
      this.ctx.wake();
    });
  }

  /** Wake the run at `at` (local clock; `now` is now), when an item claimed ahead is due. */
  private startWhenDue(at: number, now: number): void {
    this.startTimer?.abort();
    const timer = new AbortController();
    this.startTimer = timer;
    this.startAt = at;
    void this.ctx.s.clock.sleep(at - now, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.startTimer = undefined;
      this.startAt = Infinity;
      this.ctx.wake();
    });
  }

  /**
   * Send a claimed item back to pending, due `delayMs` from now, with its attempt given back (it
   * never started): its key had no token (docs/design.md, "Rate limits"). The next flush moves it.
   */
  private giveBackForRate(c: ClaimedRow, delayMs: number): void {
    this.d.settle(givenBack(c, 'given-back', { delayMs: Math.ceil(delayMs) }));
  }

  /** A retry's move landed: claim it again shortly before its `delayMs` from `sentAt` is up. */
  retryDue(delayMs: number, sentAt: number): void {
    this.dueIn(delayMs - CLAIM_AHEAD_MS, sentAt);
  }

  /**
   * Claim again `ms` after `from` (local clock; default now): a retry or a pending item of the
   * store comes due then. At once when that time has come.
   */
  dueIn(ms: number, from = this.ctx.s.clock.now()): void {
    const clock = this.ctx.s.clock;
    const wait = from + ms - clock.now();
    if (!(wait > 0)) {
      this.moreDue = true;
      return;
    }
    const at = from + ms;
    if (at >= this.dueAt) return;
    this.dueTimer?.abort();
    const timer = new AbortController();
    this.dueTimer = timer;
    this.dueAt = at;
    void clock.sleep(wait, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.dueTimer = undefined;
      this.dueAt = Infinity;
      this.moreDue = true;
      this.ctx.wake();
    });
  }
}
