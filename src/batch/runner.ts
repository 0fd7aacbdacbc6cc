import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { withTimeout, type Sql } from '../store/index.js';
import { createBatch, type CreateOptions } from './batches.js';
import { systemClock, type Clock } from '../clock.js';
import { BatchLostError } from './errors.js';
import * as q from './sql.js';
import type {
  BatchInfo,
  Executor,
  ItemWork,
  NewBatch,
  Resolve,
  RunOutcome,
  RunResult,
} from './types.js';

/** What the runner reports as it goes (for logs); never needed for correctness. */
export type RunnerEvent =
  | { type: 'run-started'; batchId: string; runId: string; takeover: boolean }
  | { type: 'run-ended'; result: RunResult }
  | { type: 'store-error'; batchId: string; runId: string; error: unknown; tries: number }
  | { type: 'unknown-job'; batchId: string; job: string };

/** Options of {@link Runner}; every duration is in milliseconds. */
export interface RunnerOptions {
  /** Id of the process this runner belongs to. Default: a fresh UUID. */
  processId?: string;
  /** Items one run executes at once. Default 2. */
  parallel?: number;
  /** Interval between a run's beats, ms. Default 5,000. */
  beatMs?: number;
  /** A batch whose beat is older than this (database clock) may be taken over, ms. Default 30,000. */
  staleMs?: number;
  /** Attempts per item before it ends `failed`. Default 3. */
  attempts?: number;
  /** First retry delay, ms; doubled each attempt, plus up to 25 % jitter. Default 5,000. */
  backoffMs?: number;
  /** Tries of a store statement (move, claim, finish) before the run gives up. Default 4. */
  moveTries?: number;
  /** Wait before the second try of a failed store statement, ms; doubled each try. Default 100. */
  moveBackoffMs?: number;
  /** Most batches this runner runs at once through `watch`/`takeOver`. Default 4. */
  maxRuns?: number;
  /** A store statement of a run not answered within this is a store error, ms. Default 10,000. */
  storeTimeoutMs?: number;
  /**
   * On stop, how long in-flight items may take to settle after their signal aborted before the
   * run hands off without them, ms. Default 5,000.
   */
  drainMs?: number;
  /** Clock for beats and waits. Default: {@link systemClock}. */
  clock?: Clock;
  /** Source of jitter in [0, 1). Default `Math.random`. */
  random?: () => number;
  /** Observer of run events (logging). Default: none. */
  onEvent?: (event: RunnerEvent) => void;
}

/** The defaults of {@link RunnerOptions} (DESIGN.md, "Batches"). */
export const RUNNER_DEFAULTS = {
  parallel: 2,
  beatMs: 5_000,
  staleMs: 30_000,
  attempts: 3,
  backoffMs: 5_000,
  moveTries: 4,
  moveBackoffMs: 100,
  maxRuns: 4,
  drainMs: 5_000,
  storeTimeoutMs: 10_000,
} as const;

type Settings = Required<Omit<RunnerOptions, 'processId' | 'onEvent'>> & {
  onEvent: (e: RunnerEvent) => void;
};

/**
 * Retry delay before attempt `attempt + 1` after attempt `attempt` failed:
 * `backoffMs × 2^(attempt−1)`, plus jitter of up to 25 % of that, in ms.
 */
export function retryDelayMs(backoffMs: number, attempt: number, random: () => number): number {
  const base = backoffMs * 2 ** (attempt - 1);
  return base + base * 0.25 * random();
}

class StoreFailure extends Error {}

/** One run: this runner's ownership of one batch, from takeover to its end. */
class Run {
  readonly id: string;
  private readonly stop = new AbortController();
  private readonly items = new AbortController();
  private reason: 'stop' | 'lost' | undefined;
  private readonly active = new Map<string, Promise<void>>();
  private moves: q.MoveRow[] = [];
  private finishedItems = 0;
  private claimUncertain = false;
  private readonly parallel: number;
  private readonly attempts: number;
  private readonly backoffMs: number;

  constructor(
    private readonly sql: Sql,
    private readonly s: Settings,
    readonly batch: BatchInfo,
    runId: string,
    private readonly executor: Executor,
  ) {
    this.id = runId;
    this.parallel = Math.max(1, executor.parallel ?? s.parallel);
    this.attempts = Math.max(1, executor.attempts ?? s.attempts);
    this.backoffMs = executor.backoffMs ?? s.backoffMs;
    // Every in-flight item listens on this one signal; `parallel` may well exceed 10.
    setMaxListeners(0, this.items.signal);
  }

  /** Ask the run to hand off: stop claiming, let in-flight items settle, clear the beat. */
  requestStop(): void {
    this.reason ??= 'stop';
    this.stop.abort();
  }

  private markLost(): void {
    this.reason = 'lost';
    this.stop.abort();
  }

  async execute(): Promise<RunResult> {
    const beats = new AbortController();
    const beating = this.beatLoop(beats.signal);
    let outcome: RunOutcome;
    let error: Error | undefined;
    try {
      outcome = await this.loop();
    } catch (e) {
      outcome = e instanceof StoreFailure ? 'store-error' : 'lost';
      // The run is over and can write no result: its in-flight items must stop too.
      this.items.abort();
      error = e instanceof Error ? e : new Error(String(e));
      if (e instanceof BatchLostError) error = e;
    } finally {
      beats.abort();
      await beating;
    }
    if (outcome === 'lost' && !error) error = new BatchLostError(this.batch.id, this.id);
    return { batchId: this.batch.id, runId: this.id, outcome, finishedItems: this.finishedItems, error };
  }

  private async loop(): Promise<RunOutcome> {
    await this.store(() => q.recoverRunning(this.sql, { batchId: this.batch.id, run: this.id, attempts: this.attempts }));
    const stopped = new Promise<void>((resolve) => this.stop.signal.addEventListener('abort', () => resolve(), { once: true }));
    while (!this.reason) {
      const free = this.parallel - this.active.size;
      if (free > 0) {
        const claimed = await this.store(
          () => q.claimItems(this.sql, this.batch.id, this.id, free),
          // A claim whose answer is lost may have committed: those items would stay running.
          () => (this.claimUncertain = true),
        );
        for (const c of claimed) this.launch(c);
      }
      if (this.reason) break;
      if (this.active.size === 0) {
        await this.flush();
        if (this.reason) break;
        if (this.claimUncertain) {
          this.claimUncertain = false;
          // Nothing runs here now, so every item this run holds as running is such an orphan.
          await this.store(() => q.releaseOrphans(this.sql, this.batch.id, this.id));
        }
        const status = await this.store(() => q.finishBatch(this.sql, this.batch.id, this.id));
        if (status === 'succeeded' || status === 'failed') return status;
        const w = await this.store(() => q.waitState(this.sql, this.batch.id, this.id));
        if (!w.owned) {
          this.markLost();
          break;
        }
        await this.s.clock.sleep(Math.min(w.dueInMs ?? this.s.beatMs, this.s.beatMs), this.stop.signal);
        continue;
      }
      await Promise.race([...this.active.values(), stopped]);
      // Let items finishing in the same turn land, so one move statement carries them all.
      await new Promise<void>((resolve) => setImmediate(resolve));
      await this.flush();
    }
    // Stopping: in-flight items are told to stop; their attempts are given back on handoff.
    this.items.abort();
    // Work that ignores its signal must not hold the run (and a Lambda worker) past its
    // deadline: after drainMs the run goes on without it. Such items stay `running`; the next
    // takeover counts that attempt and runs them again.
    const drainTimer = new AbortController();
    await Promise.race([
      Promise.allSettled([...this.active.values()]).then(() => drainTimer.abort()),
      this.s.clock.sleep(this.s.drainMs, drainTimer.signal),
    ]);
    drainTimer.abort();
    if (this.reason === 'lost') return 'lost';
    await this.flush();
    if ((this.reason as string) === 'lost') return 'lost';
    const handed = await this.store(() => q.handOff(this.sql, this.batch.id, this.id));
    return handed ? 'handed-off' : 'lost';
  }

  private launch(c: q.ClaimedRow): void {
    const batch = this.batch;
    const p = (async () => {
      let move: q.MoveRow;
      try {
        const output = await this.executor.work({
          key: c.key,
          input: c.input,
          attempt: c.attempts,
          signal: this.items.signal,
          batch: { id: batch.id, tenant: batch.tenant, datasource: batch.datasource, job: batch.job, params: batch.params },
        });
        move = { key: c.key, state: 'done', claimed: c.attempts, attempts: c.attempts, output: output ?? null, error: null, delay_ms: 0 };
      } catch (e) {
        const message = e instanceof Error ? e.message : String(e);
        if (this.items.signal.aborted && c.attempts < this.attempts) {
          // Interrupted by a handoff: the attempt counts (an item that never fits in one
          // invocation must end), but the next run may start it again at once.
          move = { key: c.key, state: 'pending', claimed: c.attempts, attempts: c.attempts, output: null, error: message, delay_ms: 0 };
        } else if (c.attempts >= this.attempts || (e as { permanent?: unknown } | null)?.permanent === true) {
          move = { key: c.key, state: 'failed', claimed: c.attempts, attempts: c.attempts, output: null, error: message, delay_ms: 0 };
        } else {
          const delay = retryDelayMs(this.backoffMs, c.attempts, this.s.random);
          move = { key: c.key, state: 'pending', claimed: c.attempts, attempts: c.attempts, output: null, error: message, delay_ms: delay };
        }
      }
      this.moves.push(move);
      this.active.delete(c.key);
    })();
    this.active.set(c.key, p);
  }

  /** Writes every settled item in one fenced move; a short count means the batch was lost. */
  private async flush(): Promise<void> {
    if (this.moves.length === 0 || this.reason === 'lost') return;
    const moves = this.moves;
    this.moves = [];
    const changed = await this.store(() => q.moveItems(this.sql, this.batch.id, this.id, moves));
    if (changed < moves.length) {
      this.markLost();
      return;
    }
    this.finishedItems += moves.filter((m) => m.state === 'done' || m.state === 'failed').length;
  }

  private async beatLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.s.clock.sleep(this.s.beatMs, signal);
      if (signal.aborted) return;
      try {
        // Bounded like every store statement: a beat waiting on a silent connection would hold
        // the run's end (execute awaits this loop) forever.
        if (!(await withTimeout(q.beat(this.sql, this.batch.id, this.id), this.s.storeTimeoutMs))) {
          this.markLost();
          return;
        }
      } catch (error) {
        // A missed beat is harmless until the batch turns stale; the next one tries again.
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries: 1 });
      }
    }
  }

  /** Runs a store statement, retrying store errors `moveTries` times in all, backoff doubling. */
  private async store<T>(f: () => Promise<T>, onFail?: () => void): Promise<T> {
    let wait = this.s.moveBackoffMs;
    for (let tries = 1; ; tries++) {
      try {
        return await withTimeout(f(), this.s.storeTimeoutMs);
      } catch (error) {
        onFail?.();
        this.s.onEvent({ type: 'store-error', batchId: this.batch.id, runId: this.id, error, tries });
        if (tries >= this.s.moveTries) {
          throw new StoreFailure(`store failed ${tries} times on batch ${this.batch.id}: ${(error as Error)?.message ?? error}`);
        }
        await this.s.clock.sleep(wait);
        wait *= 2;
      }
    }
  }
}

/**
 * Runs batches (DESIGN.md, "Batches"): owns each through a run that beats every `beatMs`,
 * claims due items in batched, fenced statements, executes up to `parallel` at once, writes
 * their results as fenced moves, retries failures with backoff and jitter, and finishes the
 * batch exactly once. A run that finds its batch lost stops at once; `stop`/`close` hand off.
 *
 * One runner belongs to one process (`owner()`); a process may run several batches.
 */
export class Runner {
  private readonly s: Settings;
  private readonly processId: string;
  private readonly runs = new Map<string, { run: Run; done: Promise<RunResult> }>();
  /** Batches whose job `resolve` did not know; a takeover of any batch skips them. */
  private readonly unknown = new Set<string>();
  private readonly watching = new AbortController();
  private watchLoop: Promise<void> | undefined;
  private closed = false;

  /** @param sql the store; @param options see {@link RunnerOptions} for defaults. */
  constructor(
    private readonly sql: Sql,
    options: RunnerOptions = {},
  ) {
    this.processId = options.processId ?? randomUUID();
    this.s = {
      parallel: options.parallel ?? RUNNER_DEFAULTS.parallel,
      beatMs: options.beatMs ?? RUNNER_DEFAULTS.beatMs,
      staleMs: options.staleMs ?? RUNNER_DEFAULTS.staleMs,
      attempts: options.attempts ?? RUNNER_DEFAULTS.attempts,
      backoffMs: options.backoffMs ?? RUNNER_DEFAULTS.backoffMs,
      moveTries: options.moveTries ?? RUNNER_DEFAULTS.moveTries,
      moveBackoffMs: options.moveBackoffMs ?? RUNNER_DEFAULTS.moveBackoffMs,
      maxRuns: options.maxRuns ?? RUNNER_DEFAULTS.maxRuns,
      drainMs: options.drainMs ?? RUNNER_DEFAULTS.drainMs,
      storeTimeoutMs: options.storeTimeoutMs ?? RUNNER_DEFAULTS.storeTimeoutMs,
      clock: options.clock ?? systemClock,
      random: options.random ?? Math.random,
      onEvent: options.onEvent ?? (() => {}),
    };
    if (this.s.beatMs >= this.s.staleMs) {
      throw new RangeError(`beatMs (${this.s.beatMs}) must be below staleMs (${this.s.staleMs})`);
    }
  }

  /** The id of the process this runner belongs to. */
  owner(): string {
    return this.processId;
  }

  /**
   * Start a batch ({@link createBatch}) and, when this call created it, run it here.
   * @throws {TooManyBatchesError} | {InvalidBatchError} as {@link createBatch}.
   */
  async start(
    batch: NewBatch,
    options: CreateOptions,
    work: ItemWork | Executor,
  ): Promise<{ batch: BatchInfo; created: boolean }> {
    const started = await createBatch(this.sql, batch, options);
    if (started.created) {
      const executor = typeof work === 'function' ? { work } : work;
      await this.takeOver(() => executor, started.batch.id);
    }
    return started;
  }

  /**
   * Take over one batch that is unowned, handed off or stale (beat older than `staleMs`,
   * database clock) with one compare-and-set, and run it here in the background. With
   * `batchId`, only that batch. Resolves to the batch taken, or undefined when none was.
   * A batch whose job `resolve` does not know is handed back at once, and this runner's later
   * takeovers without `batchId` skip it.
   * @throws the store's error, or when the store does not answer within `storeTimeoutMs`.
   */
  async takeOver(resolve: Resolve, batchId?: string): Promise<BatchInfo | undefined> {
    if (this.closed) return undefined;
    const runId = randomUUID();
    // Bounded: a worker polls for batches between its deadline checks. A takeover that timed
    // out after it committed leaves a batch that nobody beats: it turns stale and is taken again.
    const batch = await withTimeout(
      q.takeOver(this.sql, {
        run: runId,
        process: this.processId,
        staleMs: this.s.staleMs,
        batchId,
        // Else the oldest batch with an unknown job, handed straight back, would be picked again
        // every time and no other batch would ever be taken.
        skip: batchId ? undefined : [...this.unknown],
      }),
      this.s.storeTimeoutMs,
    );
    if (!batch) return undefined;
    const executor = resolve(batch);
    if (!executor) {
      this.unknown.add(batch.id);
      this.s.onEvent({ type: 'unknown-job', batchId: batch.id, job: batch.job });
      await withTimeout(q.handOff(this.sql, batch.id, runId), this.s.storeTimeoutMs);
      return undefined;
    }
    const run = new Run(this.sql, this.s, batch, runId, executor);
    this.s.onEvent({ type: 'run-started', batchId: batch.id, runId, takeover: batch.runs > 1 });
    const done = run.execute().then((result) => {
      if (this.runs.get(batch.id)?.run === run) this.runs.delete(batch.id);
      this.s.onEvent({ type: 'run-ended', result });
      return result;
    });
    this.runs.set(batch.id, { run, done });
    return batch;
  }

  /** The run of batch `id` in this runner, as a promise of its result; undefined when none. */
  running(id: string): Promise<RunResult> | undefined {
    return this.runs.get(id)?.done;
  }

  /** Ids of the batches this runner runs now. */
  batches(): string[] {
    return [...this.runs.keys()];
  }

  /**
   * Stop the run of batch `id` (handoff: in-flight items settle, the beat is cleared so another
   * process takes the batch over at once). Resolves to its result, or undefined when not running.
   */
  async stop(id: string): Promise<RunResult | undefined> {
    const entry = this.runs.get(id);
    if (!entry) return undefined;
    entry.run.requestStop();
    return entry.done;
  }

  /**
   * Keep taking over unowned, handed-off and stale batches, up to `maxRuns` at once, checking
   * every `intervalMs` (default: the beat interval) until {@link Runner.close}.
   */
  watch(resolve: Resolve, intervalMs = this.s.beatMs): void {
    if (this.watchLoop || this.closed) return;
    this.watchLoop = (async () => {
      while (!this.watching.signal.aborted) {
        try {
          while (this.runs.size < this.s.maxRuns && !this.watching.signal.aborted) {
            if (!(await this.takeOver(resolve))) break;
          }
        } catch (error) {
          this.s.onEvent({ type: 'store-error', batchId: '', runId: '', error, tries: 1 });
        }
        await this.s.clock.sleep(intervalMs, this.watching.signal);
      }
    })();
  }

  /** Stop watching and hand off every run; resolves to their results once all have ended. */
  async close(): Promise<RunResult[]> {
    this.closed = true;
    this.watching.abort();
    await this.watchLoop;
    const entries = [...this.runs.values()];
    for (const e of entries) e.run.requestStop();
    return Promise.all(entries.map((e) => e.done));
  }
}
