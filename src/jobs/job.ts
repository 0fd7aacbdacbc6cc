import * as z from '../zod.js';
import { checkItemBatching } from '../batch/run/call-rules.js';
import { checkItemStale } from '../batch/runner.js';
import { checkRateLimit, type RateLimit } from '../batch/rate.js';
import { checkPoolSpec, type PoolSpec } from '../batch/pool.js';
import { checkRetrySettings } from '../batch/run/executor.js';
import {
  MAX_ITEM_TIMEOUT_MS,
  type BatchInfo,
  type Executor,
  type ItemCallResult,
  type ItemContext,
  type ItemSource,
} from '../batch/types.js';
import { InvalidSettingError } from '../errors.js';
import { InvalidParamsError, UnknownJobError } from './errors.js';

/** What a job sees of the deployment's configuration. */
export interface JobContext {
  /**
   * Absolute directories that file-reading jobs may read under. Comes from
   * `LEASEHOLD_ALLOWED_ROOTS`; default: the working directory and the OS temporary directory.
   */
  allowedRoots: string[];
  /**
   * Most items one batch may have. Default 200,000 (`LEASEHOLD_MAX_ITEMS`). A start enforces
   * it (`createBatch`'s item count limit, from the same setting); a job may use it to stop early.
   */
  maxItems: number;
  /**
   * Lambda functions `lambda-invoke` batches may call, by the name batches use: name → function
   * name or ARN (`LEASEHOLD_INVOKABLE`; the SST component's `invokable`). Default none.
   */
  invokable?: Readonly<Record<string, string>>;
  /**
   * Expand another registered job's params into items, validated as a start would (for jobs
   * whose items come from another job, like `lambda-invoke`'s `from`). Set by the
   * {@link JobRegistry} while it expands; absent elsewhere.
   * @throws {UnknownJobError} | {InvalidParamsError}
   */
  expandJob?(job: string, params: unknown): Promise<{ items: ItemSource; params: unknown }>;
}

/** What one item's run receives. */
export interface JobItem<P> {
  key: string;
  input: unknown;
  /** The batch's params as validated and normalised at start. */
  params: P;
  /** 1-based attempt number. */
  attempt: number;
  /**
   * Aborted when the run stops, hands off or loses its batch, when the attempt times out, and
   * when it is recovered for want of heartbeats (`itemStaleMs`).
   */
  signal: AbortSignal;
  tenant: string;
  batchId: string;
  /**
   * Keep a long attempt's claim alive and report its progress, any JSON of at most 8 KiB (omitted:
   * the last one stays), shown in `GET /batches/{id}/items` (docs/design.md, "Item heartbeats and
   * checkpoints"). Coalesced: at most one write a second (a quarter of `itemStaleMs` when
   * shorter), the newest progress winning; never waits, never fails for the store.
   * @throws {CheckpointTooLargeError} progress over 8 KiB of JSON; {UnstorableStateError} progress JSON cannot hold.
   */
  heartbeat(progress?: unknown): void;
  /**
   * Store a small state (any JSON, at most 64 KiB) for the item's next attempt, which receives it
   * as `checkpointed`; also a heartbeat. Resolves once stored. An attempt interrupted by a handoff
   * (its worker's deadline) after it stored one uses no attempt: the next invocation goes on from it.
   * @throws {CheckpointTooLargeError} a state over 64 KiB of JSON (nothing is stored).
   * @throws {UnstorableStateError} a state JSON or PostgreSQL cannot hold (nothing is stored).
   * @throws {ItemLostError} the attempt no longer holds its item (recovered, or its run lost the batch).
   */
  checkpoint(state: unknown): Promise<void>;
  /** What the item's last checkpoint stored before this attempt began; undefined when none. */
  checkpointed: unknown;
  /**
   * Park the item until another system answers (docs/design.md, "Waiting items: callbacks and
   * sleeps"): resolves to `{ token, url }`; hand the token out and return. No run slot and no
   * Lambda time are held while it waits; the next run reads the answer in `callback`.
   * `timeoutMs` 1 ms to a year; `heartbeatTimeoutMs` up to it; `payload` any JSON (8 KiB).
   */
  waitForCallback: ItemContext['waitForCallback'];
  /** Park the item for `ms` (up to a year), then return; the next run has `slept` true. */
  sleep: ItemContext['sleep'];
  /** Park the item until `date` (at most a year ahead), then return. */
  sleepUntil: ItemContext['sleepUntil'];
  /** The answer to the callback this attempt waited on (`succeeded` / `failed`); undefined otherwise. */
  callback: ItemContext['callback'];
  /** Whether this run goes on after a sleep of the same attempt. */
  slept: boolean;
}

/**
 * A setting answered per batch from its params (undefined: not set for that batch). Declared
 * through a method so that a `Job<P>` is still a `Job<unknown>` (method parameters are bivariant).
 */
export type PerBatch<P> = { bivarianceHack(params: P): number | undefined }['bivarianceHack'];

/** What one batched call of a job receives ({@link Job.runMany}; docs/design.md, "Item batching"). */
export interface JobCall<P> {
  /** 1 to `itemsPerCall` items, each with its own key, input, attempt and signal. */
  items: JobItem<P>[];
  /** The batch's params as validated and normalised at start. */
  params: P;
  /** Aborted once every item of the call was told to stop (a stop, a handoff, a lost batch, their timeouts). */
  signal: AbortSignal;
  tenant: string;
  batchId: string;
}

/** A job: how params expand into items and how one item runs. Build one with {@link defineJob}. */
export interface Job<P = unknown, O = unknown> {
  /** Unique name batches refer to (`job` in `POST /batches`). */
  readonly name: string;
  /** One line for listings. */
  readonly description: string;
  /** Shape of the params; parse failures become 400s naming the field. */
  readonly params: z.core.$ZodType<P>;
  /**
   * Turn valid params into items; may normalise the params that are stored with the batch
   * (for example resolve a directory to an absolute path). The items may be an array or a
   * stream (an async iterable, read while the batch starts, so a long listing is never held in
   * memory whole); check what can be checked up front here, before returning.
   * @throws {InvalidParamsError} params that are well-shaped but not acceptable.
   */
  expand(params: P, ctx: JobContext): Promise<{ items: ItemSource; params?: P }>;
  /** Run one item; resolve to its JSON output, throw to fail this attempt. */
  run(item: JobItem<P>, ctx: JobContext): Promise<O>;
  /** Items run at once by one run of this job (with `itemsPerCall`: calls at once). Default: the runner's (2). */
  readonly parallel?: number;
  /** Attempts per item, 1 to 1,000. Default: the runner's (3). */
  readonly attempts?: number;
  /** First backoff interval, ms, doubling; a retry waits a random time within it (full jitter). 0 to one day. Default: the runner's (5,000). */
  readonly backoffMs?: number;
  /**
   * Most time one attempt of an item may take, ms, 1 to 900,000 (docs/design.md, "Item
   * timeouts"). Then `item.signal` aborts and the attempt fails with `timed out after N ms`
   * (retried like any failure while attempts remain). Work that ignores its signal goes on in
   * the background, but its result is dropped and its slot is free. A start's own `timeoutMs`
   * wins; a start refuses one longer than a worker invocation can give. Default none.
   */
  readonly timeoutMs?: number;
  /**
   * Waits an item may take when its work throws `RetryAfterError` without using an attempt,
   * 0 to 1,000 (docs/design.md, "Retry-After"). Default: the runner's (10,
   * `LEASEHOLD_MAX_RETRY_AFTER`).
   */
  readonly maxRetryAfter?: number;
  /**
   * A fleet-wide rate limit (docs/design.md, "Rate limits"): items of one `key` (default: one key
   * for the job) start at most `perSecond` a second across every run and process, with a `burst`
   * (default `ceil(perSecond / 25)`) after a quiet time. An item without a token waits, using no
   * attempt. A start may set its batch's own `rateLimit.perSecond`. Default none.
   * @example rateLimit: { key: (item) => (item.input as { host: string }).host, perSecond: 50 }
   */
  readonly rateLimit?: RateLimit;
  /**
   * A concurrency pool (docs/design.md, "Concurrency pools"): the job's items in flight, with
   * those of every batch and job naming the same pool, across the fleet, stay within its limit
   * (`{ name, limit }`, or per key `{ name, perKey, total, key }`). The limits here make the pool
   * when it does not exist; `PUT /pools/{name}` changes them while batches run. Default none.
   * @example pool: { name: 'billing-api', limit: 20 }
   */
  readonly pool?: PoolSpec;
  /**
   * Item batching (docs/design.md, "Item batching"): most items one call of {@link Job.runMany}
   * gets, 1 to 1,000, or a function of the batch's params that answers it (undefined: one item
   * per call through `run`, for that batch). `parallel` then counts calls at once. Attempts,
   * retries, timeouts and results stay per item. Default none (`run`, one item at a time).
   * @example itemsPerCall: 100
   */
  readonly itemsPerCall?: number | PerBatch<P>;
  /**
   * With `itemsPerCall`: most bytes of the items' `{ key, input }` as JSON in one call (an item
   * larger alone goes in a call of its own), or a function of the params answering it. Default none.
   */
  readonly bytesPerCall?: number | PerBatch<P>;
  /** With `itemsPerCall`: ms items wait for more before a call with fewer goes, 0 to 10,000. Default 20. */
  readonly gatherMs?: number;
  /**
   * Run a call of up to `itemsPerCall` items (required with `itemsPerCall`): resolve to one
   * `{ key, output }` or `{ key, error }` per item, in any order. An item's `error` fails that
   * item's attempt only, as a throw of `run` would (`RetryAfterError`, `permanent` count the same);
   * an item left out or answered twice fails its attempt saying so. A throw fails this attempt of
   * every item of the call.
   */
  runMany?(call: JobCall<P>, ctx: JobContext): Promise<readonly ItemCallResult[]>;
  /**
   * An attempt whose last heartbeat (`item.heartbeat`, `item.checkpoint`; or its start) is older
   * than this, ms, 100 to 900,000, is recovered without waiting for its run to go stale: its
   * signal aborts, the attempt counts, and the item is retried (or `failed` when its attempts are
   * used up) (docs/design.md, "Item heartbeats and checkpoints"). Checked at each beat of the run,
   * by the database clock. Default none: no item is recovered for want of heartbeats.
   * @example itemStaleMs: 30_000 // a job whose items beat every few seconds
   */
  readonly itemStaleMs?: number;
}

/** Define a job; returns the definition unchanged, typed. */
export function defineJob<P, O>(job: Job<P, O>): Job<P, O> {
  return job;
}

/**
 * The jobs a deployment knows; workers resolve stored batches to executors through it.
 * @throws {Error} a job name registered twice; {InvalidSettingError} a job's `attempts`, `backoffMs`,
 *   `parallel`, `timeoutMs` or `itemStaleMs` out of range (attempts 1 to 1,000, backoff 0 to one day,
 *   parallel at least 1, timeout 1 ms to 15 minutes, itemStaleMs 100 ms to 15 minutes), or its item
 *   batching settings (`itemsPerCall` 1 to 1,000 and only with `runMany`, `bytesPerCall` at least 1,
 *   `gatherMs` 0 to 10,000).
 */
export class JobRegistry {
  private readonly jobs = new Map<string, Job<unknown, unknown>>();

  constructor(
    jobs: Job<unknown, unknown>[],
    private readonly ctx: JobContext,
  ) {
    for (const job of jobs) {
      if (this.jobs.has(job.name)) throw new Error(`job "${job.name}" is registered twice`);
      checkRetrySettings({ attempts: job.attempts, backoffMs: job.backoffMs }, `job "${job.name}": `);
      if (job.parallel !== undefined && !(Number.isInteger(job.parallel) && job.parallel >= 1)) {
        throw new InvalidSettingError(`job "${job.name}": parallel`, `must be an integer of at least 1 (got ${job.parallel})`);
      }
      if (
        job.timeoutMs !== undefined &&
        !(Number.isInteger(job.timeoutMs) && job.timeoutMs >= 1 && job.timeoutMs <= MAX_ITEM_TIMEOUT_MS)
      ) {
        throw new InvalidSettingError(
          `job "${job.name}": timeoutMs`,
          `must be a whole number of ms from 1 to ${MAX_ITEM_TIMEOUT_MS} (got ${job.timeoutMs})`,
        );
      }
      if (job.rateLimit !== undefined) checkRateLimit(job.rateLimit, `job "${job.name}": `);
      if (job.pool !== undefined) checkPoolSpec(job.pool, `job "${job.name}": `);
      checkItemStale(job.itemStaleMs, `job "${job.name}": `);
      checkJobBatching(job);
      this.jobs.set(job.name, job);
    }
  }

  /** The configuration jobs see. */
  context(): JobContext {
    return this.ctx;
  }

  /** Names of the registered jobs. */
  names(): string[] {
    return [...this.jobs.keys()];
  }

  /** The job named `name`. @throws {UnknownJobError} naming the registered jobs. */
  get(name: string): Job<unknown, unknown> {
    const job = this.jobs.get(name);
    if (!job) throw new UnknownJobError(name, this.names());
    return job;
  }

  /**
   * Validate params and expand them into items for a new batch. The items may be a stream
   * (an async iterable) that `createBatch` reads while it starts the batch; it checks the start
   * limits and that there is at least one item, and a stream's own errors (for example an
   * {@link InvalidParamsError} for a folder that cannot be listed) surface from `createBatch`.
   * @throws {UnknownJobError} | {InvalidParamsError}
   */
  async expand(name: string, params: unknown): Promise<{ items: ItemSource; params: unknown; timeoutMs?: number }> {
    const job = this.get(name);
    const { params: data } = await this.parseParams(name, params);
    const out = await job.expand(data, {
      ...this.ctx,
      expandJob: (other, otherParams) => this.expand(other, otherParams),
    });
    return { items: out.items, params: out.params ?? data, timeoutMs: job.timeoutMs };
  }

  /**
   * Validate params against the job's schema, without expanding them (a batch whose items come
   * from a source). Answers the parsed params and the job's item timeout (ms, if it sets one).
   * @throws {UnknownJobError} | {InvalidParamsError} naming every issue.
   */
  async parseParams(name: string, params: unknown): Promise<{ params: unknown; timeoutMs?: number }> {
    const job = this.get(name);
    const parsed = z.safeParse(job.params, params ?? {});
    if (!parsed.success) {
      // Every issue, not only the first: the field is the first one's, the message says them all.
      const fieldOf = (path: PropertyKey[]) => ['params', ...path.map(String)].join('.');
      const [first, ...rest] = parsed.error.issues;
      throw new InvalidParamsError(
        fieldOf(first.path),
        [first.message, ...rest.map((i) => `${fieldOf(i.path)}: ${i.message}`)].join('; '),
      );
    }
    return { params: parsed.data, timeoutMs: job.timeoutMs };
  }

  /** The executor for a stored batch, or undefined when its job is unknown here. */
  executor(batch: BatchInfo): Executor | undefined {
    const job = this.jobs.get(batch.job);
    if (!job) return undefined;
    const parsed = z.safeParse(job.params, batch.params);
    const params = parsed.success ? parsed.data : batch.params;
    const jobItem = (item: ItemContext): JobItem<unknown> => ({
      key: item.key,
      input: item.input,
      params,
      attempt: item.attempt,
      signal: item.signal,
      tenant: batch.tenant,
      batchId: batch.id,
      heartbeat: item.heartbeat,
      checkpoint: item.checkpoint,
      checkpointed: item.checkpointed,
      waitForCallback: item.waitForCallback,
      sleep: item.sleep,
      sleepUntil: item.sleepUntil,
      callback: item.callback,
      slept: item.slept,
    });
    // A batch whose params no longer parse runs one item per call: a function of them could throw.
    const perBatch = (v: Job<unknown, unknown>['itemsPerCall']) =>
      typeof v === 'function' ? (parsed.success ? v(parsed.data) : undefined) : v;
    const itemsPerCall = job.runMany ? perBatch(job.itemsPerCall) : undefined;
    const runMany = job.runMany?.bind(job);
    const batching: Partial<Executor> =
      itemsPerCall === undefined || !runMany
        ? {}
        : {
            itemsPerCall,
            bytesPerCall: perBatch(job.bytesPerCall),
            gatherMs: job.gatherMs,
            workMany: (call) =>
              runMany(
                { items: call.items.map(jobItem), params, signal: call.signal, tenant: batch.tenant, batchId: batch.id },
                this.ctx,
              ),
          };
    return {
      ...batching,
      parallel: job.parallel,
      attempts: job.attempts,
      backoffMs: job.backoffMs,
      timeoutMs: job.timeoutMs,
      maxRetryAfter: job.maxRetryAfter,
      rateLimit: job.rateLimit,
      pool: job.pool,
      itemStaleMs: job.itemStaleMs,
      work: (item) => job.run(jobItem(item), this.ctx),
    };
  }

  /** {@link JobRegistry.executor} as a `Resolve` function for `Runner.takeOver`/`watch`. */
  readonly resolve = (batch: BatchInfo): Executor | undefined => this.executor(batch);
}

/**
 * A job's item batching settings must be in range, and `itemsPerCall` needs `runMany` (a
 * function of the params is checked for each batch, when a run takes it).
 * @throws {InvalidSettingError} naming the setting.
 */
function checkJobBatching(job: Job<unknown, unknown>): void {
  const prefix = `job "${job.name}": `;
  if (job.itemsPerCall !== undefined && typeof job.runMany !== 'function') {
    throw new InvalidSettingError(`${prefix}itemsPerCall`, 'needs runMany, which runs a call of items');
  }
  checkItemBatching(
    {
      itemsPerCall: typeof job.itemsPerCall === 'number' ? job.itemsPerCall : undefined,
      bytesPerCall: typeof job.bytesPerCall === 'number' ? job.bytesPerCall : undefined,
      gatherMs: job.gatherMs,
      workMany: async () => [],
    },
    prefix,
  );
}
