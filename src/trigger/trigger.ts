// Starting batches from EventBridge: bus events and schedules (docs/design.md, "Serverless runtime":
// trigger). The event decides the request key, so a redelivered event starts nothing new.
import type { EventBridgeEvent } from 'aws-lambda';
import * as z from '../zod.js';
import {
  checkStorableJson,
  MAX_CONCURRENCY,
  MAX_NAME_LENGTH,
  nameSchema,
  parseInput,
  toleratedFailuresSchema,
  instantSchema,
  steerMsSchema,
  findBatchByKey,
  startBatch,
  TooManyBatchesError,
  type StartDeps,
  type StartSettings,
  type ToleratedFailures,
} from '../batch/index.js';
import { codeOf, isPermanentRequestError, LeaseholdError } from '../errors.js';
import { isLockTimeout } from '../store/index.js';
import { errorFields, type Log } from '../log.js';
import * as q from './sql.js';
import { chainedParams, chainedRequestKey, matchingRules, type ChainRule } from './chain.js';
import { dropLateDeferred, lateReason, START_BY_PASSED, startByAfter, tooLate } from './start-by.js';
import type { BatchFinishedDetail } from '../batch/index.js';
import { BATCH_FINISHED_DETAIL_TYPE, EVENT_SOURCE } from '../contract.js';

/** What a start-batch event carries in `detail`. */
export interface TriggerDetail {
  job: string;
  tenant: string;
  datasource: string;
  /** The job's params; a JSON object, or its JSON text. Default `{}`. */
  params?: Record<string, unknown> | string;
  /**
   * The sender's W3C trace context (docs/design.md, "Traces"): the start's span is its child. One
   * that does not parse is ignored; default the active context (the invocation's, under ADOT).
   */
  traceparent?: string;
}

/** The EventBridge event the trigger function receives. */
export type TriggerEvent = EventBridgeEvent<string, TriggerDetail>;

/** Counts what the trigger did (the runtime's EMF metrics). */
export interface TriggerMetrics {
  count(name: 'BatchesStarted' | 'TriggersRepeated' | 'TriggersDeferred' | 'TriggersDropped'): void;
}

/**
 * What the trigger needs, built once per container: what a start needs, its settings resolved
 * (`maxOpen`, the start limits, the default concurrency and item timeout limit, all given:
 * src/runtime/config.ts fills each from its variable or its one default, so none is defaulted
 * again past that edge).
 */
export interface TriggerDeps extends StartDeps {
  config: Required<StartSettings>;
  log: Log;
  metrics?: TriggerMetrics;
  /** Chain rules: what a `Batch Finished` event starts (`LEASEHOLD_RULES`, see `parseChainRules`). Default none. */
  rules?: readonly ChainRule[];
}

/** What one trigger event did. */
export type TriggerResult =
  /** A new batch, sent to a worker. */
  | { outcome: 'started'; batchId: string; requestKey: string; tenant: string }
  /** The request key had started this batch before (a redelivered event): nothing new. */
  | { outcome: 'repeated'; batchId: string; requestKey: string; tenant: string }
  /**
   * The datasource has `maxOpen` open batches: the firing is kept and the scheduler starts it,
   * under the same request key, once a batch of the datasource finishes ({@link startDeferred}).
   */
  | { outcome: 'deferred'; requestKey: string; tenant: string }
  /** The event cannot start a batch; logged and dropped, never retried. */
  | { outcome: 'dropped'; code: string; reason: string }
  /**
   * A `Batch Finished` event (docs/design.md, "Events"): what each chain rule it matched did,
   * by rule name, under the request key `after:<rule>:<detail.id>` (none matched: empty).
   */
  | { outcome: 'chained'; eventId: string; starts: ({ rule: string } & StartOutcome)[] };

/** What one start of a trigger did (a start-batch event, or one chain rule of a Batch Finished event). */
export type StartOutcome = Exclude<TriggerResult, { outcome: 'chained' }>;

/** An event that cannot start a batch, whatever the number of retries. */
export class InvalidTriggerEventError extends LeaseholdError {
  constructor(message: string) {
    super('invalid_event', message);
  }
}

/**
 * Whether `error` makes the event invalid (dropped) rather than failed (retried): the trigger's
 * own `invalid_event`, or a code src/errors.ts's ERROR_CODES marks `permanent`.
 */
function isInvalid(error: unknown): error is { code: string } {
  return codeOf(error) === 'invalid_event' || isPermanentRequestError(error);
}

const detailSchema = z
  .strictObject({
    tenant: nameSchema,
    datasource: nameSchema,
    job: z
      .string({ error: (i) => (i.input === undefined ? 'Required' : 'must be a string') })
      .check(z.minLength(1, 'must not be empty'), z.maxLength(MAX_NAME_LENGTH)),
    params: z.optional(
      z.union([z.record(z.string(), z.unknown()), z.string()], { error: () => 'must be a JSON object (or its JSON text)' }),
    ),
    toleratedFailures: z.optional(toleratedFailuresSchema),
    maxConcurrency: z.optional(
      z
        .number({ error: () => 'must be a whole number from 1 to 10000' })
        .check(
          z.int('must be a whole number from 1 to 10000'),
          z.gte(1, 'must be a whole number from 1 to 10000'),
          z.lte(MAX_CONCURRENCY, 'must be a whole number from 1 to 10000'),
        ),
    ),
    startBy: z.optional(instantSchema),
    startByMs: z.optional(steerMsSchema),
    // Read, not checked: one that does not parse starts the batch all the same (docs/design.md, "Traces").
    traceparent: z.optional(z.string({ error: () => 'must be a string (a W3C traceparent)' }).check(z.maxLength(512))),
  })
  .check(
    z.refine((d) => d.startBy === undefined || d.startByMs === undefined, {
      message: 'startBy and startByMs: give one, not both',
    }),
  );

/** A start request read from an event: what to start and its request key. */
export interface TriggerRequest {
  tenant: string;
  datasource: string;
  job: string;
  params: Record<string, unknown>;
  requestKey: string;
  /** `detail.toleratedFailures`: `{ count }` or `{ percent }`; null: none (docs/design.md, "Batches": "End"). */
  toleratedFailures: ToleratedFailures | null;
  /** `detail.maxConcurrency`: most runs at once (docs/design.md, "Fan-out"); undefined: the default. */
  maxConcurrency?: number;
  /**
   * Not started by this instant (`detail.startBy`, or `detail.startByMs` after the event's
   * `time`), the firing is dropped (docs/design.md, "Pause, deadline and startBy"); undefined: none.
   */
  startBy?: Date;
  /**
   * The W3C trace context the start continues (docs/design.md, "Traces"): `detail.traceparent`,
   * or a chained start's Batch Finished `detail.traceparent`; undefined: the active context.
   */
  traceparent?: string;
}

// `arn:aws:scheduler:region:account:schedule/group/name` and `arn:aws:events:…:rule/[bus/]name`.
const SCHEDULE_ARN = /^arn:aws[a-z-]*:scheduler:[^:]*:[^:]*:schedule\/(.+)$/;
const RULE_ARN = /^arn:aws[a-z-]*:events:[^:]*:[^:]*:rule\/(.+)$/;

/**
 * Read a start request from an EventBridge event `{ id, 'detail-type', source, time, resources,
 * detail: { job, tenant, datasource, params?, toleratedFailures?, maxConcurrency?, startBy?,
 * startByMs?, traceparent? } }` (`toleratedFailures` and `maxConcurrency` as the API's start takes
 * them; `traceparent` a W3C trace context the start's span continues, docs/design.md, "Traces").
 *
 * The request key (unique per tenant, like the API's):
 * - a scheduled event — `resources[0]` is an EventBridge Scheduler schedule ARN, or
 *   `detail-type` is `Scheduled Event` with a rule ARN — is keyed by the schedule's name plus its
 *   scheduled `time`: `schedule:<group/name>@<time as ISO 8601>`. Scheduler retries of one firing
 *   keep both (an event `id` made with `<aws.scheduler.execution-id>` would not);
 * - any other event by its `id`: `event:<id>`; EventBridge redelivers an event with the same id.
 *
 * @throws {InvalidTriggerEventError} not an EventBridge event, no usable key (including
 *   `<aws.scheduler.…>` placeholders left unreplaced), or `params` text that is not a JSON object.
 * @throws {InvalidRequestError} `detail` fields missing, of the wrong type, unknown or unstorable.
 */
export function readTriggerEvent(event: unknown): TriggerRequest {
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    throw new InvalidTriggerEventError(
      `not an EventBridge event (got ${event === null ? 'null' : Array.isArray(event) ? 'array' : typeof event})`,
    );
  }
  const e = event as Partial<Record<string, unknown>>;
  const detail = e.detail;
  if (detail === undefined) throw new InvalidTriggerEventError('detail: Required ({ job, tenant, datasource, params })');
  if (detail === null || typeof detail !== 'object' || Array.isArray(detail)) {
    throw new InvalidTriggerEventError('detail: must be a JSON object { job, tenant, datasource, params }');
  }
  const body = parseInput(detailSchema, detail, 'detail');
  let params: unknown = body.params ?? {};
  if (typeof params === 'string') {
    try {
      params = JSON.parse(params);
    } catch (err) {
      throw new InvalidTriggerEventError(`detail.params: not JSON (${(err as Error).message})`);
    }
    if (params === null || typeof params !== 'object' || Array.isArray(params)) {
      throw new InvalidTriggerEventError('detail.params: must be a JSON object');
    }
  }
  checkStorableJson(params, 'detail.params');
  return {
    tenant: body.tenant,
    datasource: body.datasource,
    job: body.job,
    params: params as Record<string, unknown>,
    requestKey: requestKeyOf(e),
    toleratedFailures: body.toleratedFailures ?? null,
    ...(body.maxConcurrency !== undefined ? { maxConcurrency: body.maxConcurrency } : {}),
    ...(body.traceparent !== undefined ? { traceparent: body.traceparent } : {}),
    ...startByOf(e, body),
  };
}

function startByOf(e: Partial<Record<string, unknown>>, body: { startBy?: Date; startByMs?: number }): { startBy?: Date } {
  if (body.startBy) return { startBy: body.startBy };
  if (body.startByMs === undefined) return {};
  if (typeof e.time !== 'string' || !Number.isFinite(Date.parse(e.time))) {
    throw new InvalidTriggerEventError("detail.startByMs: counts from the event's time, and the event has no ISO 8601 time");
  }
  return { startBy: startByAfter(e.time, body.startByMs) };
}

function requestKeyOf(e: Partial<Record<string, unknown>>): string {
  const placeholder = (v: unknown) => typeof v === 'string' && v.includes('<aws.');
  const resource = Array.isArray(e.resources) && typeof e.resources[0] === 'string' ? e.resources[0] : undefined;
  const schedule =
    resource &&
    (SCHEDULE_ARN.exec(resource)?.[1] ?? (e['detail-type'] === 'Scheduled Event' ? RULE_ARN.exec(resource)?.[1] : undefined));
  if (schedule) {
    if (placeholder(e.time) || typeof e.time !== 'string' || !Number.isFinite(Date.parse(e.time))) {
      throw new InvalidTriggerEventError(
        `time: a scheduled event needs its scheduled time as ISO 8601 (got ${JSON.stringify(e.time)})`,
      );
    }
    return bounded(`schedule:${schedule}@${new Date(e.time).toISOString()}`);
  }
  if (placeholder(e.id) || placeholder(e.time) || placeholder(resource)) {
    throw new InvalidTriggerEventError(
      `id: holds an unreplaced EventBridge Scheduler placeholder (${JSON.stringify(e.id)}); no request key`,
    );
  }
  if (typeof e.id !== 'string' || e.id.length === 0)
    throw new InvalidTriggerEventError('id: Required (the request key of the start)');
  return bounded(`event:${e.id}`);
}

function bounded(key: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what this rejects
  if (key.length > MAX_NAME_LENGTH || /[\u0000-\u001f\u007f]/.test(key)) {
    throw new InvalidTriggerEventError(
      `request key "${key.slice(0, 80)}…" is over ${MAX_NAME_LENGTH} characters or holds control characters`,
    );
  }
  return key;
}

/**
 * Start the batch an EventBridge event asks for (see {@link readTriggerEvent}) under the event's
 * request key, the way every start goes (`startBatch`: expand, create, send to a worker). A redelivered event answers the batch its key started (`repeated`), without
 * expanding the params again.
 *
 * An event that cannot start a batch — not an EventBridge event, bad `detail`, unknown job,
 * params the job refuses, a batch over a start limit — is logged (`warn`) and dropped: the result
 * says why and nothing is thrown, so EventBridge does not retry it. An event refused only because
 * its datasource has `maxOpen` open batches is never lost: it is kept (`deferred`) and started by
 * the scheduler once a slot frees ({@link startDeferred}).
 * A failed dispatch is logged; the scheduler dispatches the batch later.
 * @throws the store's error (the event is worth retrying then).
 */
export async function handleTrigger(event: unknown, deps: TriggerDeps): Promise<TriggerResult> {
  const ids = eventIds(event);
  if (isBatchFinished(event)) return handleFinished(event, deps, ids);
  return dropInvalid(deps, ids, async () => startRequest(readTriggerEvent(event), deps, ids));
}

/** `f()`; an error that makes the event invalid is logged and answered as `dropped`, any other thrown. */
async function dropInvalid(
  deps: TriggerDeps,
  ids: Record<string, unknown>,
  f: () => Promise<StartOutcome>,
): Promise<StartOutcome> {
  try {
    return await f();
  } catch (error) {
    if (!isInvalid(error)) throw error;
    const { code } = error;
    const reason = errorFields(error).message;
    const dropped = { outcome: 'dropped' as const, code, reason };
    deps.log('warn', 'trigger event dropped', { ...ids, code: dropped.code, reason });
    deps.metrics?.count('TriggersDropped');
    return dropped;
  }
}

/** Start one request of a trigger event: started, repeated (its key started a batch before) or deferred at maxOpen. */
async function startRequest(req: TriggerRequest, deps: TriggerDeps, ids: Record<string, unknown>): Promise<StartOutcome> {
  const { log } = deps;
  const fields = { ...ids, tenant: req.tenant, requestKey: req.requestKey };
  // Too late to start (its startBy passed, database clock): dropped with why, unless its key
  // started a batch already (a redelivered event answers `repeated` below).
  if ((await tooLate(deps.sql, req.startBy)) && !(await findBatchByKey(deps.sql, req.tenant, req.requestKey))) {
    const reason = lateReason(req.startBy!);
    log('warn', 'trigger event dropped: its startBy passed', { ...fields, code: START_BY_PASSED, reason });
    deps.metrics?.count('TriggersDropped');
    return { outcome: 'dropped', code: START_BY_PASSED, reason };
  }
  let started: Awaited<ReturnType<typeof startBatch>>;
  try {
    started = await startBatch(deps, req);
  } catch (error) {
    if (!(error instanceof TooManyBatchesError)) throw error;
    await q.deferStart(deps.sql, {
      tenant: req.tenant,
      requestKey: req.requestKey,
      datasource: req.datasource,
      job: req.job,
      params: req.params,
      toleratedFailures: req.toleratedFailures,
      maxConcurrency: req.maxConcurrency ?? null,
      startBy: req.startBy ?? null,
      traceparent: req.traceparent ?? null,
      error: error.message,
    });
    log('warn', 'trigger event deferred: its datasource has maxOpen open batches', { ...fields, datasource: req.datasource });
    deps.metrics?.count('TriggersDeferred');
    return { outcome: 'deferred', requestKey: req.requestKey, tenant: req.tenant };
  }
  const { batch, created, dispatchError } = started;
  if (!created) {
    log('info', 'trigger event repeated: its batch was started before', { ...fields, batchId: batch.id });
    deps.metrics?.count('TriggersRepeated');
    return { outcome: 'repeated', batchId: batch.id, requestKey: req.requestKey, tenant: req.tenant };
  }
  deps.metrics?.count('BatchesStarted');
  log('info', 'batch started by trigger', {
    ...fields,
    batchId: batch.id,
    job: req.job,
    datasource: req.datasource,
    items: batch.total,
  });
  if (dispatchError !== undefined) {
    // The scheduler dispatches never-started batches; this only made the start sooner.
    log('warn', 'dispatch of a new batch failed', { ...fields, batchId: batch.id, error: errorFields(dispatchError) });
  }
  return { outcome: 'started', batchId: batch.id, requestKey: req.requestKey, tenant: req.tenant };
}

/** Whether `event` is leasehold's own `Batch Finished` event (source `leasehold`). */
function isBatchFinished(event: unknown): event is { detail: unknown } {
  if (event === null || typeof event !== 'object') return false;
  const e = event as Record<string, unknown>;
  return e.source === EVENT_SOURCE && e['detail-type'] === BATCH_FINISHED_DETAIL_TYPE;
}

const finishedSchema = z.looseObject({
  id: z.string().check(z.minLength(1), z.maxLength(100)),
  batchId: z.string().check(z.minLength(1)),
  tenant: z.string().check(z.minLength(1)),
  datasource: z.string().check(z.minLength(1)),
  job: z.string().check(z.minLength(1)),
  requestKey: z.string(),
  status: z.enum(['succeeded', 'failed', 'cancelled']),
});

/**
 * A `Batch Finished` event: start what each matching chain rule asks for, under the request key
 * `after:<rule>:<detail.id>` (the event's stable id, the same on every send: a redelivered
 * event answers `repeated`). A detail that does not parse is dropped; a rule whose start is
 * refused (its job or params) is dropped alone; a store error is thrown (Lambda retries the
 * event, and the starts that landed answer `repeated` then).
 */
async function handleFinished(
  event: { detail: unknown },
  deps: TriggerDeps,
  ids: Record<string, unknown>,
): Promise<TriggerResult> {
  const parsed = z.safeParse(finishedSchema, event.detail);
  if (!parsed.success) {
    return dropInvalid(deps, ids, async () => {
      const issue = parsed.error.issues[0];
      throw new InvalidTriggerEventError(`detail.${issue.path.join('.')}: ${issue.message} (a Batch Finished event)`);
    });
  }
  const detail = parsed.data as unknown as BatchFinishedDetail;
  const starts: ({ rule: string } & StartOutcome)[] = [];
  for (const rule of matchingRules(deps.rules ?? [], detail)) {
    const fields = { ...ids, rule: rule.name, after: detail.batchId };
    const outcome = await dropInvalid(deps, fields, async () => {
      const params = chainedParams(rule, detail);
      checkStorableJson(params, `rules["${rule.name}"].params`);
      return startRequest(
        {
          tenant: rule.tenant ?? detail.tenant,
          datasource: rule.datasource ?? detail.datasource,
          job: rule.job,
          params,
          requestKey: bounded(chainedRequestKey(rule, detail.id)),
          toleratedFailures: rule.toleratedFailures ?? null,
          ...(rule.maxConcurrency !== undefined ? { maxConcurrency: rule.maxConcurrency } : {}),
          ...(rule.startByMs !== undefined ? { startBy: startByAfter(detail.finishedAt, rule.startByMs) } : {}),
          // The chained batch continues the trace of the batch that ended (docs/design.md, "Traces").
          ...(typeof detail.traceparent === 'string' ? { traceparent: detail.traceparent } : {}),
        },
        deps,
        fields,
      );
    });
    starts.push({ rule: rule.name, ...outcome });
  }
  return { outcome: 'chained', eventId: detail.id, starts };
}

/** What one {@link startDeferred} pass did. */
export interface DeferredResult {
  /** Batches started now from deferred firings. */
  started: string[];
  /** Firings still waiting for a slot. */
  waiting: number;
  /** Firings dropped now because their startBy passed while they waited. */
  late: number;
}

/**
 * Start the scheduled firings the trigger deferred because their datasource had `maxOpen` open
 * batches, oldest first, under their own request keys (so a firing starts at most once, also
 * when two schedulers run at once). A firing whose datasource is still full waits for the next
 * pass; one whose startBy passed is dropped first, logged with why; one whose batch exists already is forgotten; one that can no longer start (its job or
 * params now refused) is logged at `warn` with why and forgotten; one whose datasource another
 * session holds past the lock timeout waits for the next pass, the others go on. Each new batch is dispatched
 * like the trigger's own. At most `limit` (default 100) firings per pass.
 * @throws the store's error (the next pass tries again).
 */
export async function startDeferred(deps: TriggerDeps & { limit?: number }): Promise<DeferredResult> {
  const { log } = deps;
  const started: string[] = [];
  const full = new Set<string>();
  const late = await dropLateDeferred(deps.sql, log, () => deps.metrics?.count('TriggersDropped'));
  for (const d of await q.deferredStarts(deps.sql, deps.limit ?? 100)) {
    const source = JSON.stringify([d.tenant, d.datasource]);
    if (full.has(source)) continue;
    const fields = { tenant: d.tenant, requestKey: d.request_key, datasource: d.datasource };
    try {
      // A firing whose batch exists already is forgotten; a failed dispatch is the scheduler's to redo.
      const { batch, created } = await startBatch(deps, {
        tenant: d.tenant,
        datasource: d.datasource,
        job: d.job,
        params: d.params,
        requestKey: d.request_key,
        toleratedFailures: d.tolerated_failures,
        maxConcurrency: d.max_concurrency ?? undefined,
        ...(d.trace_context !== null ? { traceparent: d.trace_context } : {}),
      });
      if (created) {
        started.push(batch.id);
        log('info', 'deferred trigger event started', { ...fields, batchId: batch.id, tries: d.tries });
      }
      await q.forgetDeferred(deps.sql, d.tenant, d.request_key);
    } catch (error) {
      if (error instanceof TooManyBatchesError) {
        // Still full: later firings of this datasource wait behind this one.
        full.add(source);
        await q.deferredRefused(deps.sql, d.tenant, d.request_key, error.message);
        continue;
      }
      if (isLockTimeout(error)) {
        // Another session holds the datasource (a start stuck in its transaction, until the
        // server ends it): its firings wait for the next pass, the others start now
        // (docs/design.md, "Database connections").
        full.add(source);
        log('warn', 'deferred trigger event waits: its datasource is locked by another session', fields);
        continue;
      }
      if (!isInvalid(error)) throw error;
      log('warn', 'deferred trigger event dropped: it can no longer start', {
        ...fields,
        code: error.code,
        reason: errorFields(error).message,
      });
      deps.metrics?.count('TriggersDropped');
      await q.forgetDeferred(deps.sql, d.tenant, d.request_key);
    }
  }
  return { started, waiting: await q.countDeferred(deps.sql), late };
}

/** The fields of an event worth logging with every line about it. */
function eventIds(event: unknown): Record<string, unknown> {
  if (event === null || typeof event !== 'object') return {};
  const e = event as Record<string, unknown>;
  const detail = (e.detail ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of [
    ['eventId', e.id],
    ['detailType', e['detail-type']],
    ['source', e.source],
    ['time', e.time],
    ['tenant', detail.tenant],
  ] as const) {
    if (typeof v === 'string') out[k] = v.slice(0, 200);
  }
  return out;
}
