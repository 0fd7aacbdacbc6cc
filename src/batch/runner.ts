import { randomUUID } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { InvalidSettingError } from '../errors.js';
import type { Sql } from '../store/connect.js';
import { isLockTimeout } from '../store/errors.js';
import { withTimeout } from '../store/timeout.js';
import type { CreateOptions } from './batches.js';
import { systemClock, type Clock } from '../clock.js';
import { undispatch } from './sql/dispatch.js';
import { handBack, takeOver, takeoverMayFind } from './sql/runs.js';
import { NO_LIMIT } from './sql/shared.js';
import { checkItemBatching } from './run/index.js';
import {
  checkRetrySettings,
  MAX_ATTEMPTS,
  MAX_BACKOFF_MS,
  MAX_QUEUE_DEPTH_PER_SLOT,
  Run,
  type RunnerEvent,
  type RunSettings,
} from './run/index.js';
import { DEFAULT_MAX_OUTPUT_BYTES } from './values.js';
import { addRunWorkerMs, recordRunUsage, type RunUsageRow } from './sql/usage.js';
import { currentArchitecture, UsageMeter } from './usage.js';
import {
  ITEM_STALE_LIMITS_MS,
  MAX_ITEM_TIMEOUT_MS,
  type BatchInfo,
  type Executor,
  type ItemWork,
  type NewBatch,
  type Resolve,
  type RunResult,
} from './types.js';

export {
  retryDelayMs,
  backoffIntervalMs,
  checkRetrySettings,
  MAX_ATTEMPTS,
  MAX_BACKOFF_MS,
  type ItemOutcome,
  type RunnerEvent,
} from './run/index.js';

/** Options of {@link Runner}; every duration is in milliseconds. */
export interface RunnerOptions {
  /** Id of the process this runner belongs to. Default: a fresh UUID. */
  processId?: string;
  /** Items one run executes at once. Default 2. */
  parallel?: number;
  /**
   * Items a run claims ahead of execution, beyond `parallel`, so a freed slot starts the next
   * item with no round trip. A crash costs each of them one attempt (a handoff none). 0 claims
   * only for free slots. When set, the queue holds this many, whatever the items' durations.
   * Default: `parallel` (of the run, after a job's override), deepened for short attempts to as
   * many as the slots start in 100 ms and two of the run's move + claim round trips at its mean
   * attempt (`CLAIM_AHEAD_HORIZON_MS`: `parallel × (100 + 2 × round trip ms) / mean attempt
   * ms`), at most 4 × `parallel` (`MAX_QUEUE_DEPTH_PER_SLOT`): at `parallel` 16 and round trips
   * of 5 ms, attempts of 20 ms claim 64 ahead, of 50 ms 36, of 110 ms or more 16, of under a
   * millisecond 64; runs before their first attempt settled, and batches with a rate limit or
   * a concurrency pool keep `parallel` (docs/design.md, "The pipelined run"). With item
   * batching (an executor's `itemsPerCall`) the run's `parallel` is `parallel × itemsPerCall`
   * items, and its queue holds at least `itemsPerCall` (docs/design.md, "Item batching").
   */
  queueDepth?: number;
  /** Interval between a run's beats, ms. Default 5,000. */
  beatMs?: number;
  /** A batch whose beat is older than this (database clock) may be taken over, ms. Default 30,000. */
  staleMs?: number;
  /** Attempts per item before it ends `failed`, 1 to 1,000. Default 3. */
  attempts?: number;
  /**
   * The first backoff interval, ms, doubled each attempt; a retry waits a random time within its
   * interval (full jitter: docs/design.md, "Attempts, backoff, failures"). 0 to one day. Default 5,000.
   */
  backoffMs?: number;
  /** Longest backoff interval, so the longest retry delay, ms. 0 to one day. Default 600,000 (10 minutes). */
  maxBackoffMs?: number;
  /**
   * Waits a downstream asks for (`RetryAfterError`) that an item may take without using an
   * attempt; past them each wait counts as an attempt (docs/design.md, "Retry-After"). 0 to
   * 1,000. Default 10.
   */
  maxRetryAfter?: number;
  /** Tries of a store statement (move, claim, finish) before the run gives up. Default 4. */
  moveTries?: number;
  /** Wait before the second try of a failed store statement, ms; doubled each try. Default 100. */
  moveBackoffMs?: number;
  /**
   * Whether the process's time with no run live is charged to its runs' usage (docs/design.md,
   * "Usage and cost"): the idle time before a run to that run, the idle time after the last one
   * to it at `close()`. The Lambda worker sets it (an invocation is billed whole). Default
   * false: a long-lived runner's idle time is nobody's.
   */
  chargeIdle?: boolean;
  /** Most batches this runner runs at once through `watch`/`takeOver`. Default 4. */
  maxRuns?: number;
  /** A store statement of a run not answered within this is a store error, ms. Default 10,000. */
  storeTimeoutMs?: number;
  /**
   * On stop, how long in-flight items may take to settle after their signal aborted before the
   * run hands off without them, ms. Default 5,000.
   */
  drainMs?: number;
  /**
   * Largest item output stored, in bytes of its JSON text; an item whose output is larger ends
   * `failed` saying so. Default 262,144 (256 KiB).
   */
  maxOutputBytes?: number;
  /**
   * A batch whose last `maxStalledRuns` runs all ended without storing any item result (store
   * errors, crashes, lost batches; a graceful handoff does not count) is given up by the next
   * run: it ends `failed` with a `reason`. Default 10.
   */
  maxStalledRuns?: number;
  /**
   * Most batches of one tenant that run at once, for tenants without a limit of their own
   * (set through `setTenantLimit`); batches beyond it wait. Default: no limit
   * (docs/design.md, "Tenant fairness").
   */
  maxRunning?: number;
  /**
   * A run that has held its batch this long hands off, using no attempt, when another tenant's
   * batch is waiting for a worker; checked then and after every beat, ms. Default 60,000
   * (docs/design.md, "Tenant fairness").
   */
  sliceMs?: number;
  /**
   * Most items a batch's source may hold; reading past it ends the batch `failed`
   * (`LEASEHOLD_MAX_SOURCE_ITEMS`; docs/design.md, "Sources and results"). Default 10,000,000.
   */
  maxSourceItems?: number;
  /**
   * The API's address (`LEASEHOLD_CALLBACK_URL`), for the URL `ctx.waitForCallback` answers
   * (`{callbackUrl}/callbacks/{token}`; docs/design.md, "Waiting items: callbacks and sleeps").
   * Default none: the URL is null, the token alone is answered.
   */
  callbackUrl?: string;
  /** Largest input of one item read from a source, bytes of JSON (`LEASEHOLD_MAX_INPUT_BYTES`). Default 65,536. */
  maxInputBytes?: number;
  /** Bytes of a source object one page reads (the first page a sixteenth, at least 64 KiB). Default 2 MiB. */
  sourceRangeBytes?: number;
  /** Objects of a source prefix one page lists, at least (the first page 1,000). Default 10,000. */
  sourcePageObjects?: number;
  /**
   * The memory size a run's worker time is counted at, MB (docs/design.md, "Usage and cost"): a
   * worker gives its Lambda context's `memoryLimitInMB`; locally `LEASEHOLD_WORKER_MEMORY_MB`.
   * 128 to 10,240. Default 1,024.
   */
  memoryMb?: number;
  /**
   * The S3 client that reads sources and writes results. Default: the container's
   * (`defaultS3Client`: the environment's region and credentials, `AWS_ENDPOINT_URL_S3`).
   */
  s3?: () => S3Client;
  /** Clock for beats and waits. Default: {@link systemClock}. */
  clock?: Clock;
  /** Source of jitter in [0, 1). Default `Math.random`. */
  random?: () => number;
  /** Observer of run events (logging, metrics). Default: none. */
  onEvent?: (event: RunnerEvent) => void;
}

/** The defaults of {@link RunnerOptions} (docs/design.md, "Batches"). */
/**
 * How long, ms, a takeover that took nothing is tried again while a batch still waits (see
 * `takeOver`): each try of N racing takeovers lets at least one through, so N tries suffice.
 */
const TAKEOVER_RETRY_MS = 2_000;

export const RUNNER_DEFAULTS = {
  parallel: 2,
  beatMs: 5_000,
  staleMs: 30_000,
  attempts: 3,
  backoffMs: 5_000,
  maxBackoffMs: 600_000,
  maxRetryAfter: 10,
  moveTries: 4,
  moveBackoffMs: 100,
  maxRuns: 4,
  drainMs: 5_000,
  storeTimeoutMs: 10_000,
  maxOutputBytes: DEFAULT_MAX_OUTPUT_BYTES,
  maxStalledRuns: 10,
  maxRunning: NO_LIMIT,
  sliceMs: 60_000,
  maxSourceItems: 10_000_000,
  maxInputBytes: 65_536,
  sourceRangeBytes: 2 * 1024 * 1024,
  sourcePageObjects: 10_000,
  memoryMb: 1_024,
} as const;

/** Bounds of the runner's settings that the store and the clock depend on. */
export const RUNNER_LIMITS = {
  attempts: MAX_ATTEMPTS,
  backoffMs: MAX_BACKOFF_MS,
  maxBackoffMs: MAX_BACKOFF_MS,
  staleMs: MAX_BACKOFF_MS,
  maxStalledRuns: 1_000,
} as const;

/** A runner's settings with every default filled in ({@link runnerSettings}). */
export type RunnerSettings = Required<
  Omit<RunnerOptions, 'processId' | 'onEvent' | 'queueDepth' | 's3' | 'callbackUrl' | 'chargeIdle'>
> & {
  callbackUrl?: string;
  queueDepth: number | undefined;
  s3?: () => S3Client;
  onEvent: (e: RunnerEvent) => void;
};

/**
 * A runner's settings: `options` with every unset one at its {@link RUNNER_DEFAULTS} value,
 * checked. The one place the runner's bounds are checked (`loadConfig` calls it for the
 * `LEASEHOLD_*` variables).
 * @throws {InvalidSettingError} naming the first setting out of range or inconsistent
 *   (`beatMs` must be below `staleMs`).
 */
export function runnerSettings(options: RunnerOptions = {}): RunnerSettings {
  const s: RunnerSettings = {
    parallel: options.parallel ?? RUNNER_DEFAULTS.parallel,
    queueDepth: options.queueDepth,
    beatMs: options.beatMs ?? RUNNER_DEFAULTS.beatMs,
    staleMs: options.staleMs ?? RUNNER_DEFAULTS.staleMs,
    attempts: options.attempts ?? RUNNER_DEFAULTS.attempts,
    backoffMs: options.backoffMs ?? RUNNER_DEFAULTS.backoffMs,
    maxBackoffMs: options.maxBackoffMs ?? RUNNER_DEFAULTS.maxBackoffMs,
    maxRetryAfter: options.maxRetryAfter ?? RUNNER_DEFAULTS.maxRetryAfter,
    moveTries: options.moveTries ?? RUNNER_DEFAULTS.moveTries,
    moveBackoffMs: options.moveBackoffMs ?? RUNNER_DEFAULTS.moveBackoffMs,
    maxRuns: options.maxRuns ?? RUNNER_DEFAULTS.maxRuns,
    drainMs: options.drainMs ?? RUNNER_DEFAULTS.drainMs,
    storeTimeoutMs: options.storeTimeoutMs ?? RUNNER_DEFAULTS.storeTimeoutMs,
    maxOutputBytes: options.maxOutputBytes ?? RUNNER_DEFAULTS.maxOutputBytes,
    maxStalledRuns: options.maxStalledRuns ?? RUNNER_DEFAULTS.maxStalledRuns,
    maxRunning: options.maxRunning ?? RUNNER_DEFAULTS.maxRunning,
    sliceMs: options.sliceMs ?? RUNNER_DEFAULTS.sliceMs,
    maxSourceItems: options.maxSourceItems ?? RUNNER_DEFAULTS.maxSourceItems,
    callbackUrl: options.callbackUrl,
    maxInputBytes: options.maxInputBytes ?? RUNNER_DEFAULTS.maxInputBytes,
    sourceRangeBytes: options.sourceRangeBytes ?? RUNNER_DEFAULTS.sourceRangeBytes,
    sourcePageObjects: options.sourcePageObjects ?? RUNNER_DEFAULTS.sourcePageObjects,
    memoryMb: options.memoryMb ?? RUNNER_DEFAULTS.memoryMb,
    s3: options.s3,
    clock: options.clock ?? systemClock,
    random: options.random ?? Math.random,
    onEvent: options.onEvent ?? (() => {}),
  };
  checkRetrySettings(s);
  const int = (name: keyof RunnerSettings, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = s[name];
    if (v === undefined) return;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new InvalidSettingError(name, `must be an integer from ${min} to ${max} (got ${String(v)})`);
    }
  };
  int('parallel', 1);
  int('queueDepth', 0);
  int('maxOutputBytes', 1);
  int('maxRetryAfter', 0, MAX_ATTEMPTS);
  int('maxStalledRuns', 1, RUNNER_LIMITS.maxStalledRuns);
  int('staleMs', 1, RUNNER_LIMITS.staleMs);
  int('maxRunning', 0, NO_LIMIT);
  int('sliceMs', 1, RUNNER_LIMITS.staleMs);
  int('maxSourceItems', 1);
  int('maxInputBytes', 1);
  int('sourceRangeBytes', 1);
  int('sourcePageObjects', 1);
  int('memoryMb', 128, 10_240);
  if (s.backoffMs > s.maxBackoffMs)
    throw new InvalidSettingError('backoffMs', `(${s.backoffMs}) must not exceed maxBackoffMs (${s.maxBackoffMs})`);
  if (s.beatMs >= s.staleMs) throw new InvalidSettingError('beatMs', `(${s.beatMs}) must be below staleMs (${s.staleMs})`);
  return s;
}

/**
 * Check an `itemStaleMs` (docs/design.md, "Item heartbeats and checkpoints"): unset, or a whole
 * number of ms within {@link ITEM_STALE_LIMITS_MS} (100 ms to 15 minutes). `prefix` goes before
 * the setting's name in the message.
 * @throws {InvalidSettingError} naming it when out of range.
 */
export function checkItemStale(itemStaleMs: number | undefined, prefix = ''): void {
  if (itemStaleMs === undefined) return;
  const { min, max } = ITEM_STALE_LIMITS_MS;
  if (!(Number.isInteger(itemStaleMs) && itemStaleMs >= min && itemStaleMs <= max)) {
    throw new InvalidSettingError(
      `${prefix}itemStaleMs`,
      `must be a whole number of ms from ${min} to ${max} (got ${itemStaleMs})`,
    );
  }
}

/**
 * The executor's settings must be in range like the runner's.
 * @throws {InvalidSettingError} naming the setting (`executor.attempts`, …).
 */
function checkExecutor(ex: Executor): void {
  checkRetrySettings(ex, 'executor.');
  checkItemStale(ex.itemStaleMs, 'executor.');
  checkItemBatching(ex, 'executor.');
  if (ex.parallel !== undefined && !(Number.isInteger(ex.parallel) && ex.parallel >= 1)) {
    throw new InvalidSettingError('executor.parallel', `must be an integer of at least 1 (got ${ex.parallel})`);
  }
  if (
    ex.timeoutMs !== undefined &&
    !(Number.isInteger(ex.timeoutMs) && ex.timeoutMs >= 1 && ex.timeoutMs <= MAX_ITEM_TIMEOUT_MS)
  ) {
    throw new InvalidSettingError(
      'executor.timeoutMs',
      `must be a whole number of ms from 1 to ${MAX_ITEM_TIMEOUT_MS} (got ${ex.timeoutMs})`,
    );
  }
}

/**
 * Runs batches (docs/design.md, "Batches"): owns each through a run ({@link Run}) that beats
 * every `beatMs`, claims due items ahead of execution in batched, fenced statements, executes up
 * to `parallel` at once, writes their results as fenced moves, retries failures with capped
 * backoff and jitter, and finishes the batch exactly once. A run that finds its batch lost stops
 * at once; `stop`/`close` hand off. A batch whose runs keep ending before they store anything
 * is given up after `maxStalledRuns` of them.
 *
 * One runner belongs to one process (`owner()`); a process may run several batches.
 */
export class Runner {
  private readonly s: RunnerSettings;
  private readonly processId: string;
  private readonly runs = new Map<string, { run: Run; done: Promise<RunResult> }>();
  /** Batches whose job `resolve` did not know; a takeover of any batch skips them. */
  private readonly unknown = new Set<string>();
  private readonly watching = new AbortController();
  private watchLoop: Promise<void> | undefined;
  private closed = false;
  /** Splits the process's time among its runs (docs/design.md, "Usage and cost"). */
  private readonly meter: UsageMeter;

  /** @param sql the store; @param options see {@link RunnerOptions} for defaults. */
  constructor(
    private readonly sql: Sql,
    options: RunnerOptions = {},
  ) {
    this.processId = options.processId ?? randomUUID();
    this.s = runnerSettings(options);
    this.meter = new UsageMeter(options.chargeIdle ?? false);
  }

  /** The id of the process this runner belongs to. */
  owner(): string {
    return this.processId;
  }

  /**
   * Start a batch ({@link createBatch}) and, when this call created it, run it here.
   * @throws {TooManyBatchesError} | {InvalidBatchError} as {@link createBatch}.
   * @throws {InvalidSettingError} the executor's settings are out of range (nothing is started).
   */
  async start(
    batch: NewBatch,
    options: CreateOptions,
    work: ItemWork | Executor,
  ): Promise<{ batch: BatchInfo; created: boolean }> {
    const executor = typeof work === 'function' ? { work } : work;
    checkExecutor(executor);
    // Imported here: a worker's runner never starts batches, so its cold start does not load the start's code.
    const { createBatch } = await import('./batches.js');
    const started = await createBatch(this.sql, batch, options);
    if (started.created) await this.takeOver(() => executor, started.batch.id);
    return started;
  }

  /**
   * Take over one batch that is unowned, handed off or stale (beat older than `staleMs`,
   * database clock) with one compare-and-set, and run it here in the background. The batch is
   * chosen by the rules of docs/design.md, "Tenant fairness": a stale batch first, else a
   * waiting batch of the tenant running the fewest batches (below its limit), by priority then
   * age within the tenant. With `batchId`, only that batch (when its tenant is below its limit,
   * or it is stale); with `batchId` and `options.orFairer` (a worker sent for the batch), that
   * batch unless another tenant with a waiting batch runs fewer batches, whose batch is taken
   * instead: the sent batch keeps waiting and may be dispatched again at once. Resolves to the
   * batch taken, or undefined when none was.
   * A batch whose job `resolve` does not know is handed back at once, and this runner's later
   * takeovers without `batchId` skip it.
   * @throws the store's error, or when the store does not answer within `storeTimeoutMs`.
   * @throws {InvalidSettingError} the executor's settings are out of range: the batch is handed back first.
   */
  async takeOver(resolve: Resolve, batchId?: string, options: { orFairer?: boolean } = {}): Promise<BatchInfo | undefined> {
    if (this.closed) return undefined;
    // A process runs one run of a batch at most (docs/design.md, "Fan-out"): the statement skips
    // this runner's batches only when it chooses one itself, not the batch it is told to take.
    if (batchId !== undefined && this.runs.has(batchId)) return undefined;
    const runId = randomUUID();
    const sentAt = this.s.clock.now();
    // Bounded: a worker polls for batches between its deadline checks. A takeover that timed
    // out after it committed leaves a batch that nobody beats: it turns stale and is taken again.
    const skip = () => [...this.unknown, ...this.runs.keys()];
    const attempt = () =>
      withTimeout(
        () =>
          takeOver(this.sql, {
            run: runId,
            process: this.processId,
            staleMs: this.s.staleMs,
            maxRunning: this.s.maxRunning,
            batchId,
            orFairer: options.orFairer,
            // A stale run replaced is counted at this size (its own is not known).
            memoryMb: this.s.memoryMb,
            architecture: currentArchitecture(),
            // Else the oldest batch with an unknown job, handed straight back, would be picked again
            // every time and no other batch would ever be taken. A process runs one run of a batch
            // at most: more of its runs belong on other processes (docs/design.md, "Fan-out").
            skip: skip(),
          }),
        this.s.storeTimeoutMs,
        // A takeover sent for a batch waits for its row behind the others sent with it; one that
        // waited past lock_timeout took nothing (the statement rolled back) and is tried again.
      ).catch((e: unknown) => {
        if (batchId !== undefined && isLockTimeout(e)) return undefined;
        throw e;
      });
    let batch = await attempt();
    // The choice skips a tenant row another takeover holds for its one statement (docs/design.md,
    // "Tenant fairness"): workers sent at once for batches of one tenant would otherwise find
    // nothing. Try again after a short jittered pause, while a batch still waits, for up to 2 s.
    const retryUntil = performance.now() + TAKEOVER_RETRY_MS;
    for (let retry = 0; !batch && performance.now() < retryUntil; retry++) {
      const waiting = await withTimeout(
        () => takeoverMayFind(this.sql, { batchId, maxRunning: this.s.maxRunning, skip: skip(), staleMs: this.s.staleMs }),
        this.s.storeTimeoutMs,
      );
      if (!waiting || this.closed) break;
      // A real pause, not the clock's: a manual test clock must not hold a takeover.
      await new Promise<void>((resolve) => setTimeout(resolve, 2 + Math.floor(Math.random() * 10 * Math.min(retry + 1, 5))));
      batch = await attempt();
    }
    if (batchId && options.orFairer && batch?.id !== batchId) {
      // Not taken here: left waiting, and dispatchable again at once.
      await withTimeout(() => undispatch(this.sql, batchId), this.s.storeTimeoutMs).catch(() => {});
    }
    if (!batch) return undefined;
    const executor = resolve(batch);
    if (!executor) {
      this.unknown.add(batch.id);
      this.s.onEvent({ type: 'unknown-job', batchId: batch.id, job: batch.job });
      await withTimeout(() => handBack(this.sql, batch.id, runId), this.s.storeTimeoutMs);
      return undefined;
    }
    try {
      checkExecutor(executor);
    } catch (e) {
      this.unknown.add(batch.id);
      await withTimeout(() => handBack(this.sql, batch.id, runId), this.s.storeTimeoutMs);
      throw e;
    }
    const run = new Run(this.sql, this.settingsFor(executor), batch, runId, this.grouped(executor, batch.id), sentAt);
    this.s.onEvent({
      type: 'run-started',
      batchId: batch.id,
      runId,
      takeover: batch.replaced !== null,
      tenant: batch.tenant,
      priority: batch.priority,
      queueWaitMs: batch.queueWaitMs,
    });
    this.meter.start(runId, batch.id);
    const done = run.execute().then(async (result) => {
      // The run stays in `runs` until its usage is stored and its end reported, so `close()`
      // (which waits for the runs it holds) cannot return before them: a frozen or ended
      // process would otherwise lose the usage row, and a caller the `run-ended` event.
      try {
        // Stored before the run's end is reported: the Batch Finished event it sends carries it.
        await this.recordUsage(batch, run, this.meter.end(runId));
        this.s.onEvent({ type: 'run-ended', result });
      } finally {
        if (this.runs.get(batch.id)?.run === run) this.runs.delete(batch.id);
      }
      return result;
    });
    this.runs.set(batch.id, { run, done });
    return batch;
  }

  /**
   * Stores what a run used, once, at its end (docs/design.md, "Usage and cost"): its share of
   * the process's time, at the runner's memory size, its item attempts and S3 requests. Best
   * effort: a failure is reported as a store error and the run's figures are lost (never its
   * items' results).
   */
  private async recordUsage(batch: BatchInfo, run: Run, workerMs: number): Promise<void> {
    const used = run.usage();
    const row: RunUsageRow = {
      runId: run.id,
      batchId: batch.id,
      tenant: batch.tenant,
      process: this.processId,
      workerMs,
      memoryMb: this.s.memoryMb,
      architecture: currentArchitecture(),
      items: used.items,
      s3Get: used.s3.get,
      s3Put: used.s3.put,
      s3List: used.s3.list,
    };
    await withTimeout(() => recordRunUsage(this.sql, row), this.s.storeTimeoutMs).catch((error: unknown) =>
      this.s.onEvent({ type: 'store-error', batchId: batch.id, runId: run.id, error, tries: 1 }),
    );
  }

  /**
   * The settings of one run: the runner's, with the executor's overrides. With item batching
   * (docs/design.md, "Item batching") `parallel` counts calls: the run holds `parallel ×
   * itemsPerCall` items running, and claims at least a call's worth ahead.
   */
  private settingsFor(ex: Executor): RunSettings {
    const perCall = ex.itemsPerCall ?? 1;
    const parallel = (ex.parallel ?? this.s.parallel) * perCall;
    const queueDepth = Math.max(this.s.queueDepth ?? parallel, ex.itemsPerCall ?? 0);
    return {
      ...this.s,
      parallel,
      queueDepth,
      // A queue depth set is fixed; the default deepens for short attempts (docs/design.md, "The pipelined run").
      maxQueueDepth: this.s.queueDepth === undefined ? Math.max(queueDepth, MAX_QUEUE_DEPTH_PER_SLOT * parallel) : queueDepth,
      attempts: ex.attempts ?? this.s.attempts,
      backoffMs: ex.backoffMs ?? this.s.backoffMs,
      maxBackoffMs: ex.maxBackoffMs ?? this.s.maxBackoffMs,
      timeoutMs: ex.timeoutMs,
      maxRetryAfter: ex.maxRetryAfter ?? this.s.maxRetryAfter,
      rateLimit: ex.rateLimit,
      pool: ex.pool,
      itemStaleMs: ex.itemStaleMs,
    };
  }

  /**
   * The executor a run works with: with `itemsPerCall`, its items go through calls of
   * `workMany` (one grouping per run; docs/design.md, "Item batching"); else it is unchanged.
   */
  private grouped(ex: Executor, batchId: string): Executor {
    if (ex.itemsPerCall === undefined || !ex.workMany) return ex;
    const calls = ex.parallel ?? this.s.parallel;
    const batched = { ...ex, itemsPerCall: ex.itemsPerCall, workMany: ex.workMany };
    // The grouping (run/calls.ts) loads on the first item, not at a worker's cold start
    // (docs/design.md, "Cold starts and code splitting"); items that come meanwhile wait for it
    // in their order and join its first call.
    let grouping: Promise<ItemWork> | undefined;
    const work: ItemWork = (item) => {
      grouping ??= import('./run/calls.js').then((m) =>
        m.batchedWork(batched, {
          calls,
          clock: this.s.clock,
          onIgnored: (ignored) => this.s.onEvent({ type: 'call-results-ignored', batchId, ...ignored }),
        }),
      );
      return grouping.then((w) => w(item));
    };
    return { ...ex, work };
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
    const results = await Promise.all(entries.map((e) => e.done));
    // The process's idle time after its last run ended, charged to that run (docs/design.md,
    // "Usage and cost"): best effort, as the run's own row.
    const tail = this.meter.tail();
    if (tail && tail.ms > 0) {
      await withTimeout(() => addRunWorkerMs(this.sql, tail.runId, tail.ms), this.s.storeTimeoutMs).catch((error: unknown) =>
        this.s.onEvent({ type: 'store-error', batchId: tail.batchId, runId: tail.runId, error, tries: 1 }),
      );
    }
    return results;
  }
}
