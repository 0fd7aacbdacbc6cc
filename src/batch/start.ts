// Starting a batch, the one way the HTTP API (`POST /batches`), the trigger (EventBridge events
// and deferred firings) and through the API the CLI all take (docs/design.md, "Batches", "Start"):
// find the batch of the request key → expand the params into items → create → dispatch.
import { randomUUID } from 'node:crypto';
import type { Sql } from '../store/index.js';
import { checkItemTimeout, createBatch, findBatchByKey } from './batches.js';
import { BATCH_DEFAULTS } from './defaults.js';
import { InvalidBatchError } from './request-errors.js';
import { sendWorkers, type Dispatcher, type ReserveWorkers } from './dispatch.js';
import type { StartLimits } from './items.js';
import { type BatchInfo, type ItemSource, type ToleratedFailures } from './types.js';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3Client } from './s3.js';
import { checkResults, checkSource, type BatchSource, type ResultsTarget } from './source.js';
import { formatTraceparent, parseTraceparent, tracing } from '../tracing.js';

/** Expands a job's params into the items of a new batch (the job registry does). */
export interface BatchExpander {
  /**
   * @throws an error with code `unknown_job`, `invalid_params` or `invalid_batch` for params
   *   that cannot start a batch.
   */
  expand(job: string, params: unknown): Promise<{ items: ItemSource; params: unknown; timeoutMs?: number }>;
  /**
   * Validate params for a batch whose items come from a source (no expansion): the params to
   * store and the job's item timeout, ms, if it sets one. Absent: the params are stored as given.
   * @throws an error with code `unknown_job` or `invalid_params`.
   */
  parseParams?(job: string, params: unknown): Promise<{ params: unknown; timeoutMs?: number }>;
}

/**
 * The settings a start reads: `maxOpen` (open batches per datasource, default
 * `BATCH_DEFAULTS.maxOpen`, 4) and the start
 * limits `maxItems`, `maxInputBytes`, `maxTotalBytes` (each unset one keeps the library's
 * default, `DEFAULT_START_LIMITS`).
 */
export interface StartSettings {
  maxOpen?: number;
  /** `maxConcurrency` of a start that names none (`LEASEHOLD_BATCH_CONCURRENCY`); default `BATCH_DEFAULTS.maxConcurrency` (1). */
  batchConcurrency?: number;
  maxItems?: number;
  maxInputBytes?: number;
  maxTotalBytes?: number;
  /**
   * Longest item timeout a start may set, ms: what one worker invocation can give an item (its
   * Lambda timeout less the deadline margin; docs/design.md, "Item timeouts"). Default
   * `BATCH_DEFAULTS.itemTimeoutLimitMs` (`MAX_ITEM_TIMEOUT_MS`, 900,000).
   */
  itemTimeoutLimitMs?: number;
}

/** What {@link startBatch} needs. */
export interface StartDeps {
  sql: Sql;
  jobs: BatchExpander;
  config: StartSettings;
  /**
   * Sends a new batch to workers at once, up to its target; without it the scheduler
   * dispatches it within a minute.
   */
  dispatcher?: Dispatcher;
  /**
   * Reserves the workers a new batch wants under the worker limit (the runtime's
   * `workerReserver`; see `ReserveWorkers`). Default: every worker, with no invocation id.
   */
  reserve?: ReserveWorkers;
  /** The S3 client that checks sources and results targets. Default: the container's (`defaultS3Client`). */
  s3?: () => S3Client;
}

/** The reservation of a start without `StartDeps.reserve`: every worker asked for, with no invocation id. */
const reserveAll: ReserveWorkers = async (batchIds) => batchIds.map((batchId) => ({ batchId }));

/** What to start. */
export interface StartRequest {
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  /** The request key; without one every call starts a new batch (under a random key). */
  requestKey?: string;
  /** Failed items the batch tolerates (docs/design.md, "Batches": "End"); null or absent: none. */
  toleratedFailures?: ToleratedFailures | null;
  /** Order among the tenant's own batches, 0..9 (docs/design.md, "Tenant fairness"); default `BATCH_DEFAULTS.priority` (5). */
  priority?: number;
  /**
   * Most runs at once, 1..10,000 (docs/design.md, "Fan-out"); default `config.batchConcurrency`, else
   * `BATCH_DEFAULTS.maxConcurrency` (1).
   */
  maxConcurrency?: number;
  /**
   * Most time one attempt of an item may take, ms (docs/design.md, "Item timeouts"); wins over
   * the job's `timeoutMs`. Default: the job's, or none.
   */
  timeoutMs?: number;
  /**
   * The batch's own fleet-wide rate, items per second per key (docs/design.md, "Rate limits"); wins
   * over the job's `rateLimit.perSecond`. Default: the job's, or none.
   */
  rateLimit?: { perSecond: number };
  /**
   * The concurrency pool its items count against (docs/design.md, "Concurrency pools"), a pool
   * that exists; wins over the job's. Default: the job's, or none.
   */
  pool?: string;
  /**
   * Early completion (docs/design.md, "End"): `{ minSucceeded: N }`, or `'firstSucceeded'` (N = 1):
   * the batch ends `succeeded` once N items are done, the rest never run. Default: every item runs.
   */
  completion?: Completion;
  /** A webhook for the batch's `Batch Finished` event (docs/design.md, "Events"); default none. */
  notify?: { url: string } | null;
  /**
   * Read the items from S3 instead of expanding the params (docs/design.md, "Sources and
   * results"): checked here (bucket, key, an empty object), read by the batch's runs.
   */
  source?: BatchSource;
  /** Write the results to S3 when the batch finishes (its bucket is checked here). */
  results?: ResultsTarget;
  /** A deadline for the whole batch, an instant (docs/design.md, "Pause, deadline and startBy"); default none. */
  deadline?: Date;
  /** A deadline in ms from the start; default none. Never with `deadline`. */
  deadlineMs?: number;
  /**
   * The caller's W3C trace context (the request's `traceparent` header; docs/design.md,
   * "Traces"): the start's span is its child, and the batch's runs continue the trace. Default:
   * the active context. One that does not parse is ignored.
   */
  traceparent?: string;
}

/** How a batch may end before every item ran (docs/design.md, "End"). */
export type Completion = { minSucceeded: number } | 'firstSucceeded';

/** The `minSucceeded` of a completion (`firstSucceeded`: 1); undefined: none. */
export const minSucceededOf = (c: Completion | null | undefined): number | undefined =>
  c == null ? undefined : c === 'firstSucceeded' ? 1 : c.minSucceeded;

/** What {@link startBatch} did. */
export interface StartResult {
  batch: BatchInfo;
  /** False: the request key had started this batch before, and nothing new was done. */
  created: boolean;
  /**
   * Why sending the new batch to a worker failed, if it did. The batch is started all the same
   * (the scheduler dispatches never-started batches); callers log this.
   */
  dispatchError?: unknown;
}

/** The start limits of `createBatch` from the settings that are given. */
export function startLimits(config: StartSettings): Partial<StartLimits> {
  const limits: Partial<StartLimits> = {};
  if (config.maxItems !== undefined) limits.maxItems = config.maxItems;
  if (config.maxInputBytes !== undefined) limits.maxInputBytes = config.maxInputBytes;
  if (config.maxTotalBytes !== undefined) limits.maxTotalBytes = config.maxTotalBytes;
  return limits;
}

/**
 * Start a batch: a request key that started a batch before answers that batch (`created:
 * false`) without expanding the params again (they may no longer expand: a directory since
 * deleted); otherwise the job expands the params, `createBatch` stores the batch and its items
 * (invariants 4 and 9 (docs/design.md)), and a new batch is sent to as many workers as its
 * target (within the worker limit, through `deps.reserve`).
 * @throws {InvalidBatchError} a `timeoutMs` (the start's, else the job's) that is not from 1 to
 *   `config.itemTimeoutLimitMs`.
 * @throws what the job's expand throws (`unknown_job`, `invalid_params`, …), and what
 *   `createBatch` throws: `TooManyBatchesError`, `BatchTooLargeError`, `InvalidBatchError`, the
 *   store's errors.
 */
export async function startBatch(deps: StartDeps, req: StartRequest): Promise<StartResult> {
  if (req.requestKey !== undefined) {
    const existing = await findBatchByKey(deps.sql, req.tenant, req.requestKey);
    if (existing) return { batch: existing, created: false };
  }
  const caller = parseTraceparent(req.traceparent);
  const t = await tracing();
  // Without a tracer the caller's context is stored as it came, for runs in processes that trace.
  if (!t) return startNew(deps, req, caller ? formatTraceparent(caller) : null);
  // The start's span is the batch's: a producer's create (OpenTelemetry messaging), parent of
  // every run of the batch, which reads its context from the batch row (docs/design.md, "Traces").
  // Under a caller's context it is linked to the active span as well (the trigger's invocation
  // under ADOT), so neither trace loses it.
  const active = caller ? t.activeSpanContext() : undefined;
  const links =
    active && active.spanId !== caller!.spanId
      ? [{ context: active, attributes: { 'leasehold.link': 'invocation' } }]
      : undefined;
  const span = t.start(
    `create ${req.job}`,
    'producer',
    {
      'messaging.system': 'leasehold',
      'messaging.operation.type': 'create',
      'messaging.destination.name': req.job,
      'leasehold.tenant': req.tenant,
      'leasehold.datasource': req.datasource,
    },
    caller,
    links,
  );
  try {
    const started = await startNew(deps, req, formatTraceparent(span.spanContext()));
    span.setAttributes({
      'leasehold.batch.id': started.batch.id,
      'leasehold.batch.created': started.created,
      'messaging.batch.message_count': started.batch.total,
    });
    return started;
  } catch (e) {
    t.fail(span, e);
    throw e;
  } finally {
    span.end();
  }
}

/** A start of a new batch (or of the key's, should a concurrent start have won), its trace context given. */
async function startNew(deps: StartDeps, req: StartRequest, traceContext: string | null): Promise<StartResult> {
  const limitMs = deps.config.itemTimeoutLimitMs ?? BATCH_DEFAULTS.itemTimeoutLimitMs;
  const why = 'one worker invocation can give an item';
  // Where the limit comes from, so the message says what to change.
  const whence =
    "the worker's timeout, LEASEHOLD_WORKER_TIMEOUT_MS, less LEASEHOLD_DEADLINE_MARGIN_MS; `leasehold dev --timeout-ms` sets it locally";
  if (req.timeoutMs !== undefined) checkItemTimeout(req.timeoutMs, limitMs, why, whence);
  // Refused before anything is stored when S3 can tell what is wrong (no such bucket or key,
  // denied, an empty object); what only reading can tell ends the batch failed later. The S3
  // client (and the SDK) only for a start that names S3.
  const s3 = req.source || req.results ? await s3Client(deps.s3) : undefined;
  const stored = req.source ? await checkSource(s3!, req.source) : undefined;
  if (req.results) await checkResults(s3!, req.results);
  const expanded: { items: ItemSource; params: unknown; timeoutMs?: number } = stored
    ? { items: [], ...(deps.jobs.parseParams ? await deps.jobs.parseParams(req.job, req.params) : { params: req.params }) }
    : await deps.jobs.expand(req.job, req.params);
  // The job's own timeout, when the start set none, must fit in an invocation as well: an item
  // that could never finish in time is refused now rather than failed attempt after attempt.
  if (req.timeoutMs === undefined && expanded.timeoutMs !== undefined) {
    try {
      checkItemTimeout(expanded.timeoutMs, limitMs, why, whence);
    } catch (e) {
      throw new InvalidBatchError(`job "${req.job}": ${(e as Error).message}`);
    }
  }
  const { batch, created } = await createBatch(
    deps.sql,
    {
      tenant: req.tenant,
      datasource: req.datasource,
      job: req.job,
      params: expanded.params,
      requestKey: req.requestKey ?? randomUUID(),
      items: expanded.items,
      toleratedFailures: req.toleratedFailures,
      priority: req.priority,
      maxConcurrency: req.maxConcurrency ?? deps.config.batchConcurrency ?? BATCH_DEFAULTS.maxConcurrency,
      // Absent and null both mean none to createBatch.
      timeoutMs: req.timeoutMs,
      ratePerSecond: req.rateLimit?.perSecond,
      pool: req.pool,
      minSucceeded: minSucceededOf(req.completion),
      notify: req.notify,
      source: stored,
      results: req.results,
      deadline: req.deadline,
      deadlineMs: req.deadlineMs,
      traceContext,
    },
    { maxOpen: deps.config.maxOpen, limits: startLimits(deps.config) },
  );
  if (!created || !deps.dispatcher) return { batch, created };
  try {
    // Its target's workers at once (docs/design.md, "Fan-out"), as many as the worker limit lets.
    const reserve = deps.reserve ?? reserveAll;
    await sendWorkers({ sql: deps.sql, dispatcher: deps.dispatcher, reserve }, batch.id, batch.target);
    return { batch, created };
  } catch (dispatchError) {
    return { batch, created, dispatchError };
  }
}
