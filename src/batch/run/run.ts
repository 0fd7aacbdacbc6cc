// One batch's execution by one run (docs/design.md, "Batches" and "The run, inside"): the
// orchestrator that wires the run's collaborators together and decides when the run stops. The
// producer claims and starts items (producer.ts), the executor runs their attempts
// (executor.ts), the completer stores their moves (completer.ts), the source reader reads the
// batch's source (source-reader.ts), and the lifecycle beats, slices, leaves, hands off and ends
// the batch (lifecycle.ts). The Runner (../runner.ts) takes batches over and owns many runs.
import type { Sql } from '../../store/index.js';
import { tracingRegistered } from '../../tracing.js';
import { BatchGivenUpError, BatchLostError } from '../errors.js';
import { recoverRunning } from '../sql/runs.js';
import { writeResultsAfterFinish } from '../lazy-io.js';
import type { BatchInfo, Executor, RunOutcome, RunResult } from '../types.js';
import { RunContext, StoreFailure } from './context.js';
import { Completer } from './completer.js';
import { ItemExecutor } from './executor.js';
import { Lifecycle } from './lifecycle.js';
import { Producer } from './producer.js';
import { OwnSleeps } from './sleeps.js';
import type { SourceReader } from './source-reader.js';
import type { RunSettings, Settled } from './types.js';

/** The longest the flusher lingers for more settled items before a move statement, ms (real time). */
const LINGER_MAX_MS = 50;

/**
 * One run: a runner's ownership of one batch, from takeover to its end (docs/design.md,
 * "Batches").
 *
 * Its loop is the flusher: one statement at a time (the completer's), each moving every item
 * settled since the last one and claiming the producer's free room, so at most one move is in
 * flight and moves stay ordered. A short count means the batch was lost: nothing more starts,
 * and nothing more is written. On a handoff, items claimed but never started go back to pending
 * with their attempts unchanged, in the handoff statement.
 */
export class Run {
  readonly id: string;
  private readonly ctx: RunContext;
  private readonly producer: Producer;
  private readonly executor: ItemExecutor;
  private readonly completer: Completer;
  private readonly lifecycle: Lifecycle;
  /** The batch's source reader, made when the run starts on a batch that reads its source. */
  private reader: SourceReader | undefined;
  private readonly sleeps: OwnSleeps;
  /** Aborts the results write after the finish when the run is asked to stop. */
  private readonly results = new AbortController();

  constructor(
    private readonly sql: Sql,
    private readonly s: RunSettings,
    readonly batch: BatchInfo,
    runId: string,
    executor: Executor,
    /** Local clock time when the takeover statement was sent (it set the first beat). */
    takenAt: number = s.clock.now(),
  ) {
    this.id = runId;
    const ctx = (this.ctx = new RunContext(sql, s, batch, runId));
    // Each collaborator sees the others only through the few calls its deps name; these
    // closures are made once per run.
    this.lifecycle = new Lifecycle(
      ctx,
      {
        dueIn: (ms) => this.producer.dueIn(ms),
        useBatchRate: (perSecond) => this.producer.useBatchRate(perSecond),
        renewPool: () => this.producer.renewPool(),
        pooled: () => this.producer.pooled(),
        clearQueue: () => this.producer.clear(),
        takeQueued: () => this.producer.takeQueued(),
        handOff: () => this.completer.handOff(() => this.executor.keys()),
      },
      takenAt,
    );
    const lifecycle = this.lifecycle;
    this.sleeps = new OwnSleeps(ctx, { mayBeDue: () => this.producer.mayBeDue() });
    const sleeps = this.sleeps;
    const endIfIntolerable = () => lifecycle.endIfIntolerable();
    this.completer = new Completer(ctx, {
      room: () => this.producer.room(),
      claimLost: () => this.producer.claimLost(),
      claimed: (r, claim, sentAt) => this.producer.claimed(r, claim, sentAt),
      startQueued: () => this.producer.startQueued(),
      mayBeDue: () => this.producer.mayBeDue(),
      retryDue: (delayMs, sentAt) => this.producer.retryDue(delayMs, sentAt),
      sleeping: (key, sleep) => sleeps.add(key, sleep),
      failuresSent: (n) => lifecycle.failuresSent(n),
      failureStored: () => lifecycle.failureStored(),
      endIfIntolerable,
      intolerable: () => lifecycle.intolerable(),
      endIfCompleted: (done) => lifecycle.endIfCompleted(done),
      moveMayBeat: () => lifecycle.moveMayBeat(),
      moveBeat: (b, sentAt) => lifecycle.moveBeat(b, sentAt),
    });
    const completer = this.completer;
    this.executor = new ItemExecutor(ctx, executor, {
      settled: (s) => this.settled(s),
      pauseKey: (item, ms) => this.producer.pauseKey(item, ms),
      staleRecovered: (key, claimed, failed) => completer.staleRecovered(key, claimed, failed),
      endIfIntolerable,
    });
    const items = this.executor;
    this.producer = new Producer(ctx, {
      beatValid: () => lifecycle.beatValid(),
      doomed: () => lifecycle.doomed(),
      running: () => items.running(),
      meanMs: () => items.meanMs(),
      stepMs: () => completer.meanStepMs(),
      launch: (item) => items.launch(item),
      settle: (s) => completer.add(s),
    });
  }

  /**
   * Read the batch's source for as long as it reads (source-reader.ts): the reader and what it
   * uses (the source statements, the item pieces, S3) load here, so a worker whose batches name
   * no source never reads them (docs/design.md, "Cold starts and code splitting").
   */
  private async readSource(signal: AbortSignal): Promise<void> {
    let SourceReader: typeof import('./source-reader.js').SourceReader;
    try {
      ({ SourceReader } = await import('./source-reader.js'));
    } catch (e) {
      // Like a store that keeps failing: reported, and the run hands off, so another run reads on.
      this.ctx.storeError(e, 1);
      this.requestStop();
      return;
    }
    this.reader = new SourceReader(this.ctx, {
      mayBeDue: () => this.producer.mayBeDue(),
      judgeLater: () => this.lifecycle.judgeLater(),
      stop: () => this.requestStop(),
    });
    await this.reader.readLoop(signal);
  }

  /** What the run used so far: item attempts started and S3 requests sent (docs/design.md, "Usage and cost"). */
  usage(): RunContext['usage'] {
    return this.ctx.usage;
  }

  /** Ask the run to hand off: stop claiming, let in-flight items settle, clear the beat. */
  requestStop(): void {
    if (this.ctx.reason !== 'lost') this.ctx.reason = 'stop';
    // A results write after the finish stops too (a worker at its deadline); the scheduler's
    // pass writes them (docs/design.md, "Sources and results").
    this.results.abort(new Error('the run was asked to stop while it wrote the results'));
    // Its pages being read will not be stored: their GETs end now (docs/design.md, "Sources and results").
    this.reader?.abortReads();
    this.ctx.wake();
  }

  /** An attempt settled: its move goes with the next statement, and its slot starts the next item. */
  private settled(s: Settled): void {
    const ctx = this.ctx;
    // Its pool permit is free again (batches with a pool), whatever happens to its move.
    this.producer.ended(s.move.key);
    if (ctx.ended || ctx.reason === 'lost') return;
    this.completer.add(s);
    if (s.move.state === 'failed') this.lifecycle.failureSettling();
    // A freed slot starts the next queued item at once, without waiting for the flusher.
    this.producer.startQueued();
    ctx.wake();
  }

  /** Run the batch to its end; never throws (a failure is the result's outcome and error). */
  async execute(): Promise<RunResult> {
    const ctx = this.ctx;
    // The run's tracing is a chunk of its own, loaded once a tracer provider is registered
    // (docs/design.md, "Traces"): a worker that does not trace never reads it.
    ctx.trace = tracingRegistered() ? await (await import('./tracing.js')).RunTrace.open(this.batch, this.id) : undefined;
    const beats = new AbortController();
    const beating = this.lifecycle.beatLoop(beats.signal);
    const slicing = this.lifecycle.sliceLoop(beats.signal);
    const reading = this.batch.reading ? this.readSource(beats.signal) : Promise.resolve();
    let outcome: RunOutcome;
    let error: Error | undefined;
    try {
      await this.producer.open();
      outcome = await this.loop();
    } catch (e) {
      outcome = e instanceof StoreFailure ? 'store-error' : e instanceof BatchGivenUpError ? 'failed' : 'lost';
      error = e instanceof Error ? e : new Error(String(e));
    } finally {
      ctx.ended = true;
      // The run is over and can write no result: its in-flight items must stop too.
      this.executor.abort();
      this.producer.stop();
      this.sleeps.stop();
      beats.abort();
      await Promise.all([beating, slicing, reading]);
      // Every pool permit it holds goes back (docs/design.md, "Concurrency pools").
      await this.producer.releasePool();
    }
    // The run's reader ended the batch: it ended `failed` by this run, as a give-up does.
    if (outcome === 'lost' && this.reader?.failed) [outcome, error] = ['failed', undefined];
    if (outcome === 'lost' && !error) error = new BatchLostError(this.batch.id, this.id);
    // Results are written after the finish, outside the run's lease (the batch is finished);
    // a crash before they are written leaves them to the scheduler (docs/design.md, "Sources and results").
    if ((outcome === 'succeeded' || outcome === 'failed') && this.batch.results) {
      // Its span, when tracing, is the write's own, in the batch's trace (src/batch/results.ts).
      await writeResultsAfterFinish(this.sql, await ctx.s3(), this.batch.id, (e) => ctx.storeError(e, 1), {
        signal: this.results.signal,
      });
    }
    ctx.trace?.end(outcome, error);
    return {
      batchId: this.batch.id,
      runId: this.id,
      outcome,
      finishedItems: this.completer.finishedItems,
      statements: ctx.statements,
      error,
    };
  }

  private async loop(): Promise<RunOutcome> {
    const ctx = this.ctx;
    if (this.lifecycle.stalled()) return this.lifecycle.giveUp();
    await ctx.store(() => recoverRunning(this.sql, { batchId: this.batch.id, run: this.id, attempts: this.s.attempts }));
    // The items recovered may cross the batch's tolerance, or a run that died (or handed off)
    // may have stored failures past it without ending the batch.
    if (await this.lifecycle.endIfIntolerable()) return 'failed';
    // And a run that died may have stored enough done items for an early completion.
    if (await this.lifecycle.endIfCompleted(0)) return 'succeeded';
    const finished = await this.pump();
    if (finished) return finished;
    // The slice ended (or the run is a surplus one): in-flight items finish (neither uses an
    // attempt) unless a stop or a loss comes meanwhile; nothing new starts.
    while ((ctx.reason === 'slice' || ctx.reason === 'surplus') && this.executor.running() > 0) {
      await ctx.sleep();
      await this.executor.recoverStale();
    }
    // Stopping or lost: in-flight items are told to stop, and waited for at most drainMs.
    await this.executor.drain(this.s.drainMs);
    if (ctx.reason === 'lost') return 'lost';
    return this.lifecycle.handOff();
  }

  /**
   * The flusher's linger (docs/design.md, "The pipelined run"): with settled items waiting, wait
   * for more to settle before sending them, so one statement moves many — up to
   * {@link LINGER_MAX_MS} (real time), and, when the statement would claim, only while the queue
   * keeps the slots busy until its answer would come back (items started meanwhile: running /
   * mean per ms, over one and a half of the last statement's round trip). It ends at once when
   * nothing runs (nothing more will settle), when a full run's worth waits, when the run stops,
   * or when the batch is doomed. Attempts shorter than a millisecond never linger. It is not
   * capped by the mean attempt: with the queue deepened for short attempts (producer.ts,
   * `depth`), a run of 20 ms items gathers two to three attempts' worth per statement.
   */
  private async linger(): Promise<void> {
    const { ctx, executor, producer, completer } = this;
    const mean = executor.meanMs();
    if (mean < 1) return;
    const until = performance.now() + LINGER_MAX_MS;
    for (;;) {
      const left = until - performance.now();
      const running = executor.running();
      if (left < 1 || ctx.reason || running === 0 || this.lifecycle.doomed()) return;
      if (completer.waiting() >= producer.holds()) return;
      // With room to claim, the queue must outlast the statement's round trip; with none (nothing
      // due in the store), the statement claims nothing the slots wait for.
      if (producer.room() > 0 && producer.queued() <= (running / mean) * (1.5 * completer.lastStepMs() + 1)) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        void ctx.sleep().then(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /**
   * The flusher: one statement at a time, each moving every settled item and claiming the free
   * room. Resolves to the batch's final status once this run finished it, or undefined once the
   * run must stop (handoff or loss).
   */
  private async pump(): Promise<'succeeded' | 'failed' | 'drained' | 'parked' | undefined> {
    const ctx = this.ctx;
    const { producer, lifecycle } = this;
    for (;;) {
      if (ctx.reason) return undefined;
      await this.executor.recoverStale();
      if (lifecycle.judgeNow()) await lifecycle.endIfIntolerable();
      if (lifecycle.intolerable()) return 'failed';
      if (lifecycle.completed()) return 'succeeded';
      // Its own sleeps come due: woken before the step, which claims them (docs/design.md,
      // "Waiting items: callbacks and sleeps").
      if (this.sleeps.anyDue()) await this.sleeps.wake();
      if (ctx.reason) return undefined;
      const stepNow = this.completer.pending() || producer.room() > 0;
      // Quick attempts with items queued: the statement goes first, with the moves of the items
      // settled while the last one travelled and a claim for the room, and the queued items (the
      // last one's claim) start after it, to run while it travels (docs/design.md, "The
      // pipelined run": statement first). Still one statement in flight.
      const first = stepNow && producer.quick() && producer.queued() > 0;
      if (!first) producer.startQueued();
      if (stepNow) {
        if (first) {
          // The queued items start once the driver wrote the statement (a later phase of the
          // event loop), while it travels.
          setImmediate(() => ctx.reason || producer.startQueued());
          await this.completer.step(false);
        } else {
          // Let items settling in this turn land, so one statement carries them all.
          await new Promise<void>((resolve) => setImmediate(resolve));
          if (ctx.reason) return undefined;
          if (this.completer.pending()) await this.linger();
          if (ctx.reason) return undefined;
          await this.completer.step();
        }
        if (lifecycle.intolerable()) return 'failed';
        if (lifecycle.completed()) return 'succeeded';
        continue;
      }
      // Wait for an item to settle, a retry to come due, (when items are due but the beats are
      // too old to claim or start them) the next good beat, or one of its sleeps due within a
      // beat: the run stays for it as for a pending item due within a beat, rather than park.
      if (this.executor.running() > 0 || producer.waiting() || this.sleeps.dueWithin(this.s.beatMs)) {
        await ctx.sleep();
        continue;
      }
      // Nothing runs, nothing is queued, and no item is due that this run knows of.
      if (await producer.releaseOrphans()) continue;
      const end = await lifecycle.idle();
      if (end) return end;
    }
  }
}
