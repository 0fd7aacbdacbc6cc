// One batch's execution by one run (docs/design.md, "Batches"): a pipeline of claims, items and
// moves. The Runner (runner.ts) takes batches over and owns many runs.
import { setMaxListeners } from 'node:events';
import { InvalidSettingError, LeaseholdError } from '../errors.js';
import { withTimeout, type Sql } from '../store/index.js';
import type { Clock } from '../clock.js';
import { BatchGivenUpError, BatchLostError, ItemStaleError, ItemTimeoutError, RetryAfterError } from './errors.js';
import { ItemBeats } from './heartbeat.js';
import { recoverStaleItems } from './sql/heartbeats.js';
import * as q from './sql/index.js';
import { RATE_WAIT_IN_QUEUE_MS, RateGate, type RateLimit } from './rate.js';
import * as qs from './sql/sources.js';
import { readItems } from './items.js';
import { s3Client } from './s3.js';
import { readPage, SourceReadError, type SourceCursor, type SourcePage, type StoredSource } from './source.js';
import { writeResultsAfterFinish } from './results.js';
import { ItemNotStartedError, type IgnoredResults } from './calls.js';
import type { S3Client } from '@aws-sdk/client-s3';
import { encodeOutput, errorText } from './values.js';
import type { BatchInfo, Executor, ItemState, RunOutcome, RunResult } from './types.js';

/**
 * How an item's turn in a run ended, once the move saying so is stored:
 * - `done`, `failed`: for good (`failed`: attempts used up, a permanent error, or an output that
 *   cannot be stored);
 * - `retry`: the attempt failed; the item is pending again after its backoff;
 * - `interrupted`: the run stopped while the item ran; the attempt counts, the item is pending;
 * - `given-back`: claimed but never started before the run stopped; pending, attempts unchanged;
 * - `resumable`: the run stopped while the item ran, after it stored a checkpoint in this attempt;
 *   pending with the attempt given back, the next run goes on from the checkpoint;
 * - `stale`: recovered for want of heartbeats (`itemStaleMs`); the attempt counts, pending again
 *   (`failed` when its attempts are used up).
 */
export type ItemOutcome = 'done' | 'failed' | 'retry' | 'interrupted' | 'given-back' | 'waiting' | 'resumable' | 'stale';

/** What the runner reports as it goes (for logs and metrics); never needed for correctness. */
export type RunnerEvent =
  | {
      type: 'run-started';
      batchId: string;
      runId: string;
      takeover: boolean;
      tenant: string;
      priority: number;
      /** ms from the batch's start to this run, on its first run (database clock); else null. */
      queueWaitMs: number | null;
    }
  | { type: 'run-ended'; result: RunResult }
  | { type: 'item-ended'; batchId: string; runId: string; key: string; attempt: number; outcome: ItemOutcome }
  | { type: 'store-error'; batchId: string; runId: string; error: unknown; tries: number }
  | { type: 'unknown-job'; batchId: string; job: string }
  /** A batched call answered entries that settled no item of it (see {@link IgnoredResults}). */
  | ({ type: 'call-results-ignored'; batchId: string } & IgnoredResults);

/** Most attempts per item a runner or job may set. */
export const MAX_ATTEMPTS = 1_000;
/** Largest `backoffMs` and `maxBackoffMs` a runner or job may set, ms (one day). */
export const MAX_BACKOFF_MS = q.MAX_DELAY_MS;

/** The settings one run works with (the runner's, with the executor's overrides applied). */
export interface RunSettings {
  parallel: number;
  /** Items claimed ahead of execution beyond `parallel`. */
  queueDepth: number;
  beatMs: number;
  staleMs: number;
  attempts: number;
  backoffMs: number;
  maxBackoffMs: number;
  moveTries: number;
  moveBackoffMs: number;
  storeTimeoutMs: number;
  drainMs: number;
  maxOutputBytes: number;
  maxStalledRuns: number;
  /** Default per-tenant limit of running batches (for the slice check). */
  maxRunning: number;
  /** The run's time slice, ms (docs/design.md, "Tenant fairness"). */
  sliceMs: number;
  /** The executor's item timeout, ms; the batch's own wins (docs/design.md, "Item timeouts"). */
  timeoutMs?: number;
  /** Retry-After waits per item that use no attempt (docs/design.md, "Retry-After"). */
  maxRetryAfter: number;
  /** The job's fleet-wide rate limit (docs/design.md, "Rate limits"); a batch's own rate wins. */
  rateLimit?: RateLimit;
  /** The job's `itemStaleMs` (docs/design.md, "Item heartbeats and checkpoints"); none: off. */
  itemStaleMs?: number;
  /** Most items a batch's source may hold (`LEASEHOLD_MAX_SOURCE_ITEMS`, 10,000,000). */
  maxSourceItems: number;
  /** Largest input of one item read from a source, bytes of JSON (65,536). */
  maxInputBytes: number;
  /** Bytes of a source object one page reads. */
  sourceRangeBytes: number;
  /** Objects of a source prefix one page lists, at least. */
  sourcePageObjects: number;
  /** The S3 client that reads sources and writes results (default: the container's). */
  s3?: () => S3Client;
  clock: Clock;
  random: () => number;
  onEvent: (event: RunnerEvent) => void;
}

/**
 * Retry delay before attempt `attempt + 1` after attempt `attempt` failed, in ms, with "full
 * jitter" (docs/design.md, "Attempts, backoff, failures"): drawn uniformly from
 * `[0, interval)`, where the backoff interval is `backoffMs × 2^(attempt−1)` capped at
 * `maxBackoffMs` (default: no cap below {@link MAX_BACKOFF_MS}) and at {@link MAX_BACKOFF_MS}.
 * So a wave of items that failed together (a downstream blip) comes back spread evenly over the
 * whole interval, not in a burst at its start. `random` gives numbers in `[0, 1)`. Finite for
 * any attempt; on average half the interval.
 */
export function retryDelayMs(
  backoffMs: number,
  attempt: number,
  random: () => number,
  maxBackoffMs: number = MAX_BACKOFF_MS,
): number {
  return random() * backoffIntervalMs(backoffMs, attempt, maxBackoffMs);
}

/**
 * The backoff interval of a retry after attempt `attempt` failed, in ms: `backoffMs ×
 * 2^(attempt−1)`, at most `maxBackoffMs` and {@link MAX_BACKOFF_MS}. {@link retryDelayMs} draws
 * the delay from `[0, interval)`. Finite for any attempt.
 */
export function backoffIntervalMs(backoffMs: number, attempt: number, maxBackoffMs: number = MAX_BACKOFF_MS): number {
  // 2^60 × any allowed backoff is far past every cap, and stays finite (0 × ∞ would be NaN).
  const base = backoffMs * 2 ** Math.min(Math.max(attempt - 1, 0), 60);
  return Math.min(base, maxBackoffMs, MAX_BACKOFF_MS);
}

/**
 * Check retry settings: `attempts` 1 to {@link MAX_ATTEMPTS}, `backoffMs` and `maxBackoffMs`
 * 0 to {@link MAX_BACKOFF_MS}; unset ones are not checked. `prefix` goes before each setting's
 * name in the message (`executor.`, `job "x": `).
 * @throws {InvalidSettingError} naming the first setting out of range.
 */
export function checkRetrySettings(s: { attempts?: number; backoffMs?: number; maxBackoffMs?: number }, prefix = ''): void {
  const within = (v: number | undefined, name: string, max: number, int: boolean, min = int ? 1 : 0) => {
    if (v === undefined) return;
    if (!Number.isFinite(v) || v < min || v > max || (int && !Number.isInteger(v))) {
      throw new InvalidSettingError(`${prefix}${name}`, `must be ${int ? 'an integer ' : ''}from ${min} to ${max} (got ${v})`);
    }
  };
  within(s.attempts, 'attempts', MAX_ATTEMPTS, true);
  within(s.backoffMs, 'backoffMs', MAX_BACKOFF_MS, false);
  within(s.maxBackoffMs, 'maxBackoffMs', MAX_BACKOFF_MS, false);
}

/**
 * The store failed past its retries while the run moved items or beat: the run ends with outcome
 * `store-error` and this as its `error` (logged by the runner). Code `store_failure`.
 */
class StoreFailure extends LeaseholdError {
  constructor(message: string) {
    super('store_failure', message);
  }
}

/**
 * A move statement that PostgreSQL refused for the data it carried (an item's value). Private to
 * this file: the run catches it and stores the moves one by one, so it never reaches a caller or
 * a log (no `code`).
 */
class UnstorableMoves extends Error {}

/** SQLSTATE classes of errors caused by the data a statement carries, not by the store. */
function isDataError(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|54)/.test(code);
}

/**
 * How long before a pending item is due a run claims it (ms), so that a retry starts on a local
 * timer when it is due instead of a claim's round trip after.
 */
const CLAIM_AHEAD_MS = 200;

/** How often a run with nothing to do looks for items again while its batch's source is read, ms. */
const READING_POLL_MS = 250;

/** The reason an item's timeout wait is aborted with once the item settled (nobody reads it). */
const ITEM_SETTLED = 'item settled';

/** Tries of one page of a source that S3 failed to serve (a timeout, a 5xx) before the run hands off. */
const READ_TRIES = 4;

/** A page of the source as read, with its items as the JSON text of a store; or why it could not be read. */
type PageRead = { page: SourcePage; json: string; count: number } | { error: unknown };

/** A claimed item waiting in the run's queue: start it at `startAt` (local clock; 0: at once). */
interface Queued {
  item: q.ClaimedRow;
  startAt: number;
  /** Its rate-limit key, once computed (rate-limited batches only). */
  rateKey?: string;
}

/** A settled item waiting for its move, with what the move means. */
interface Settled {
  move: q.MoveRow;
  outcome: ItemOutcome;
}

/**
 * One run: a runner's ownership of one batch, from takeover to its end (docs/design.md,
 * "Batches").
 *
 * It keeps its slots full. Claims run ahead of execution into a local queue of at most
 * `parallel + queueDepth` items (running included); a freed slot starts the next queued item at
 * once. An item due later (a retry) is claimed shortly before it is due and started by a local
 * timer when it is due. One flusher
 * writes: each statement carries every item settled since the last one, plus a claim for the
 * free room, under one ownership check, so at most one move is in flight and moves stay ordered.
 * A short count means the batch was lost: nothing more starts, and nothing more is written.
 * On a handoff, items claimed but never started go back to pending with their attempts
 * unchanged, in the handoff statement.
 */
export class Run {
  readonly id: string;
  private readonly items = new AbortController();
  /**
   * Why the run stops: asked to (handoff), lost its lease, its slice ended with others waiting,
   * or it is a surplus run above a lowered `maxConcurrency`.
   */
  private reason: 'stop' | 'lost' | 'slice' | 'surplus' | undefined;
  /** This run ended the batch `failed` because more items failed than it tolerates. */
  private intolerable = false;
  /** The batch's failed items (of every run) as last counted by this run's tolerance check. */
  private failedStored = 0;
  /** Items settled as failed whose move has not landed yet. */
  private failedSettling = 0;
  /**
   * Failed items the batch tolerates, as the last end check answered (docs/design.md, "End"):
   * a percent follows the items stored so far, and waits (null) while the source is read.
   * Keeping the allowance seen at takeover left a run that took a source batch over at 0 items
   * sure that its first failure doomed the batch: it claimed and started nothing more, its
   * queued items stayed `running` while it beat, and the batch never ended.
   */
  private allowedFailures: number | null;
  /** This run's reader stored the source's last page: the flusher checks the tolerance once. */
  private judgeTolerance = false;
  /** The run is over: settling items are no longer written. */
  private ended = false;
  private readonly capacity: number;
  private queue: Queued[] = [];
  private readonly executing = new Map<string, Promise<void>>();
  private settled: Settled[] = [];
  /** The tokens of a rate-limited batch (docs/design.md, "Rate limits"); undefined without a limit. */
  private gate: RateGate | undefined;
  /** A timer that wakes the run when a rate-limited key in its queue may have a token again. */
  private rateTimer: AbortController | undefined;
  /** The store may hold due pending items this run has not claimed. */
  private moreDue = true;
  /** A claim's answer was lost: items may be running under this run that it never received. */
  private claimUncertain = false;
  /** A move of this run landed (and set the batch's stalled runs to 0). */
  private progressRecorded = false;
  /** Local clock time of the next retry known to be due, and the timer waiting for it. */
  private dueAt = Infinity;
  private dueTimer: AbortController | undefined;
  /** Local clock time when the next item claimed ahead of its due time may start, and its timer. */
  private startAt = Infinity;
  private startTimer: AbortController | undefined;
  private wakeUp: (() => void) | undefined;
  /** Local clock time when the statement behind the last good beat (or the takeover) was sent. */
  private beatSentAt: number;
  private finishedItems = 0;
  private statements = 0;
  /** Aborts the results write after the finish when the run is asked to stop. */
  private readonly results = new AbortController();
  /** This run ended the batch `failed` because its source could not be read. */
  private sourceFailed = false;
  /** Its attempts' heartbeats and checkpoints (docs/design.md, "Item heartbeats and checkpoints"). */
  private readonly beats: ItemBeats;

  constructor(
    private readonly sql: Sql,
    private readonly s: RunSettings,
    readonly batch: BatchInfo,
    runId: string,
    private readonly executor: Executor,
    /** Local clock time when the takeover statement was sent (it set the first beat). */
    takenAt: number = s.clock.now(),
  ) {
    this.id = runId;
    this.beatSentAt = takenAt;
    this.capacity = s.parallel + s.queueDepth;
    const percent = batch.toleratedFailures !== null && 'percent' in batch.toleratedFailures;
    this.allowedFailures = batch.reading && percent ? null : batch.allowedFailures;
    // Every in-flight item listens on this one signal; `parallel` may well exceed 10.
    setMaxListeners(0, this.items.signal);
    const limit = batch.ratePerSecond != null ? { ...s.rateLimit, perSecond: batch.ratePerSecond } : s.rateLimit;
    this.gate = limit && this.rateGate(limit);
    this.beats = new ItemBeats({
      sql,
      batchId: batch.id,
      runId,
      clock: s.clock,
      staleMs: s.itemStaleMs,
      storeTimeoutMs: s.storeTimeoutMs,
      store: (f) => this.store(f),
      sent: () => this.statements++,
      onError: (error) => s.onEvent({ type: 'store-error', batchId: batch.id, runId, error, tries: 1 }),
    });
  }

  /** The run's side of a fleet-wide rate limit (docs/design.md, "Rate limits"). */
  private rateGate(limit: RateLimit): RateGate {
    return new RateGate({
      sql: this.sql,
      batchId: this.batch.id,
      job: this.batch.job,
      limit,
      clock: this.s.clock,
      storeTimeoutMs: this.s.storeTimeoutMs,
      onAnswer: () => this.wake(),
      onError: (error) => this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries: 1 }),
    });
  }

  /** Ask the run to hand off: stop claiming, let in-flight items settle, clear the beat. */
  requestStop(): void {
    if (this.reason !== 'lost') this.reason = 'stop';
    // A results write after the finish stops too (a worker at its deadline); the scheduler's
    // pass writes them (docs/design.md, "Sources and results").
    this.results.abort(new Error('the run was asked to stop while it wrote the results'));
    this.wake();
  }

  private markLost(): void {
    this.reason = 'lost';
    this.wake();
  }

  /** Run the batch to its end; never throws (a failure is the result's outcome and error). */
  async execute(): Promise<RunResult> {
    const beats = new AbortController();
    const beating = this.beatLoop(beats.signal);
    const slicing = this.sliceLoop(beats.signal);
    const reading = this.batch.reading ? this.readLoop(beats.signal) : Promise.resolve();
    let outcome: RunOutcome;
    let error: Error | undefined;
    try {
      outcome = await this.loop();
    } catch (e) {
      outcome = e instanceof StoreFailure ? 'store-error' : e instanceof BatchGivenUpError ? 'failed' : 'lost';
      error = e instanceof Error ? e : new Error(String(e));
    } finally {
      this.ended = true;
      // The run is over and can write no result: its in-flight items must stop too.
      this.items.abort();
      this.dueTimer?.abort();
      this.startTimer?.abort();
      this.rateTimer?.abort();
      beats.abort();
      await Promise.all([beating, slicing, reading]);
    }
    // The run's reader ended the batch: it ended `failed` by this run, as a give-up does.
    if (outcome === 'lost' && this.sourceFailed) [outcome, error] = ['failed', undefined];
    if (outcome === 'lost' && !error) error = new BatchLostError(this.batch.id, this.id);
    // Results are written after the finish, outside the run's lease (the batch is finished);
    // a crash before they are written leaves them to the scheduler (docs/design.md, "Sources and results").
    if ((outcome === 'succeeded' || outcome === 'failed') && this.batch.results) {
      await writeResultsAfterFinish(
        this.sql,
        await this.s3(),
        this.batch.id,
        (e) => this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error: e, tries: 1 }),
        { signal: this.results.signal },
      );
    }
    return {
      batchId: this.batch.id,
      runId: this.id,
      outcome,
      finishedItems: this.finishedItems,
      statements: this.statements,
      error,
    };
  }

  /**
   * Runs in a row that ended without storing anything, this one included: the batch's count
   * less its other live runs (each counted when it started and not yet ended; docs/design.md,
   * "Fan-out"), so runs joining at once never make a healthy batch look stalled.
   */
  private stalledRuns(): number {
    return this.batch.stalledRuns - Math.max(this.batch.liveRuns - 1, 0);
  }

  private async loop(): Promise<RunOutcome> {
    if (this.stalledRuns() > this.s.maxStalledRuns) return this.giveUp();
    await this.store(() => q.recoverRunning(this.sql, { batchId: this.batch.id, run: this.id, attempts: this.s.attempts }));
    // The items recovered may cross the batch's tolerance, or a run that died (or handed off)
    // may have stored failures past it without ending the batch.
    if (await this.endIfIntolerable()) return 'failed';
    const finished = await this.pump();
    if (finished) return finished;
    // The slice ended (or the run is a surplus one): in-flight items finish (neither uses an
    // attempt) unless a stop or a loss comes meanwhile; nothing new starts.
    while ((this.reason === 'slice' || this.reason === 'surplus') && this.executing.size > 0) {
      await new Promise<void>((resolve) => (this.wakeUp = resolve));
      await this.recoverStale();
    }
    // Stopping or lost: in-flight items are told to stop.
    this.items.abort();
    // Work that ignores its signal must not hold the run (and a Lambda worker) past its
    // deadline: after drainMs the run goes on without it. Such items stay `running`; the next
    // takeover counts that attempt and runs them again.
    const drainTimer = new AbortController();
    await Promise.race([
      Promise.allSettled([...this.executing.values()]).then(() => drainTimer.abort()),
      this.s.clock.sleep(this.s.drainMs, drainTimer.signal),
    ]);
    drainTimer.abort();
    if (this.reason === 'lost') return 'lost';
    return this.handOff();
  }

  /**
   * The flusher: one statement at a time, each moving every settled item and claiming the free
   * room. Resolves to the batch's final status once this run finished it, or undefined once the
   * run must stop (handoff or loss).
   */
  private async pump(): Promise<'succeeded' | 'failed' | 'drained' | undefined> {
    for (;;) {
      if (this.reason) return undefined;
      await this.recoverStale();
      if (this.judgeTolerance) {
        this.judgeTolerance = false;
        await this.endIfIntolerable();
      }
      if (this.intolerable) return 'failed';
      this.startQueued();
      if (this.settled.length > 0 || this.room() > 0) {
        // Let items settling in this turn land, so one statement carries them all.
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (this.reason) return undefined;
        await this.step();
        if (this.intolerable) return 'failed';
        continue;
      }
      // Wait for an item to settle, a retry to come due, or (when items are due but the beats
      // are too old to claim or start them) the next good beat.
      if (
        this.executing.size > 0 ||
        this.queue.length > 0 ||
        this.dueTimer ||
        this.gate?.pending ||
        (this.moreDue && !this.beatValid())
      ) {
        await new Promise<void>((resolve) => (this.wakeUp = resolve));
        continue;
      }
      // Nothing runs, nothing is queued, and no item is due that this run knows of.
      if (this.claimUncertain) {
        this.claimUncertain = false;
        // Nothing runs here now, so every item this run holds as running is such an orphan.
        await this.store(() => q.releaseOrphans(this.sql, this.batch.id, this.id));
        this.moreDue = true;
        continue;
      }
      const status = await this.store(() => q.finishBatch(this.sql, this.batch.id, this.id));
      if (status === 'succeeded' || status === 'failed') return status;
      const w = await this.store(() => q.waitState(this.sql, this.batch.id, this.id));
      if (!w.owned) {
        this.markLost();
        return undefined;
      }
      // Items are still being read from the batch's source: look again soon, and never leave.
      if (w.reading) {
        this.dueIn(Math.min(READING_POLL_MS, this.s.beatMs));
        continue;
      }
      // Other runs hold the batch's last items and nothing is due here within a beat: this run
      // leaves (the last run of a batch never does), so the tail does not hold idle workers.
      if (w.liveRuns > 1 && (w.dueInMs === null || w.dueInMs > this.s.beatMs)) {
        const left = await this.leave();
        if (left !== 'kept') return left === 'drained' ? 'drained' : (this.markLost(), undefined);
      }
      // Pending items not due yet (or, should none be pending, look again after a beat).
      this.dueIn(Math.min(w.dueInMs === null ? this.s.beatMs : w.dueInMs - CLAIM_AHEAD_MS, this.s.beatMs));
    }
  }

  /**
   * Leave the batch for want of work, in one statement (see `handOffRun` with `leave`):
   * `drained` when it left, `kept` when it is the batch's last run (it stays), `lost` when its
   * lease was gone.
   */
  private async leave(): Promise<'drained' | 'kept' | 'lost'> {
    const r = await this.store(() =>
      q.handOffRun(this.sql, {
        batchId: this.batch.id,
        run: this.id,
        moves: q.encodeMoves([]),
        hold: '[]',
        recordProgress: false,
        leave: true,
      }),
    );
    return r.handed ? 'drained' : r.kept ? 'kept' : 'lost';
  }

  /** Claims that fit: free room in the local queue while the store may hold due items. */
  private room(): number {
    if (this.reason || !this.moreDue || !this.beatValid() || this.doomed()) return 0;
    return Math.max(0, this.capacity - this.executing.size - this.queue.length);
  }

  /**
   * Whether the last good beat still keeps the batch from being taken over: `staleMs` since it
   * was sent has not passed by the local clock (the database counts from later, when the beat ran).
   * Past that, another run may own the batch and be running the items queued here.
   */
  private beatValid(): boolean {
    return this.s.clock.now() - this.beatSentAt < this.s.staleMs;
  }

  /**
   * Start queued items on free slots, each once it is due (a timer wakes the run for one claimed
   * ahead of its time). Nothing starts once the run stops or lost its batch, nor while its beats
   * are too old to keep the batch (the next good beat starts them).
   */
  private startQueued(): void {
    if (this.reason || this.queue.length === 0 || !this.beatValid() || this.doomed()) return;
    let now: number | undefined;
    let next = Infinity;
    // Rate-limited batches: tokens to ask for per key (one per free slot an item of it could
    // take), the shortest wait of a key without one, and items of each key sent back so far.
    const wants = new Map<string, number>();
    let asked = 0;
    let rateWait = Infinity;
    const sentBack = new Map<string, number>();
    for (let i = 0; i < this.queue.length && this.executing.size + asked < this.s.parallel;) {
      const entry = this.queue[i];
      const { item, startAt } = entry;
      if (startAt > 0 && startAt > (now ??= this.s.clock.now())) {
        next = Math.min(next, startAt);
        i++;
        continue;
      }
      if (this.gate) {
        const key = (entry.rateKey ??= this.gate.keyOf({ key: item.key, input: item.input, params: this.batch.params }));
        const t = this.gate.take(key, (now ??= this.s.clock.now()));
        if (t.go) {
          // Running low: ask for the next block now, while these tokens start items.
          if (this.gate.runningLow(key, now, this.capacity)) wants.set(key, wants.get(key) ?? 0);
        } else if (t.ask) {
          wants.set(key, (wants.get(key) ?? 0) + 1);
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
            i++;
            continue;
          }
          this.queue.splice(i, 1);
          this.giveBackForRate(item, t.waitMs + ((n + 1) * 1000) / this.gate.rate(key));
          continue;
        }
      }
      this.queue.splice(i, 1);
      this.launch(item);
    }
    if (this.gate && wants.size > 0) {
      for (const [key, need] of wants) wants.set(key, this.gate.askSize(key, need, this.capacity));
      this.gate.ask(wants, this.capacity);
    }
    if (rateWait < Infinity && !this.rateTimer) {
      const timer = new AbortController();
      this.rateTimer = timer;
      void this.s.clock.sleep(rateWait, timer.signal).then(() => {
        if (timer.signal.aborted) return;
        this.rateTimer = undefined;
        this.startQueued();
        this.wake();
      });
    }
    if (next < this.startAt) {
      this.startTimer?.abort();
      const timer = new AbortController();
      this.startTimer = timer;
      this.startAt = next;
      void this.s.clock.sleep(next - now!, timer.signal).then(() => {
        if (timer.signal.aborted) return;
        this.startTimer = undefined;
        this.startAt = Infinity;
        this.wake();
      });
    }
  }

  /**
   * Send a claimed item back to pending, due `delayMs` from now, with its attempt given back (it
   * never started): its key had no token (docs/design.md, "Rate limits"). The next flush moves it.
   */
  private giveBackForRate(c: q.ClaimedRow, delayMs: number): void {
    this.settled.push({
      outcome: 'given-back',
      move: {
        key: c.key,
        state: 'pending',
        claimed: c.attempts,
        attempts: c.attempts - 1,
        output: null,
        error: null,
        delayMs: Math.ceil(delayMs),
      },
    });
  }

  /**
   * Whether the failures stored and settling are more than the batch tolerates: the flush under
   * way ends it, so nothing more is claimed or started meanwhile.
   */
  private doomed(): boolean {
    const allowed = this.allowedFailures;
    return allowed !== null && this.failedStored + this.failedSettling > allowed;
  }

  /** One statement: move every settled item and claim the free room. */
  private async step(): Promise<void> {
    const batch = this.settled;
    this.settled = [];
    const failures = batch.filter((b) => b.move.state === 'failed').length;
    const claim = this.room();
    const recordProgress = !this.progressRecorded && batch.length > 0;
    const settled = batch.filter((b) => b.move.state === 'done' || b.move.state === 'failed').length;
    const moves = q.encodeMoves(batch.map((b) => b.move));
    // Due times are counted from the database's now() in the statement, which is no earlier than
    // this: timers armed from it fire on time or a little early (a claim then answers how long
    // is left), never a round trip late.
    const sentAt = this.s.clock.now();
    let r: q.StepResult;
    try {
      r = await this.store(
        () =>
          q.step(this.sql, {
            batchId: this.batch.id,
            run: this.id,
            moves,
            settled,
            claim,
            aheadMs: CLAIM_AHEAD_MS,
            recordProgress,
          }),
        // A claim whose answer is lost may have committed: those items would stay running.
        claim > 0 ? () => (this.claimUncertain = true) : undefined,
        batch.length > 0,
      );
    } catch (e) {
      if (!(e instanceof UnstorableMoves)) throw e;
      await this.moveOneByOne(batch);
      return;
    } finally {
      // Landed, or lost: either way no longer settling.
      this.failedSettling -= failures;
    }
    if (r.moved < batch.length && !(await this.movesLanded(moves, batch.length))) return this.markLost();
    this.landed(batch, sentAt);
    // The items it claimed are put back by the end: they are not queued.
    if (failures > 0 && (await this.endIfIntolerable())) return;
    if (claim > 0) {
      this.moreDue = r.claimed.length >= claim;
      // Counted from the answer, which came after the database's now(): never early.
      const answeredAt = this.s.clock.now();
      for (const item of r.claimed) this.queue.push({ item, startAt: item.due_in_ms > 0 ? answeredAt + item.due_in_ms : 0 });
      if (!this.moreDue && r.nextDueMs !== null) this.dueIn(r.nextDueMs - CLAIM_AHEAD_MS, sentAt);
    }
    this.startQueued();
  }

  /**
   * PostgreSQL refused a move for a value it carried (despite the checks at settle time): write
   * each item alone, and store the one it refuses as failed with the reason, so the others land.
   */
  private async moveOneByOne(batch: Settled[]): Promise<void> {
    for (let item of batch) {
      let r: q.StepResult;
      try {
        r = await this.moveAlone(item, true);
      } catch (e) {
        if (!(e instanceof UnstorableMoves)) throw e;
        const m = item.move;
        const error = `its result cannot be stored: ${errorText(e.cause)}`;
        item = { outcome: 'failed', move: { ...m, state: 'failed', attempts: m.claimed, output: null, error, delayMs: 0 } };
        r = await this.moveAlone(item, false);
      }
      if (r.moved < 1 && !(await this.movesLanded(q.encodeMoves([item.move]), 1))) return this.markLost();
      this.landed([item]);
    }
    if (batch.some((b) => b.move.state === 'failed')) await this.endIfIntolerable();
  }

  /**
   * Once more items have failed than the batch tolerates, end it `failed` at once (one fenced
   * statement; docs/design.md, "Batches": "End"): the items this run claimed or runs go back to
   * pending and their work is told to stop when the run ends. Resolves to whether it ended the
   * batch; a batch without a tolerance is never ended here (no statement is sent).
   */
  private async endIfIntolerable(): Promise<boolean> {
    if (!this.batch.toleratedFailures) return false;
    const r = await this.store(() => q.endIntolerable(this.sql, this.batch.id, this.id));
    this.failedStored = r.failed;
    this.allowedFailures = r.allowed;
    if (!r.ended) return false;
    this.intolerable = true;
    this.queue = [];
    this.wake();
    return true;
  }

  /**
   * Whether all `n` moves stand as this run wrote them, the batch still its own: a move statement
   * that counted short may be a retry whose first try landed after all (a timed-out statement the
   * server went on with), which is no loss.
   */
  private async movesLanded(moves: q.EncodedMoves, n: number): Promise<boolean> {
    const landed = await this.store(() => q.movesLanded(this.sql, { batchId: this.batch.id, run: this.id, moves }));
    return landed === n;
  }

  private moveAlone(item: Settled, dataSensitive: boolean): Promise<q.StepResult> {
    const moves = q.encodeMoves([item.move]);
    const recordProgress = !this.progressRecorded;
    const settled = item.move.state === 'done' || item.move.state === 'failed' ? 1 : 0;
    return this.store(
      () => q.step(this.sql, { batchId: this.batch.id, run: this.id, moves, settled, claim: 0, aheadMs: 0, recordProgress }),
      undefined,
      dataSensitive,
    );
  }

  /**
   * Account for stored moves: counts, events, and the retries' due times (counted from
   * `sentAt`, the local time the statement was sent).
   */
  private landed(batch: Settled[], sentAt = this.s.clock.now()): void {
    if (batch.length === 0) return;
    this.progressRecorded = true;
    for (const { move, outcome } of batch) {
      if (move.state === 'failed') this.failedStored++;
      if (move.state === 'done' || move.state === 'failed') this.finishedItems++;
      else if (outcome === 'retry') this.dueIn(move.delayMs - CLAIM_AHEAD_MS, sentAt);
      else this.moreDue = true;
      this.s.onEvent({
        type: 'item-ended',
        batchId: this.batch.id,
        runId: this.id,
        key: move.key,
        attempt: move.claimed,
        outcome,
      });
    }
  }

  /**
   * Claim again `ms` after `from` (local clock; default now): a retry or a pending item of the
   * store comes due then. At once when that time has come.
   */
  private dueIn(ms: number, from = this.s.clock.now()): void {
    const wait = from + ms - this.s.clock.now();
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
    void this.s.clock.sleep(wait, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.dueTimer = undefined;
      this.dueAt = Infinity;
      this.moreDue = true;
      this.wake();
    });
  }

  private wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  /**
   * Recover this run's attempts whose heartbeat is older than `itemStaleMs` (docs/design.md,
   * "Item heartbeats and checkpoints"), when some may be: the statement decides by the database
   * clock. A recovered attempt frees its slot at once, its signal aborts, and whatever it
   * resolves to later is dropped. Woken by every beat.
   */
  private async recoverStale(): Promise<void> {
    const candidates = this.beats.candidates();
    if (candidates.length === 0) return;
    const staleMs = this.s.itemStaleMs!;
    const items = JSON.stringify(candidates);
    const rows = await this.store(() =>
      recoverStaleItems(this.sql, { batchId: this.batch.id, run: this.id, items, staleMs, attempts: this.s.attempts }),
    );
    for (const r of rows) {
      const claimed = candidates.find((c) => c.key === r.key)!.claimed;
      this.executing.delete(r.key);
      this.beats.abandon(r.key, new ItemStaleError(staleMs));
      if (r.state === 'failed') [this.failedStored, this.finishedItems] = [this.failedStored + 1, this.finishedItems + 1];
      else this.moreDue = true;
      const outcome = r.state === 'failed' ? 'failed' : 'stale';
      this.s.onEvent({ type: 'item-ended', batchId: this.batch.id, runId: this.id, key: r.key, attempt: claimed, outcome });
    }
    if (rows.some((r) => r.state === 'failed')) await this.endIfIntolerable();
  }

  private launch(c: q.ClaimedRow): void {
    const p: Promise<void> = this.work(c).then((s) => {
      // Recovered for want of heartbeats meanwhile: its slot was freed, its result is nobody's.
      if (this.executing.get(c.key) !== p) return;
      this.executing.delete(c.key);
      if (this.ended || this.reason === 'lost') return;
      this.settled.push(s);
      if (s.move.state === 'failed') this.failedSettling++;
      // A freed slot starts the next queued item at once, without waiting for the flusher.
      this.startQueued();
      this.wake();
    });
    this.executing.set(c.key, p);
  }

  /** Execute one item and say how its move should read. Never throws. */
  private async work(c: q.ClaimedRow): Promise<Settled> {
    const batch = this.batch;
    const verdict = (
      state: ItemState,
      outcome: ItemOutcome,
      output: string | null,
      error: string | null,
      delayMs = 0,
    ): Settled => ({
      outcome,
      move: { key: c.key, state, claimed: c.attempts, attempts: c.attempts, output, error, delayMs },
    });
    // Item timeouts (docs/design.md, "Item timeouts"): the item gets a signal of its own, aborted
    // when the run's is or when its time is up; at that moment the attempt fails, whether or not
    // the work heeds the signal (work that ignores it goes on unobserved, its result dropped).
    const timeoutMs = batch.timeoutMs ?? this.s.timeoutMs;
    // A recovery for want of heartbeats aborts the attempt alone, through its own signal too.
    const own = timeoutMs === undefined && this.s.itemStaleMs === undefined ? undefined : new AbortController();
    const beats = this.beats.track(c.key, c.attempts, (reason) => own?.abort(reason));
    const runSignal = this.items.signal;
    const relay = () => own?.abort(runSignal.reason);
    // Ends the timeout's wait once the item settles (only with a timeout: a controller aborted
    // without a reason builds a DOMException and its stack, a cost per item).
    const timer = own && timeoutMs !== undefined ? new AbortController() : undefined;
    if (own) {
      if (runSignal.aborted) relay();
      else runSignal.addEventListener('abort', relay, { once: true });
    }
    try {
      const working = this.executor.work({
        key: c.key,
        input: c.input,
        attempt: c.attempts,
        signal: own?.signal ?? runSignal,
        batch: { id: batch.id, tenant: batch.tenant, datasource: batch.datasource, job: batch.job, params: batch.params },
        heartbeat: beats.heartbeat,
        checkpoint: beats.checkpoint,
        checkpointed: c.checkpoint ?? undefined,
      });
      let output: unknown;
      if (own && timeoutMs !== undefined) {
        // Once the timeout wins the race, a later rejection of the work is nobody's to handle.
        working.catch(() => undefined);
        const settled = timer!.signal;
        const expired = this.s.clock.sleep(timeoutMs, settled).then(() => {
          if (settled.aborted) return new Promise<never>(() => undefined);
          const e = new ItemTimeoutError(timeoutMs);
          own.abort(e);
          throw e;
        });
        output = await Promise.race([working, expired]);
      } else {
        output = await working;
      }
      await beats.settle();
      const encoded = encodeOutput(output, this.s.maxOutputBytes);
      // An output that cannot be stored would be the same next time: the item fails for good.
      if (encoded.error !== undefined) return verdict('failed', 'failed', null, encoded.error);
      return verdict('done', 'done', encoded.json, null);
    } catch (e) {
      // Item batching: it waited for a call that never began (docs/design.md, "Item batching").
      if (e instanceof ItemNotStartedError) {
        const move = { key: c.key, state: 'pending' as const, claimed: c.attempts, attempts: c.attempts - 1 };
        return { outcome: 'given-back', move: { ...move, output: null, error: null, delayMs: 0 } };
      }
      const message = errorText(e);
      // Its writes land before its move; with a checkpoint stored in this attempt, a handoff
      // (the deadline) costs no attempt: the next run goes on from it (docs/design.md, "Item
      // heartbeats and checkpoints").
      if ((await beats.settle()) && this.items.signal.aborted) {
        return {
          outcome: 'resumable',
          move: {
            key: c.key,
            state: 'pending',
            claimed: c.attempts,
            attempts: c.attempts - 1,
            output: null,
            error: message,
            delayMs: 0,
          },
        };
      }
      if (this.items.signal.aborted && c.attempts < this.s.attempts) {
        // Interrupted by a handoff: the attempt counts (an item that never fits in one
        // invocation must end), but the next run may start it again at once.
        return verdict('pending', 'interrupted', null, message);
      }
      // Retry-After (docs/design.md, "Retry-After"): the downstream's wait, with the attempt given
      // back while the item has waits left; past them the wait counts as a failed attempt.
      const askedMs = e instanceof RetryAfterError ? Math.min(Math.max(e.retryAfterMs, 0), q.MAX_DELAY_MS) : undefined;
      // With a rate limit, the item's whole key waits, across the fleet (and only that key).
      if (askedMs !== undefined && askedMs > 0 && this.gate) {
        this.gate.pause(this.gate.keyOf({ key: c.key, input: c.input, params: this.batch.params }), askedMs);
      }
      if (askedMs !== undefined && (c.waits ?? 0) < this.s.maxRetryAfter) {
        return {
          outcome: 'waiting',
          move: {
            key: c.key,
            state: 'pending',
            claimed: c.attempts,
            attempts: c.attempts - 1,
            output: null,
            error: message,
            delayMs: askedMs,
            waits: (c.waits ?? 0) + 1,
          },
        };
      }
      if (c.attempts >= this.s.attempts || (e as { permanent?: unknown } | null)?.permanent === true) {
        return verdict('failed', 'failed', null, message);
      }
      const delay = retryDelayMs(this.s.backoffMs, c.attempts, this.s.random, this.s.maxBackoffMs);
      return verdict('pending', 'retry', null, message, Math.max(delay, askedMs ?? 0));
    } finally {
      timer?.abort(ITEM_SETTLED);
      runSignal.removeEventListener('abort', relay);
    }
  }

  /**
   * The handoff statement: the items settled meanwhile are moved, the queued ones (and any a
   * claim whose answer was lost left running here) given back with their attempts unchanged,
   * and the beat cleared. A run that stored nothing ended gracefully: its
   * takeover does not count as a stalled run.
   */
  private async handOff(): Promise<RunOutcome> {
    // Why it hands off, as of now: a beat that lands once the handoff statement deleted the run's
    // row finds it gone and marks the run lost, which must not turn a drain or a slice into a
    // plain handoff.
    const why = this.reason;
    let batch = this.settled;
    this.settled = [];
    const queued = this.queue.map((e) => e.item);
    this.queue = [];
    const send = (settled: Settled[]) => {
      const moves = q.encodeMoves(settled.map((b) => b.move));
      // Items still executing (they ignored their signal past drainMs) stay running: the next
      // takeover counts that attempt. Every other item this run holds goes back.
      const hold = JSON.stringify([...this.executing.keys(), ...settled.map((b) => b.move.key)]);
      const recordProgress = !this.progressRecorded && settled.length > 0;
      return this.store(
        () => q.handOffRun(this.sql, { batchId: this.batch.id, run: this.id, moves, hold, recordProgress }),
        undefined,
        settled.length > 0,
      );
    };
    let r: Awaited<ReturnType<typeof q.handOffRun>>;
    try {
      r = await send(batch);
    } catch (e) {
      if (!(e instanceof UnstorableMoves)) throw e;
      await this.moveOneByOne(batch);
      if (this.intolerable) return 'failed';
      if (this.reason === 'lost') return 'lost';
      batch = [];
      r = await send(batch);
    }
    if (!r.handed) return 'lost';
    this.landed(batch);
    for (const c of queued) {
      this.s.onEvent({
        type: 'item-ended',
        batchId: this.batch.id,
        runId: this.id,
        key: c.key,
        attempt: c.attempts - 1,
        outcome: 'given-back',
      });
    }
    return why === 'slice' ? 'sliced' : why === 'surplus' ? 'drained' : 'handed-off';
  }

  /** End a batch whose runs keep ending before they store anything: failed, with the reason. */
  private async giveUp(): Promise<RunOutcome> {
    const runs = this.stalledRuns() - 1;
    const reason = `was given up: its last ${runs} runs ended without storing any item result (store errors, crashes or lost batches; maxStalledRuns ${this.s.maxStalledRuns})`;
    const ok = await this.store(() =>
      q.giveUp(this.sql, {
        batchId: this.batch.id,
        run: this.id,
        reason: `given up: its last ${runs} runs ended without storing any item result`,
        itemError: `the batch ${reason}`,
      }),
    );
    if (!ok) return 'lost';
    throw new BatchGivenUpError(this.batch.id, runs, reason);
  }

  private s3(): Promise<S3Client> {
    return s3Client(this.s.s3);
  }

  /**
   * Reading the batch's source (docs/design.md, "Sources and results"): while the batch reads,
   * the run tries to become its reader (one run at a time: another reads once the reader's row is
   * gone), then reads a page from the stored cursor and stores its items with the new cursor in
   * one statement fenced on its lease, its being the reader and the page count it read from; so
   * a takeover goes on after the last stored page and no page is stored twice. While a page is
   * stored, the next is read from that page's cursor (read ahead: S3 and parsing overlap the
   * insert); it is kept only when the store succeeded, else the run claims the reader again and
   * reads from the stored cursor. Each stored page wakes the run's claims. A source that cannot
   * be read ends the batch `failed` with the reason; S3 failing to answer `READ_TRIES` times in
   * a row, or the store failing, hands the run off, so another run reads on.
   */
  private async readLoop(signal: AbortSignal): Promise<void> {
    let failures = 0;
    let wait = this.s.moveBackoffMs;
    // The stored state this run reads on from while it stays the reader (undefined: claim it
    // again), and the page after it, read ahead while the last one was stored.
    let state: qs.ReaderState | undefined;
    let ahead: Promise<PageRead> | undefined;
    while (!signal.aborted && !this.reason && !this.ended) {
      try {
        if (!state) {
          ahead = undefined;
          state = await this.store(() => qs.claimReader(this.sql, this.batch.id, this.id));
          if (!state) {
            // Another live run reads (or reading is over, or the lease is gone): look again later.
            const w = await this.store(() => q.waitState(this.sql, this.batch.id, this.id));
            if (!w.reading || !w.owned) return;
            await this.s.clock.sleep(this.s.beatMs, signal);
            continue;
          }
        }
        const read = await (ahead ?? this.readSourcePage(state.source, state.cursor));
        ahead = undefined;
        if ('error' in read) {
          const e = read.error;
          if (e instanceof SourceReadError) return await this.failSource(e.reason, e.line);
          this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error: e, tries: ++failures });
          if (failures >= READ_TRIES) return this.readFailed();
          await this.s.clock.sleep(wait, signal);
          wait = Math.min(wait * 2, 10_000);
          continue;
        }
        const { page, json, count } = read;
        failures = 0;
        wait = this.s.moveBackoffMs;
        const total = state.total + count;
        if (total > this.s.maxSourceItems) {
          return await this.failSource(
            `item count: the source holds more than ${this.s.maxSourceItems} items; the limit is ${this.s.maxSourceItems} (LEASEHOLD_MAX_SOURCE_ITEMS)`,
            null,
          );
        }
        if (page.done && total === 0) return await this.failSource('the source holds no items', null);
        // The next page, read (and made into JSON) while this one is stored.
        if (!page.done) ahead = this.readSourcePage(state.source, page.cursor);
        // A key read twice is the source's fault (a CSV key column with a repeated value), not
        // the store's: it is answered, not retried.
        const from = state;
        const stored = await this.store(() =>
          qs
            .storePage(this.sql, {
              batchId: this.batch.id,
              run: this.id,
              pages: from.pages,
              cursor: page.cursor,
              items: json,
              count,
              done: page.done,
            })
            .catch((e: unknown) => {
              const dup = duplicateKey(e);
              if (dup === undefined) throw e;
              return dup;
            }),
        );
        if (typeof stored === 'string') return await this.failSource(`two items of the source have the key ${stored}`, null);
        if (!stored) {
          // No longer the reader of this state (or the lease is gone): claim it again.
          state = undefined;
          continue;
        }
        state = { source: state.source, cursor: page.cursor, pages: state.pages + 1, total };
        this.moreDue = true;
        this.wake();
        if (page.done) {
          // The total is final: the flusher judges the failures stored while reading against a
          // percent now (one statement at a time stays the flusher's).
          this.judgeTolerance = true;
          this.wake();
          return;
        }
      } catch (e) {
        // The store kept failing: hand off, so another run reads on from the stored cursor.
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error: e, tries: this.s.moveTries });
        return this.readFailed();
      }
    }
  }

  /**
   * Read one page of the source from `cursor` and make its items the JSON text a store takes
   * (checked as a start's items are: an item the store would refuse is a {@link SourceReadError};
   * JSON Lines come as that text already);
   * a failure is answered, never thrown.
   */
  private async readSourcePage(source: unknown, cursor: unknown): Promise<PageRead> {
    try {
      const page = await readPage(await this.s3(), source as StoredSource, cursor as SourceCursor | null, {
        maxInputBytes: this.s.maxInputBytes,
        rangeBytes: this.s.sourceRangeBytes,
        pageObjects: this.s.sourcePageObjects,
        asJson: true,
      });
      if (page.json) return { page, json: page.json.text, count: page.json.count };
      if (page.items.length === 0) return { page, json: '[]', count: 0 };
      let pieces;
      try {
        pieces = await readItems(
          page.items,
          { maxItems: Infinity, maxInputBytes: this.s.maxInputBytes, maxTotalBytes: Infinity },
          true,
        );
      } catch (e) {
        throw new SourceReadError((e as Error).message);
      }
      const json = pieces.pieces[0];
      // Only the JSON text and the cursor are kept while the page waits for its store: the
      // items it was made from (a range's lines as strings) go now.
      return { page: { items: [], cursor: page.cursor, done: page.done }, json, count: pieces.count };
    } catch (error) {
      return { error };
    }
  }

  /** Reading could not go on here: the run hands off (its row goes, so another run reads on). */
  private readFailed(): void {
    if (!this.reason) this.requestStop();
  }

  /** End the batch `failed`: its source cannot be read into items (`reason`, the first bad line). */
  private async failSource(reason: string, line: number | null): Promise<void> {
    this.sourceFailed = await this.store(() => qs.failSource(this.sql, { batchId: this.batch.id, run: this.id, reason, line }));
    // The batch is over (or another end came first): this run's lease is gone either way.
    this.markLost();
  }

  /**
   * Time slicing (docs/design.md, "Tenant fairness"): once the run has held its batch for
   * `sliceMs`, and after every beat from then on, it asks whether another tenant's batch waits
   * for a worker (below its tenant's limit); if so the run hands off. With nobody waiting it
   * keeps its batch. A failed check is tried again after the next beat.
   */
  private async sliceLoop(signal: AbortSignal): Promise<void> {
    await this.s.clock.sleep(this.s.sliceMs, signal);
    while (!signal.aborted && !this.reason) {
      try {
        const waiting = await withTimeout(q.othersWaiting(this.sql, this.batch.tenant, this.s.maxRunning), this.s.storeTimeoutMs);
        if (waiting && !signal.aborted && !this.reason) {
          this.reason = 'slice';
          this.wake();
          return;
        }
      } catch (error) {
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries: 1 });
      }
      await this.s.clock.sleep(Math.min(this.s.beatMs, this.s.sliceMs), signal);
    }
  }

  private async beatLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.s.clock.sleep(this.s.beatMs, signal);
      if (signal.aborted) return;
      try {
        this.statements++;
        const sent = this.s.clock.now();
        // Bounded like every store statement: a beat waiting on a silent connection would hold
        // the run's end (execute awaits this loop) forever.
        const b = await withTimeout(q.beat(this.sql, this.batch.id, this.id), this.s.storeTimeoutMs);
        if (!b.owned) {
          this.markLost();
          return;
        }
        this.beatSentAt = sent;
        // Above a lowered maxConcurrency: hand off now (in-flight items finish first).
        if (b.surplus && !this.reason) this.reason = 'surplus';
        // A rate set by a PATCH on a batch that had none: this run keeps it from now on (a run
        // with a gate reads the batch's rate at every take, and from the beat too, so it stops
        // spacing items it gives back at an old rate before its next take).
        if (b.ratePerSecond !== null && !this.gate)
          this.gate = this.rateGate({ ...this.s.rateLimit, perSecond: b.ratePerSecond });
        else if (b.ratePerSecond !== null) this.gate?.useBatchRate(b.ratePerSecond);
        // Items held back while the beats were too old may start now.
        this.wake();
      } catch (error) {
        // A missed beat is harmless until the batch turns stale; the next one tries again.
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries: 1 });
      }
    }
  }

  /**
   * Runs a store statement, retrying store errors `moveTries` times in all, backoff doubling.
   * With `dataSensitive`, an error caused by the data the statement carries is not retried: it
   * is thrown at once as {@link UnstorableMoves} (its `cause` the database's error).
   */
  private async store<T>(f: () => Promise<T>, onFail?: () => void, dataSensitive = false): Promise<T> {
    let wait = this.s.moveBackoffMs;
    for (let tries = 1; ; tries++) {
      try {
        this.statements++;
        return await withTimeout(f(), this.s.storeTimeoutMs);
      } catch (error) {
        onFail?.();
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries });
        if (dataSensitive && isDataError(error)) throw new UnstorableMoves('a value cannot be stored', { cause: error });
        if (tries >= this.s.moveTries) {
          throw new StoreFailure(`store failed ${tries} times on batch ${this.batch.id}: ${(error as Error)?.message ?? error}`);
        }
        await this.s.clock.sleep(wait);
        // Doubling, but never past a minute (a timer beyond 2^31 ms would fire at once).
        wait = Math.min(wait * 2, 60_000);
      }
    }
  }
}

/** The key of a unique violation of the items' primary key (two items with one key), else undefined. */
function duplicateKey(e: unknown): string | undefined {
  const err = e as { code?: unknown; constraint_name?: unknown; detail?: unknown; cause?: unknown } | null;
  const inner = (err?.code === undefined ? (err?.cause as typeof err) : err) ?? null;
  if (inner?.code !== '23505' || inner.constraint_name !== 'leasehold_items_pkey') return undefined;
  const m =
    typeof inner.detail === 'string'
      ? /^Key \(batch_id, key\)=\([0-9a-f-]{36}, (.*)\) already exists\.$/s.exec(inner.detail)
      : null;
  return m ? JSON.stringify(m[1]) : '(unknown)';
}
