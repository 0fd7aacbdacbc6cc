// The completer of a run (docs/design.md, "The run, inside"; "Batches": moves): stores settled
// items as moves. One flusher writes: each statement carries every item settled since the last
// one, plus a claim for the producer's free room, under one fence on the run's lease, so at most
// one move is in flight and moves stay ordered. A value PostgreSQL refuses sends the moves one
// by one (that item fails with the reason, the others land); a short count is checked against
// what landed before it means the batch was lost.
import { encodeMoves, movesLanded, step, type EncodedMoves, type StepResult } from '../sql/moves.js';
import { handOffRun } from '../sql/runs.js';
import type { BeatResult } from '../sql/shared.js';
import { errorText } from '../values.js';
import { UnstorableMoves, type RunContext } from './context.js';
import { CLAIM_AHEAD_MS, type OwnSleep, type Settled } from './types.js';

/** What the completer asks of the run's other collaborators. */
export interface CompleterDeps {
  /** Claims that fit now (producer). */
  room(): number;
  /** A claim's answer was lost (producer; made once). */
  claimLost: () => void;
  /** Queue what a step claimed (producer). */
  claimed(r: StepResult, claim: number, sentAt: number): void;
  /** Start queued items on free slots (producer). */
  startQueued(): void;
  /** The store may hold due pending items again (producer). */
  mayBeDue(): void;
  /** A retry's move landed: due `delayMs` after `sentAt` (producer). */
  retryDue(delayMs: number, sentAt: number): void;
  /** An item's move to waiting on a sleep landed (the run's own sleeps). */
  sleeping(key: string, sleep: OwnSleep): void;
  /** `n` failed items' moves landed or were lost: no longer settling (lifecycle). */
  failuresSent(n: number): void;
  /** A failed item's move landed (lifecycle). */
  failureStored(): void;
  /** End the batch if its failures are past its tolerance (lifecycle). */
  endIfIntolerable(): Promise<boolean>;
  /** Whether this run ended the batch for its failures (lifecycle). */
  intolerable(): boolean;
  /** End the batch `succeeded` if enough items are done (lifecycle; early completion). */
  endIfCompleted(done: number): Promise<boolean>;
  /** Whether the next move should beat for the run (lifecycle). */
  moveMayBeat(): boolean;
  /** A move that beat for the run landed, sent at `sentAt` (lifecycle). */
  moveBeat(b: BeatResult, sentAt: number): void;
}

/** The settled items of one run and the moves that store them. */
export class Completer {
  private settled: Settled[] = [];
  /** A move of this run landed (and set the batch's stalled runs to 0). */
  private progressRecorded = false;
  /** Items this run stored as done or failed (its result's `finishedItems`). */
  finishedItems = 0;
  /** How long the last move + claim statement took, ms of real time. */
  private stepMs = 0;
  /** Moving average of the move + claim statements' round trips, ms of real time (0: none yet). */
  private meanStep = 0;

  constructor(
    private readonly ctx: RunContext,
    private readonly d: CompleterDeps,
  ) {}

  /** An item settled: its move goes with the next statement. */
  add(s: Settled): void {
    this.settled.push(s);
  }

  /** Whether settled items wait for their move. */
  pending(): boolean {
    return this.settled.length > 0;
  }

  /** Settled items waiting for their move. */
  waiting(): number {
    return this.settled.length;
  }

  /** How long the last move + claim statement took, ms of real time (0 before the first). */
  lastStepMs(): number {
    return this.stepMs;
  }

  /** How long a move + claim statement takes, ms of real time: a moving average (0 before the first). */
  meanStepMs(): number {
    return this.meanStep;
  }

  /**
   * One statement: move every settled item and claim the producer's free room; then, unless
   * `startQueued` is false (the flusher starts them itself while the next statement travels),
   * start queued items on free slots.
   */
  async step(startQueued = true): Promise<void> {
    const ctx = this.ctx;
    const batch = this.settled;
    this.settled = [];
    const failures = batch.filter((b) => b.move.state === 'failed').length;
    const claim = this.d.room();
    const recordProgress = !this.progressRecorded && batch.length > 0;
    const settled = batch.filter((b) => b.move.state === 'done' || b.move.state === 'failed').length;
    const moves = encodeMoves(batch.map((b) => b.move));
    // A move that settles items updates the run's row anyway: it beats too when a beat is near.
    const beat = settled > 0 && this.d.moveMayBeat();
    // Due times are counted from the database's now() in the statement, which is no earlier than
    // this: timers armed from it fire on time or a little early (a claim then answers how long
    // is left), never a round trip late.
    const sentAt = ctx.s.clock.now();
    const t0 = performance.now();
    let r: StepResult;
    try {
      r = await ctx.store(
        () =>
          step(ctx.sql, {
            batchId: ctx.batch.id,
            run: ctx.id,
            moves,
            settled,
            claim,
            aheadMs: CLAIM_AHEAD_MS,
            recordProgress,
            beat,
          }),
        // A claim whose answer is lost may have committed: those items would stay running.
        claim > 0 ? this.d.claimLost : undefined,
        batch.length > 0,
      );
    } catch (e) {
      if (!(e instanceof UnstorableMoves)) throw e;
      await this.moveOneByOne(batch);
      return;
    } finally {
      // Landed, or lost: either way no longer settling.
      this.d.failuresSent(failures);
    }
    this.stepMs = performance.now() - t0;
    this.meanStep = this.meanStep === 0 ? this.stepMs : this.meanStep + (this.stepMs - this.meanStep) / 8;
    if (r.moved < batch.length && !(await this.movesLanded(moves, batch.length))) return ctx.markLost();
    if (r.beat) this.d.moveBeat(r.beat, sentAt);
    this.landed(batch, sentAt);
    await this.wakeAnswered(batch);
    // The items it claimed are put back by the end: they are not queued.
    if (failures > 0 && (await this.d.endIfIntolerable())) return;
    const done = batch.filter((b) => b.move.state === 'done').length;
    if (done > 0 && (await this.d.endIfCompleted(done))) return;
    if (claim > 0) this.d.claimed(r, claim, sentAt);
    if (startQueued) this.d.startQueued();
  }

  /**
   * The handoff statement: the items settled meanwhile are moved, the items this run holds but
   * `executing` (they ignored their signal past drainMs) given back with their attempts
   * unchanged, and the beat cleared. A run that stored nothing ended gracefully: its takeover
   * does not count as a stalled run, unless its source reader kept failing (`ctx.stalledBy`).
   * Resolves to `handed`, `lost`, or `failed` when a failure
   * stored one by one ended the batch.
   */
  async handOff(executing: () => Iterable<string>): Promise<'handed' | 'lost' | 'failed'> {
    const ctx = this.ctx;
    let batch = this.settled;
    this.settled = [];
    const send = (settled: Settled[]) => {
      const moves = encodeMoves(settled.map((b) => b.move));
      // Items still executing (they ignored their signal past drainMs) stay running: the next
      // takeover counts that attempt. Every other item this run holds goes back.
      const hold = JSON.stringify([...executing(), ...settled.map((b) => b.move.key)]);
      const recordProgress = !this.progressRecorded && settled.length > 0;
      return ctx.store(
        () => handOffRun(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, moves, hold, recordProgress, stalledBy: ctx.stalledBy }),
        undefined,
        settled.length > 0,
      );
    };
    let r: Awaited<ReturnType<typeof handOffRun>>;
    try {
      r = await send(batch);
    } catch (e) {
      if (!(e instanceof UnstorableMoves)) throw e;
      await this.moveOneByOne(batch);
      if (this.d.intolerable()) return 'failed';
      if (ctx.reason === 'lost') return 'lost';
      batch = [];
      r = await send(batch);
    }
    if (!r.handed) return 'lost';
    this.landed(batch);
    await this.wakeAnswered(batch);
    return 'handed';
  }

  /**
   * PostgreSQL refused a move for a value it carried (despite the checks at settle time): write
   * each item alone, and store the one it refuses as failed with the reason, so the others land.
   */
  private async moveOneByOne(batch: Settled[]): Promise<void> {
    for (let item of batch) {
      let r: StepResult;
      try {
        r = await this.moveAlone(item, true);
      } catch (e) {
        if (!(e instanceof UnstorableMoves)) throw e;
        const m = item.move;
        const error = `its result cannot be stored: ${errorText(e.cause)}`;
        item = { outcome: 'failed', move: { ...m, state: 'failed', attempts: m.claimed, output: null, error, delayMs: 0 } };
        r = await this.moveAlone(item, false);
      }
      if (r.moved < 1 && !(await this.movesLanded(encodeMoves([item.move]), 1))) return this.ctx.markLost();
      this.landed([item]);
      await this.wakeAnswered([item]);
    }
    if (batch.some((b) => b.move.state === 'failed')) await this.d.endIfIntolerable();
    const done = batch.filter((b) => b.move.state === 'done').length;
    if (done > 0) await this.d.endIfCompleted(done);
  }

  /**
   * Whether all `n` moves stand as this run wrote them, the batch still its own: a move statement
   * that counted short may be a retry whose first try landed after all (a timed-out statement the
   * server went on with), which is no loss.
   */
  private async movesLanded(moves: EncodedMoves, n: number): Promise<boolean> {
    const ctx = this.ctx;
    const landed = await ctx.store(() => movesLanded(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, moves }));
    return landed === n;
  }

  private moveAlone(item: Settled, dataSensitive: boolean): Promise<StepResult> {
    const ctx = this.ctx;
    const moves = encodeMoves([item.move]);
    const recordProgress = !this.progressRecorded;
    const settled = item.move.state === 'done' || item.move.state === 'failed' ? 1 : 0;
    return ctx.store(
      () => step(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, moves, settled, claim: 0, aheadMs: 0, recordProgress }),
      undefined,
      dataSensitive,
    );
  }

  /**
   * Account for stored moves: counts, events, and the retries' due times (counted from
   * `sentAt`, the local time the statement was sent).
   */
  private landed(batch: Settled[], sentAt = this.ctx.s.clock.now()): void {
    if (batch.length === 0) return;
    const ctx = this.ctx;
    this.progressRecorded = true;
    for (const { move, outcome, sleep } of batch) {
      if (move.state === 'failed') this.d.failureStored();
      if (move.state === 'done' || move.state === 'failed') this.finishedItems++;
      else if (outcome === 'retry') this.d.retryDue(move.delayMs, sentAt);
      else this.d.mayBeDue();
      if (sleep !== undefined) this.d.sleeping(move.key, sleep);
      ctx.s.onEvent({
        type: 'item-ended',
        batchId: ctx.batch.id,
        runId: ctx.id,
        key: move.key,
        attempt: move.claimed,
        outcome,
      });
    }
  }

  /**
   * Items that parked in these moves and whose callback was completed before the move landed
   * (the work handed its token out, and the answer came while it still ran) wake now, in one
   * statement (docs/design.md, "Waiting items: callbacks and sleeps"); a wake lost with the run is
   * made by the expiry pass (the completion set the wait due at once).
   */
  private async wakeAnswered(batch: Settled[]): Promise<void> {
    const keys = batch.filter((b) => b.move.state === 'waiting').map((b) => b.move.key);
    if (keys.length === 0) return;
    const ctx = this.ctx;
    // The waits' statements load with the first batch that has a waiting item (a cold start
    // does not read them: docs/design.md, "Cold starts and code splitting").
    const { wakeAnswered } = await import('../sql/waits.js');
    const r = await ctx.store(() => wakeAnswered(ctx.sql, ctx.batch.id, keys));
    if (r.woken > 0) this.d.mayBeDue();
  }

  /**
   * A stale attempt the executor recovered, stored by its statement: counted as a landed move
   * (`failed`: its attempts were used up, else it is pending again).
   */
  staleRecovered(key: string, claimed: number, failed: boolean): void {
    const ctx = this.ctx;
    if (failed) {
      this.d.failureStored();
      this.finishedItems++;
    } else this.d.mayBeDue();
    const outcome = failed ? 'failed' : 'stale';
    ctx.s.onEvent({ type: 'item-ended', batchId: ctx.batch.id, runId: ctx.id, key, attempt: claimed, outcome });
  }
}
