// The lifecycle of a run (docs/design.md, "The run, inside"; "Batches", "Fan-out", "Tenant
// fairness", "End", "Pause, deadline and startBy"): its beat, its time slice, leaving a batch
// whose last items other runs hold, a surplus run above a lowered `maxConcurrency` or of a paused
// batch, a passed deadline, the handoff, giving up a batch whose runs keep stalling, the batch's
// finish when nothing is left, and its end once more items failed than it tolerates. Every statement is fenced on the run's own lease.
import { withTimeout } from '../../store/timeout.js';
import { BatchGivenUpError } from '../errors.js';
import { encodeMoves, type ClaimedRow } from '../sql/moves.js';
import { beat, handOffRun, othersWaiting } from '../sql/runs.js';
import type { BeatResult } from '../sql/shared.js';
import type { RunOutcome } from '../types.js';
import type { RunContext } from './context.js';
import { CLAIM_AHEAD_MS } from './types.js';

/**
 * The batch-ending statements (src/batch/sql/ends.ts: finish, end early, give up, the wait state):
 * a chunk of their own, loaded by a run's first idle moment or end, never by a worker's cold
 * start (docs/design.md, "Cold starts and code splitting"). Loaded once per process.
 */
const ends = () => import('../sql/ends.js');

/** How often a run with nothing to do looks for items again while its batch's source is read, ms. */
const READING_POLL_MS = 250;

/** What the lifecycle asks of the run's other collaborators. */
export interface LifecycleDeps {
  /** Claim again `ms` from now (producer). */
  dueIn(ms: number): void;
  /** The batch's rate as the beat read it (producer). */
  useBatchRate(perSecond: number): void;
  /** The beat landed: the pool's leases are renewed (producer; nothing without a pool). */
  renewPool(): void;
  /** Whether the run holds a pool's permits, whose leases only its own beat renews (producer). */
  pooled(): boolean;
  /** Drop the queue: the batch ended (producer). */
  clearQueue(): void;
  /** Empty the queue for the handoff: the items it held (producer). */
  takeQueued(): ClaimedRow[];
  /** The handoff statement with the settled items' moves (completer). */
  handOff(): Promise<'handed' | 'lost' | 'failed'>;
}

/** The beat, slice, ends and handoff of one run, and the batch's failure allowance as it sees it. */
export class Lifecycle {
  /** Local clock time when the statement behind the last good beat (or the takeover) was sent. */
  private beatSentAt: number;
  /** This run ended the batch `failed` because more items failed than it tolerates. */
  private endedIntolerable = false;
  /** This run ended the batch `succeeded` early: enough items were done (docs/design.md, "End"). */
  private endedCompleted = false;
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

  constructor(
    private readonly ctx: RunContext,
    private readonly d: LifecycleDeps,
    /** Local clock time when the takeover statement was sent (it set the first beat). */
    takenAt: number,
  ) {
    this.beatSentAt = takenAt;
    const batch = ctx.batch;
    const percent = batch.toleratedFailures !== null && 'percent' in batch.toleratedFailures;
    this.allowedFailures = batch.reading && percent ? null : batch.allowedFailures;
  }

  /**
   * Whether the last good beat still keeps the batch from being taken over: `staleMs` since it
   * was sent has not passed by the local clock (the database counts from later, when the beat ran).
   * Past that, another run may own the batch and be running the items queued here.
   */
  beatValid(): boolean {
    return this.ctx.s.clock.now() - this.beatSentAt < this.ctx.s.staleMs;
  }

  /**
   * Whether the run's next move should beat for it (completer; docs/design.md, "Batches"): half
   * `beatMs` has passed since the last beat was sent, and no pool's leases wait for the beat.
   */
  moveMayBeat(): boolean {
    return !this.d.pooled() && this.ctx.s.clock.now() - this.beatSentAt >= this.ctx.s.beatMs / 2;
  }

  /**
   * A move sent at `sent` (local clock) beat for the run and landed: it counts as the run's beat,
   * and what it answered is acted on as the beat loop does. One that found the deadline passed
   * does not count: the beat loop's own beat, at its time, ends the batch.
   */
  moveBeat(b: BeatResult, sent: number): void {
    if (!b.owned || b.pastDeadline) return;
    this.beatSentAt = Math.max(this.beatSentAt, sent);
    this.heard(b);
  }

  /** What a beat answered, acted on (the beat loop's, or a move's that beat). */
  private heard(b: BeatResult): void {
    const ctx = this.ctx;
    // Above a lowered maxConcurrency, or the batch is paused: hand off now (in-flight items
    // finish first).
    if (b.surplus && !ctx.reason) ctx.reason = 'surplus';
    // A rate set on the batch (a PATCH): the producer's gate follows it.
    if (b.ratePerSecond !== null) this.d.useBatchRate(b.ratePerSecond);
    // Items held back while the beats were too old may start now.
    ctx.wake();
  }

  /** Whether this run ended the batch `failed` for its failures. */
  intolerable(): boolean {
    return this.endedIntolerable;
  }

  /**
   * Whether the failures stored and settling are more than the batch tolerates: the flush under
   * way ends it, so nothing more is claimed or started meanwhile.
   */
  doomed(): boolean {
    const allowed = this.allowedFailures;
    return allowed !== null && this.failedStored + this.failedSettling > allowed;
  }

  /** An item settled as failed; its move is on its way. */
  failureSettling(): void {
    this.failedSettling++;
  }

  /** `n` failed items' moves landed or were lost: no longer settling. */
  failuresSent(n: number): void {
    this.failedSettling -= n;
  }

  /** A failed item's move landed (or a stale attempt was recovered as failed). */
  failureStored(): void {
    this.failedStored++;
  }

  /** The source's last page was stored: the total is final, the flusher judges the failures. */
  judgeLater(): void {
    this.judgeTolerance = true;
  }

  /**
   * Whether the failures are to be judged now that the source's total is final (once: the
   * flusher then calls {@link endIfIntolerable}, one statement at a time staying its own).
   */
  judgeNow(): boolean {
    if (!this.judgeTolerance) return false;
    this.judgeTolerance = false;
    return true;
  }

  /**
   * Once more items have failed than the batch tolerates, end it `failed` at once (one fenced
   * statement; docs/design.md, "Batches": "End"): the items this run claimed or runs go back to
   * pending and their work is told to stop when the run ends. Resolves to whether it ended the
   * batch; a batch without a tolerance is never ended here (no statement is sent).
   */
  async endIfIntolerable(): Promise<boolean> {
    const ctx = this.ctx;
    if (!ctx.batch.toleratedFailures) return false;
    const r = await ctx.store(async () => (await ends()).endIntolerable(ctx.sql, ctx.batch.id, ctx.id));
    this.failedStored = r.failed;
    this.allowedFailures = r.allowed;
    if (!r.ended) return false;
    this.endedIntolerable = true;
    this.d.clearQueue();
    ctx.wake();
    return true;
  }

  /** Whether this run ended the batch `succeeded` early (enough items done). */
  completed(): boolean {
    return this.endedCompleted;
  }

  /**
   * Early completion (docs/design.md, "End"): once at least the batch's `minSucceeded` items are
   * done (across its runs), end it `succeeded` at once (fenced statements); the rest never run.
   * `done`: the done items the run just stored (0 after a takeover: the count is checked as it
   * stands). Resolves to whether it ended the batch; a batch without `minSucceeded` sends nothing.
   */
  async endIfCompleted(done: number): Promise<boolean> {
    const ctx = this.ctx;
    if (ctx.batch.minSucceeded === null || ctx.batch.minSucceeded === undefined) return false;
    const r = await ctx.store(async () => (await ends()).endCompleted(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, done }));
    if (!r.ended) return false;
    this.endedCompleted = true;
    this.d.clearQueue();
    ctx.wake();
    return true;
  }

  /**
   * Runs in a row that ended without storing anything, this one included: the batch's count
   * less its other live runs (each counted when it started and not yet ended; docs/design.md,
   * "Fan-out"), so runs joining at once never make a healthy batch look stalled.
   */
  private stalledRuns(): number {
    const batch = this.ctx.batch;
    return batch.stalledRuns - Math.max(batch.liveRuns - 1, 0);
  }

  /** Whether the batch's runs kept ending before they stored anything: it must be given up. */
  stalled(): boolean {
    return this.stalledRuns() > this.ctx.s.maxStalledRuns;
  }

  /**
   * Nothing runs, nothing is queued, and no item is due that this run knows of: finish the batch
   * when nothing is left, else wait for the source's pages or the next due item, or leave the
   * batch to the runs holding its last items. Resolves to how the run ends, or undefined to go
   * on (a lost lease sets the run's reason).
   */
  async idle(): Promise<'succeeded' | 'failed' | 'drained' | 'parked' | undefined> {
    const ctx = this.ctx;
    const s = ctx.s;
    const status = await ctx.store(async () => (await ends()).finishBatch(ctx.sql, ctx.batch.id, ctx.id));
    if (status === 'succeeded' || status === 'failed') return status;
    const w = await ctx.store(async () => (await ends()).waitState(ctx.sql, ctx.batch.id, ctx.id));
    if (!w.owned) {
      ctx.markLost();
      return undefined;
    }
    // Items are still being read from the batch's source: look again soon, and never leave.
    if (w.reading) {
      this.d.dueIn(Math.min(READING_POLL_MS, s.beatMs));
      return undefined;
    }
    // Other runs hold the batch's last items and nothing is due here within a beat: this run
    // leaves (the last run of a batch never does), so the tail does not hold idle workers.
    if (w.liveRuns > 1 && (w.dueInMs === null || w.dueInMs > s.beatMs)) {
      const left = await this.leave();
      if (left === 'drained') return 'drained';
      if (left === 'lost') {
        ctx.markLost();
        return undefined;
      }
    }
    // Only waiting items are left (docs/design.md, "Waiting items: callbacks and sleeps"): the
    // last run parks the batch, holding no worker until a completion or a wake time.
    let dueInMs = w.dueInMs;
    if (dueInMs === null && w.waiting && w.liveRuns <= 1) {
      // Loaded here, as the completer's wake is (a cold start does not read the waits' statements).
      const { parkRun } = await import('../sql/waits.js');
      const park = await ctx.store(() => parkRun(ctx.sql, { batchId: ctx.batch.id, run: ctx.id }));
      if (park.result === 'parked') return 'parked';
      if (park.result === 'lost') {
        ctx.markLost();
        return undefined;
      }
      // Kept: a wake (a completion, a pass) that committed since the wait state made an item
      // due, and the park's fresh snapshot saw it. The completion sent no worker (the batch had
      // a run: this one), so this run claims it when due, not a beat later.
      dueInMs = park.dueInMs;
    }
    // Pending items not due yet (or, should none be pending, look again after a beat).
    this.d.dueIn(Math.min(dueInMs === null ? s.beatMs : dueInMs - CLAIM_AHEAD_MS, s.beatMs));
    return undefined;
  }

  /**
   * Leave the batch for want of work, in one statement (see `handOffRun` with `leave`):
   * `drained` when it left, `kept` when it is the batch's last run (it stays), `lost` when its
   * lease was gone.
   */
  private async leave(): Promise<'drained' | 'kept' | 'lost'> {
    const ctx = this.ctx;
    const r = await ctx.store(() =>
      handOffRun(ctx.sql, {
        batchId: ctx.batch.id,
        run: ctx.id,
        moves: encodeMoves([]),
        hold: '[]',
        recordProgress: false,
        leave: true,
      }),
    );
    return r.handed ? 'drained' : r.kept ? 'kept' : 'lost';
  }

  /**
   * Hand the batch off: the settled items are moved, the queued ones (and any a claim whose
   * answer was lost left running here) given back with their attempts unchanged, and the beat
   * cleared, in one statement (the completer's).
   */
  async handOff(): Promise<RunOutcome> {
    const ctx = this.ctx;
    // Why it hands off, as of now: a beat that lands once the handoff statement deleted the run's
    // row finds it gone and marks the run lost, which must not turn a drain or a slice into a
    // plain handoff.
    const why = ctx.reason;
    const queued = this.d.takeQueued();
    const r = await this.d.handOff();
    if (r !== 'handed') return r;
    for (const c of queued) {
      ctx.s.onEvent({
        type: 'item-ended',
        batchId: ctx.batch.id,
        runId: ctx.id,
        key: c.key,
        attempt: c.attempts - 1,
        outcome: 'given-back',
      });
    }
    return why === 'slice' ? 'sliced' : why === 'surplus' ? 'drained' : 'handed-off';
  }

  /**
   * End a batch whose runs keep ending before they store anything: failed, with the reason.
   * @throws {BatchGivenUpError} once it gave the batch up (resolves `lost` when its lease was gone).
   */
  async giveUp(): Promise<RunOutcome> {
    const ctx = this.ctx;
    const runs = this.stalledRuns() - 1;
    // A reader that kept failing left its error on the open batch (see handOffRun's `stalledBy`).
    const why = ctx.batch.reading && ctx.batch.reason ? ctx.batch.reason : undefined;
    const reason = `was given up: its last ${runs} runs ended without storing any item result (${why ?? 'store errors, crashes or lost batches'}; maxStalledRuns ${ctx.s.maxStalledRuns})`;
    const { giveUp } = await ends();
    const ok = await ctx.store(() =>
      giveUp(ctx.sql, {
        batchId: ctx.batch.id,
        run: ctx.id,
        reason: `given up: its last ${runs} runs ended without storing any item result${why ? ` (the last: ${why})` : ''}`,
        itemError: `the batch ${reason}`,
      }),
    );
    if (!ok) return 'lost';
    throw new BatchGivenUpError(ctx.batch.id, runs, reason);
  }

  /**
   * Time slicing (docs/design.md, "Tenant fairness"): once the run has held its batch for
   * `sliceMs`, and after every beat from then on, it asks whether another tenant's batch waits
   * for a worker (below its tenant's limit); if so the run hands off. With nobody waiting it
   * keeps its batch. A failed check is tried again after the next beat.
   */
  async sliceLoop(signal: AbortSignal): Promise<void> {
    const ctx = this.ctx;
    const s = ctx.s;
    await s.clock.sleep(s.sliceMs, signal);
    while (!signal.aborted && !ctx.reason) {
      try {
        const waiting = await withTimeout(() => othersWaiting(ctx.sql, ctx.batch.tenant, s.maxRunning), s.storeTimeoutMs);
        if (waiting && !signal.aborted && !ctx.reason) {
          ctx.reason = 'slice';
          ctx.wake();
          return;
        }
      } catch (error) {
        ctx.storeError(error, 1);
      }
      await s.clock.sleep(Math.min(s.beatMs, s.sliceMs), signal);
    }
  }

  /**
   * The run's beat (docs/design.md, "Batches"): every `beatMs`, fenced on its lease; a move that
   * beat for the run meanwhile ({@link moveBeat}) puts it off.
   */
  async beatLoop(signal: AbortSignal): Promise<void> {
    const ctx = this.ctx;
    const s = ctx.s;
    let waitMs = s.beatMs;
    while (!signal.aborted) {
      await s.clock.sleep(waitMs, signal);
      if (signal.aborted) return;
      waitMs = s.beatMs;
      const since = s.clock.now() - this.beatSentAt;
      if (since < s.beatMs && !this.d.pooled()) {
        waitMs = s.beatMs - since;
        continue;
      }
      try {
        ctx.statements++;
        const sent = s.clock.now();
        // Bounded like every store statement: a beat waiting on a silent connection would hold
        // the run's end (execute awaits this loop) forever.
        const b = await withTimeout(() => beat(ctx.sql, ctx.batch.id, ctx.id), s.storeTimeoutMs);
        if (!b.owned) {
          ctx.markLost();
          return;
        }
        this.beatSentAt = sent;
        // Past the batch's deadline: end it (once, whichever of its runs or the scheduler comes
        // first); this run then stops as after a cancel, its items told to stop.
        if (b.pastDeadline) {
          const { endPastDeadline } = await ends();
          await withTimeout(endPastDeadline(ctx.sql, ctx.batch.id), s.storeTimeoutMs);
          ctx.markLost();
          return;
        }
        this.d.renewPool();
        this.heard(b);
      } catch (error) {
        // A missed beat is harmless until the batch turns stale; the next one tries again.
        ctx.storeError(error, 1);
      }
    }
  }
}
