// The executor of a run (docs/design.md, "The run, inside"; "Attempts, backoff, failures", "Item
// timeouts", "Item heartbeats and checkpoints", "Retry-After"): one attempt of one item (item
// batching's calls of several sit behind the one-item work, calls.ts), with its timeout, its
// heartbeats and checkpoints, and what its end means for the item: done, a retry after its
// backoff, a Retry-After wait, or failed. It hands each settled item to the run, which stores it
// through the completer.
import { setMaxListeners } from 'node:events';
import { InvalidSettingError } from '../../errors.js';
import { ItemStaleError, ItemTimeoutError, RetryAfterError } from '../errors.js';
import { ItemBeats } from './heartbeat.js';
import { recoverStaleItems } from '../sql/heartbeats.js';
import { MAX_DELAY_MS, type ClaimedRow } from '../sql/moves.js';
import { ATTEMPT_TRACE, ItemNotStartedError, type AttemptTrace } from './call-rules.js';
import { encodeOutput, errorText, readableThrown } from '../values.js';
import type { Executor } from '../types.js';
import type { RunContext } from './context.js';
import { givenBack, parked, verdict } from './settled.js';
import { AttemptWait, lastWait, timedOutWait } from './waits.js';
import type { Settled } from './types.js';

/** Most attempts per item a runner or job may set. */
export const MAX_ATTEMPTS = 1_000;
/** Largest `backoffMs` and `maxBackoffMs` a runner or job may set, ms (one day). */
export const MAX_BACKOFF_MS = MAX_DELAY_MS;

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

/** The reason an item's timeout wait is aborted with once the item settled (nobody reads it). */
const ITEM_SETTLED = 'item settled';

/** What the executor asks of the run's other collaborators. */
export interface ItemExecutorDeps {
  /** An attempt settled (not one recovered as stale meanwhile): store its move. */
  settled(s: Settled): void;
  /** Retry-After: the item's rate-limit key waits `ms` across the fleet (producer). */
  pauseKey(item: ClaimedRow, ms: number): void;
  /** A stale attempt was recovered by the database (`failed`: its attempts are used up). */
  staleRecovered(key: string, claimed: number, failed: boolean): void;
  /** End the batch if its failures are past its tolerance (lifecycle). */
  endIfIntolerable(): Promise<boolean>;
}

/** The attempts one run executes (one executor per run). */
export class ItemExecutor {
  /** Aborted when the run stops or ends: every in-flight item listens on it. */
  private readonly items = new AbortController();
  private readonly executing = new Map<string, Promise<void>>();
  /** Moving average of the settled attempts' durations, ms of real time (0: none yet). */
  private meanAttemptMs = 0;
  /** Its attempts' heartbeats and checkpoints (docs/design.md, "Item heartbeats and checkpoints"). */
  private readonly beats: ItemBeats;

  constructor(
    private readonly ctx: RunContext,
    private readonly executor: Executor,
    private readonly d: ItemExecutorDeps,
  ) {
    // Every in-flight item listens on this one signal; `parallel` may well exceed 10.
    setMaxListeners(0, this.items.signal);
    this.beats = new ItemBeats({
      sql: ctx.sql,
      batchId: ctx.batch.id,
      runId: ctx.id,
      clock: ctx.s.clock,
      staleMs: ctx.s.itemStaleMs,
      storeTimeoutMs: ctx.s.storeTimeoutMs,
      store: (f) => ctx.store(f),
      sent: () => ctx.statements++,
      onError: (error) => ctx.storeError(error, 1),
    });
  }

  /** Items executing now. */
  running(): number {
    return this.executing.size;
  }

  /**
   * How long an attempt of this run takes, ms of real time: a moving average over the attempts
   * that settled (0 until one has). The flusher's linger is scaled by it.
   */
  meanMs(): number {
    return this.meanAttemptMs;
  }

  /** The keys of the items executing now. */
  keys(): IterableIterator<string> {
    return this.executing.keys();
  }

  /** Tell every in-flight item to stop (its signal aborts). */
  abort(): void {
    this.items.abort();
  }

  /**
   * Tell in-flight items to stop and wait for them, at most `drainMs`. Work that ignores its
   * signal must not hold the run (and a Lambda worker) past its deadline: after drainMs the run
   * goes on without it. Such items stay `running`; the next takeover counts that attempt and
   * runs them again.
   */
  async drain(drainMs: number): Promise<void> {
    this.items.abort();
    const drainTimer = new AbortController();
    await Promise.race([
      Promise.allSettled([...this.executing.values()]).then(() => drainTimer.abort()),
      this.ctx.s.clock.sleep(drainMs, drainTimer.signal),
    ]);
    drainTimer.abort();
  }

  /** Start one item's attempt; its verdict goes to `settled` once it ends. */
  launch(c: ClaimedRow): void {
    const started = performance.now();
    this.ctx.usage.items++;
    const done = (s: Settled): void => {
      // Recovered for want of heartbeats meanwhile: its slot was freed, its result is nobody's.
      if (this.executing.get(c.key) !== p) return;
      this.executing.delete(c.key);
      const ms = performance.now() - started;
      this.meanAttemptMs = this.meanAttemptMs === 0 ? ms : this.meanAttemptMs + (ms - this.meanAttemptMs) / 16;
      this.d.settled(s);
    };
    // work never rejects by design; should it all the same, the item still settles (failed),
    // so its slot is freed: a rejection nobody handled held the slot and the batch for ever.
    const unexpected = (e: unknown) => verdict(c, 'failed', 'failed', null, `the attempt failed unexpectedly: ${errorText(e)}`);
    const t = this.ctx.trace;
    let p: Promise<void>;
    if (t === undefined) {
      p = this.work(c).then(done, (e: unknown) => done(unexpected(e)));
    } else {
      // Tracing (docs/design.md, "Traces"): the attempt's span is active while the work runs.
      const span = t.attempt(c.key, c.attempts);
      const end = (s: Settled) => (t.settled(span, s), done(s));
      // With item batching the call's span links to the attempt's (calls.ts); else nothing more is made.
      const traced = this.executor.itemsPerCall === undefined ? undefined : { span, run: t };
      p = this.work(c, t.within(span), traced).then(end, (e: unknown) => end(unexpected(e)));
    }
    this.executing.set(c.key, p);
  }

  /**
   * Recover this run's attempts whose heartbeat is older than `itemStaleMs` (docs/design.md,
   * "Item heartbeats and checkpoints"), when some may be: the statement decides by the database
   * clock. A recovered attempt frees its slot at once, its signal aborts, and whatever it
   * resolves to later is dropped. Woken by every beat.
   */
  async recoverStale(): Promise<void> {
    const candidates = this.beats.candidates();
    if (candidates.length === 0) return;
    const ctx = this.ctx;
    const staleMs = ctx.s.itemStaleMs!;
    const items = JSON.stringify(candidates);
    const rows = await ctx.store(() =>
      recoverStaleItems(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, items, staleMs, attempts: ctx.s.attempts }),
    );
    for (const r of rows) {
      const claimed = candidates.find((c) => c.key === r.key)!.claimed;
      this.executing.delete(r.key);
      this.beats.abandon(r.key, new ItemStaleError(staleMs));
      this.d.staleRecovered(r.key, claimed, r.state === 'failed');
    }
    if (rows.some((r) => r.state === 'failed')) await this.d.endIfIntolerable();
  }

  /** Execute one item and say how its move should read. Never throws. */
  private async work(c: ClaimedRow, within?: <T>(f: () => T) => T, traced?: AttemptTrace): Promise<Settled> {
    const { batch, s } = this.ctx;
    // The attempt that waited on a callback which timed out fails at once (docs/design.md,
    // "Waiting items: callbacks and sleeps"): the job's retry policy decides what follows.
    const lapsed = timedOutWait(c);
    if (lapsed) return this.failed(c, lapsed, false);
    const wait = new AttemptWait(this.ctx, c);
    // Item timeouts (docs/design.md, "Item timeouts"): the item gets a signal of its own, aborted
    // when the run's is or when its time is up; at that moment the attempt fails, whether or not
    // the work heeds the signal (work that ignores it goes on unobserved, its result dropped).
    const timeoutMs = batch.timeoutMs ?? s.timeoutMs;
    // A recovery for want of heartbeats aborts the attempt alone, through its own signal too.
    const own = timeoutMs === undefined && s.itemStaleMs === undefined ? undefined : new AbortController();
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
      // Built field by field (no spread: one shape for every attempt, nothing copied).
      const last = lastWait(c);
      const item = {
        key: c.key,
        input: c.input,
        attempt: c.attempts,
        signal: own?.signal ?? runSignal,
        batch: { id: batch.id, tenant: batch.tenant, datasource: batch.datasource, job: batch.job, params: batch.params },
        heartbeat: beats.heartbeat,
        checkpoint: beats.checkpoint,
        checkpointed: c.checkpoint ?? undefined,
        callback: last.callback,
        slept: last.slept,
        waitForCallback: wait.waitForCallback,
        sleep: wait.sleep,
        sleepUntil: wait.sleepUntil,
      };
      // A call of several items is traced by the run, linked to this attempt's span (calls.ts).
      if (traced) (item as { [ATTEMPT_TRACE]?: AttemptTrace })[ATTEMPT_TRACE] = traced;
      // Without tracing no closure is made (docs/design.md, "Traces": no cost per item).
      const working = within ? within(() => this.executor.work(item)) : this.executor.work(item);
      let output: unknown;
      if (own && timeoutMs !== undefined) {
        // Once the timeout wins the race, a later rejection of the work is nobody's to handle.
        working.catch(() => undefined);
        const settled = timer!.signal;
        const expired = s.clock.sleep(timeoutMs, settled).then(() => {
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
      // It registered a wait and returned: the item parks (whatever the work returned is ignored).
      if (wait.parked) return parked(c, wait.ownSleep);
      const encoded = encodeOutput(output, s.maxOutputBytes);
      // An output that cannot be stored would be the same next time: the item fails for good.
      if (encoded.error !== undefined) return verdict(c, 'failed', 'failed', null, encoded.error);
      return verdict(c, 'done', 'done', encoded.json, null);
    } catch (thrown) {
      const e = readableThrown(thrown);
      // Item batching: it waited for a call that never began (docs/design.md, "Item batching").
      if (e instanceof ItemNotStartedError) {
        return givenBack(c, 'given-back');
      }
      // A wait registered before the work threw is dropped: no completion wakes the item for it.
      await wait.abandon();
      // Its writes land before its move (whether it stored a checkpoint in this attempt).
      return this.failed(c, e, await beats.settle());
    } finally {
      timer?.abort(ITEM_SETTLED);
      runSignal.removeEventListener('abort', relay);
    }
  }

  /**
   * How a failed attempt's move reads (docs/design.md, "Attempts, backoff, failures"):
   * resumable from its checkpoint (`checkpointed`: one was stored in this attempt), interrupted,
   * a Retry-After wait, failed for good, or a retry after its backoff.
   */
  private failed(c: ClaimedRow, e: unknown, checkpointed: boolean): Settled {
    const s = this.ctx.s;
    const message = errorText(e);
    // With a checkpoint stored in this attempt, a handoff (the deadline) costs no attempt: the
    // next run goes on from it (docs/design.md, "Item heartbeats and checkpoints").
    if (checkpointed && this.items.signal.aborted) {
      return givenBack(c, 'resumable', { error: message });
    }
    if (this.items.signal.aborted && c.attempts < s.attempts) {
      // Interrupted by a handoff: the attempt counts (an item that never fits in one
      // invocation must end), but the next run may start it again at once.
      return verdict(c, 'pending', 'interrupted', null, message);
    }
    // Retry-After (docs/design.md, "Retry-After"): the downstream's wait, with the attempt given
    // back while the item has waits left; past them the wait counts as a failed attempt.
    const askedMs = e instanceof RetryAfterError ? Math.min(Math.max(e.retryAfterMs, 0), MAX_DELAY_MS) : undefined;
    // With a rate limit, the item's whole key waits, across the fleet (and only that key).
    if (askedMs !== undefined && askedMs > 0) this.d.pauseKey(c, askedMs);
    if (askedMs !== undefined && (c.waits ?? 0) < s.maxRetryAfter) {
      return givenBack(c, 'waiting', { error: message, delayMs: askedMs, waits: (c.waits ?? 0) + 1 });
    }
    if (c.attempts >= s.attempts || (e as { permanent?: unknown } | null)?.permanent === true) {
      return verdict(c, 'failed', 'failed', null, message);
    }
    const delay = retryDelayMs(s.backoffMs, c.attempts, s.random, s.maxBackoffMs);
    return verdict(c, 'pending', 'retry', null, message, Math.max(delay, askedMs ?? 0));
  }
}
