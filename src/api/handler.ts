import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { InvalidRequestError } from '../errors.js';
import {
  BatchNotFoundError,
  cancelBatch,
  checkStorableJson,
  dispatchBatch,
  fieldPath,
  getBatch,
  getTenant,
  itemsPage,
  listBatches,
  nameSchema,
  parseInput,
  requestKeySchema,
  startBatch,
  storedNameSchema,
  typeName,
  setTenantLimit,
  type TenantInfo,
} from '../batch/index.js';
import {
  balanceOf,
  deleteTenantUnits,
  LEASE_DEFAULTS,
  listProcesses,
  listUnits,
  putTenantUnits,
  readFleet,
  setDesired,
  type Fleet,
  type ProcessView,
  type UnitView,
} from '../lease/index.js';
import { defaultUnitJobs, enqueueOutbox, outboxStatus, type OutboxStatus, type UnitJobRegistry } from '../units/index.js';
import { finishedRoute, redriveRoute } from './batch-routes.js';
import { batchView, withActivity } from './batch-view.js';
import type { ApiDeps } from './deps.js';
import { errorAnswer, RequestError } from './errors.js';
import { errorResult, iso, json, type Result } from './respond.js';
import {
  concurrencySchema,
  header,
  itemsPageSchema,
  listSchema,
  listUnitsSchema,
  outboxSchema,
  putUnitsSchema,
  query,
  readJsonBody,
  startSchema,
  tenantLimitsSchema,
} from './request.js';

export type { ApiDeps };

/**
 * A route's handler: `params` are the path's `*` segments; `tenant` is set on the tenant-scoped
 * twin of a batch route (`/tenants/{tenant}/batches…`), whose batch must be that tenant's.
 */
type Handler = (event: APIGatewayProxyEventV2, deps: ApiDeps, params: string[], tenant?: string) => Promise<Result>;

/**
 * The tenant-scoped twin of a batch route (`/tenants/{tenant}/batches…`), so that an IAM policy
 * can allow `execute-api:Invoke` on one tenant's paths only (docs/deploy.md): the first `*` is
 * the tenant; with `ofBatch`, the next is a batch id, and a batch of another tenant answers 404
 * `batch_not_found` as an unknown one does, before anything is done to it.
 */
function scoped(handler: Handler, ofBatch: boolean): Handler {
  return async (event, deps, [rawTenant, ...rest]) => {
    const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
    if (ofBatch) {
      const [id] = rest;
      // A batch's tenant never changes: checked once, it holds for the handler's statements.
      if ((await getBatch(deps.sql, id)).tenant !== tenant) throw new BatchNotFoundError(id);
    }
    return handler(event, deps, rest, tenant);
  };
}

/** The routes: path pattern (`*` is one path segment) → method → handler. */
const ROUTES: { pattern: string[]; methods: Record<string, Handler> }[] = [
  { pattern: ['batches'], methods: { POST: startBatchRoute, GET: listBatchesRoute } },
  { pattern: ['batches', '*'], methods: { GET: showBatch } },
  { pattern: ['batches', '*', 'cancel'], methods: { POST: cancelBatchRoute } },
  { pattern: ['batches', '*', 'items'], methods: { GET: listItemsRoute } },
  { pattern: ['batches', '*', 'redrive'], methods: { POST: redriveRoute } },
  { pattern: ['batches', '*', 'finished'], methods: { GET: finishedRoute } },
  { pattern: ['tenants', '*', 'batches'], methods: { POST: scoped(startBatchRoute, false), GET: scoped(listBatchesRoute, false) } },
  { pattern: ['tenants', '*', 'batches', '*'], methods: { GET: scoped(showBatch, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'cancel'], methods: { POST: scoped(cancelBatchRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'items'], methods: { GET: scoped(listItemsRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'redrive'], methods: { POST: scoped(redriveRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'finished'], methods: { GET: scoped(finishedRoute, true) } },
  { pattern: ['jobs'], methods: { GET: listJobs } },
  { pattern: ['tenants', '*'], methods: { GET: showTenant } },
  { pattern: ['tenants', '*', 'limits'], methods: { PUT: putTenantLimits } },
  { pattern: ['tenants', '*', 'units'], methods: { PUT: putUnitsRoute, DELETE: deleteUnitsRoute } },
  { pattern: ['tenants', '*', 'outbox'], methods: { POST: enqueueOutboxRoute, GET: outboxStatusRoute } },
  { pattern: ['units'], methods: { GET: listUnitsRoute } },
  { pattern: ['processes'], methods: { GET: listProcessesRoute } },
  { pattern: ['concurrency'], methods: { GET: getConcurrency, PUT: putConcurrency } },
];

/**
 * Answer one API Gateway HTTP API (payload v2) request (docs/design.md, "Serverless runtime": api).
 *
 * Routes:
 * - `POST /batches` `{ tenant, datasource, job, params?, requestKey?, priority?, toleratedFailures? }`
 *   (or header `Idempotency-Key`; `priority` 0..9, default 5, orders the tenant's own batches
 *   only; `toleratedFailures` is `{ count }` or `{ percent }`, see docs/design.md, "Batches":
 *   "End") → 201 with the new batch (plus `created: true`), sent to a worker at once;
 *   200 with the batch the request key started before (`created: false`), without expanding
 *   the params again. Without any request key every request starts a new batch.
 * - `GET /batches?tenant=&status=&limit=` → 200 `{ batches }`, newest first (limit 1..1000,
 *   default 100), each with its `ageMs` and `itemsPerSecond` (database clock).
 * - `GET /batches/{id}` → 200 with the batch, with its `ageMs` and `itemsPerSecond`.
 * - `POST /batches/{id}/cancel` → 200 with the cancelled batch.
 * - `POST /batches/{id}/redrive` → 200 the batch reopened with its failed items pending again
 *   ({@link redriveRoute}).
 * - `GET /batches/{id}/items?after=&limit=&state=` → 200 `{ items, next }`: items (`key`, `state`,
 *   `attempts`, `output`, `error`) in key order after `after`, only those in `state` when given;
 *   `next` is the `after` of the next page, null on the last (limit 1..1000, default 1000).
 * - `GET /batches/{id}/finished?buckets=` → 200 items finished over the batch's life
 *   ({@link finishedRoute}).
 * - Every batch route above has a tenant-scoped twin under `/tenants/{tenant}` (`POST`/`GET
 *   /tenants/{tenant}/batches`, `GET /tenants/{tenant}/batches/{id}`, `…/cancel`, `…/items`,
 *   `…/redrive`, `…/finished`), so an IAM policy can allow one tenant's paths only: the start's
 *   and the list's tenant is the path's (a different one in the body or query is a 400), and a
 *   batch of another tenant answers 404 `batch_not_found`.
 * - `GET /jobs` → 200 `{ jobs: [{ name, description }] }`.
 * - `GET /tenants/{tenant}` → 200 {@link tenantView}: the tenant's running and waiting batches,
 *   its limit and its oldest wait (docs/design.md, "Tenant fairness").
 * - `PUT /tenants/{tenant}/limits` `{ maxRunning }` (0..2,147,483,647, or null for the default)
 *   → 200 {@link tenantView} after the change.
 * - `PUT /tenants/{tenant}/units` `{ job, shards, weight?, endpoints?, config? }` → 200
 *   `{ tenant, job, shards, weight, added, removed }`: the tenant's units become shards
 *   `0..shards−1` of the unit job `job` (1..10,000 shards); `config` (or `endpoints`, shorthand
 *   for `config.endpoints`) is validated by the unit job's schema and its `admit` checks (for
 *   `outbox-delivery`: endpoints must point at public addresses, 400 naming `endpoints[i]`); `weight` defaults to the job's
 *   (`outbox-delivery`: the endpoint count; others 1). 404 `unknown_job` for a job that is not a unit job.
 * - `DELETE /tenants/{tenant}/units` → 200 `{ removed }`.
 * - `GET /units?tenant=&limit=` → 200 `{ units: [{ tenant, shard, job, weight, owner, claimedAt }] }`
 *   by tenant and shard (limit 1..10,000, default 1,000).
 * - `GET /processes` → 200 `{ fleet, processes }`: `fleet` is {@link concurrencyView} plus
 *   `totalWeight`, `fairShare`, and the spread of the weight live fleet processes (not retiring)
 *   own now: `minWeight`, `maxWeight`, `starving` (below `fairShare × (1 − shedHysteresis)`);
 *   `processes` (live and expired, not yet swept, oldest first) are `[{ id, role, retiring,
 *   hostname, version, startedAt, expiresAt, live, units, weight }]`, `weight` being what each
 *   owns now.
 * - `GET /concurrency` → 200 {@link concurrencyView}; `PUT /concurrency` `{ desired }` (0..1000)
 *   → 200 the same, after the change (the scheduler acts on it at its next run).
 * - `POST /tenants/{tenant}/outbox` `{ key, payload }` → 201 `{ id, shard }`: the message is
 *   enqueued on the shard its key hashes to; 404 `no_outbox_units` when the tenant has no
 *   `outbox-delivery` units.
 * - `GET /tenants/{tenant}/outbox` → 200 `{ tenant, shards, endpoints: [{ url, backlog, oldest:
 *   { id, enqueuedAt, ageMs } | null, failures, lastError: { message, at } | null,
 *   lastDeliveredAt }] }`: per endpoint, the messages not yet delivered to it, the oldest of them
 *   (age by the database clock), failed attempts since its last success and its last error; 404
 *   `no_outbox_units` when the tenant has no `outbox-delivery` units.
 *
 * Every answer is JSON. Errors are `{ error: { code, message } }` with a stable code: 400
 * (`invalid_request`, `invalid_json`, `invalid_params`, `invalid_batch`; the message names the
 * field; `batch_cancelled`: a redrive of a cancelled batch), 404 (`not_found`, `batch_not_found`,
 * `unknown_job`, `no_outbox_units`), 405 (`method_not_allowed`, with `allow`), 409
 * (`batch_finished`; a redrive's `batch_open`, `nothing_to_redrive`), 413 (`body_too_large`, over `config.maxBodyBytes`), 415
 * (`unsupported_media_type`) and 413 `batch_too_large` (the params expand to a batch over a start
 * limit: item count, key bytes, input bytes or total bytes, named in the message), 429 (`too_many_batches`, the datasource has `maxOpen` open
 * batches). Anything else is a 500 `internal` whose details are logged, not answered.
 * Never throws.
 */
export async function handleApi(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const { log } = deps;
  const method = (event.requestContext?.http?.method ?? '').toUpperCase();
  const path = event.rawPath ?? event.requestContext?.http?.path ?? '/';
  try {
    const segments = routeSegments(event, path);
    const route = segments && ROUTES.find((r) => matches(r.pattern, segments));
    if (!segments || !route) throw new RequestError('not_found', `no route ${method} ${path}`);
    const run = route.methods[method];
    if (!run) {
      const allow = Object.keys(route.methods).join(', ');
      throw new RequestError('method_not_allowed', `${method} is not allowed on ${path}; use ${allow}`, { allow });
    }
    const params = segments.filter((_, i) => route.pattern[i] === '*');
    return await run(event, deps, params);
  } catch (e) {
    const answer = errorAnswer(e);
    if (answer) return errorResult(answer.status, answer.code, answer.message, answer.headers);
    log('error', 'request failed', {
      requestId: event.requestContext?.requestId,
      method,
      path,
      error: e instanceof Error ? (e.stack ?? e.message) : String(e),
    });
    return errorResult(500, 'internal', 'internal error');
  }
}

/** Path segments without the stage prefix, percent-decoded; undefined when undecodable. */
function routeSegments(event: APIGatewayProxyEventV2, path: string): string[] | undefined {
  let segments = path.split('/').filter((s) => s !== '');
  // With a named stage, HTTP APIs put the stage in front of the route's path.
  const stage = event.requestContext?.stage;
  if (stage && stage !== '$default' && segments[0] === stage) segments = segments.slice(1);
  try {
    return segments.map(decodeURIComponent);
  } catch {
    return undefined;
  }
}

function matches(pattern: string[], segments: string[]): boolean {
  return pattern.length === segments.length && pattern.every((p, i) => p === '*' || p === segments[i]);
}

async function startBatchRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, _params: string[], scope?: string): Promise<Result> {
  const raw = readJsonBody(event, deps.config.maxBodyBytes);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InvalidRequestError(`body: must be a JSON object, got ${typeName(raw)}`);
  }
  // On /tenants/{tenant}/batches the body's tenant is the path's: it may be left out.
  const given = raw as Record<string, unknown>;
  if (scope !== undefined && given.tenant !== undefined && given.tenant !== scope) {
    throw new InvalidRequestError(`tenant: differs from the path's tenant ${JSON.stringify(scope)}; leave it out or make them equal`);
  }
  const body = parseInput(startSchema, scope === undefined ? raw : { ...given, tenant: scope });
  checkStorableJson(body.params, 'params');

  const headerValue = header(event, 'idempotency-key');
  const headerKey = headerValue === undefined ? undefined : parseInput(requestKeySchema, headerValue, 'Idempotency-Key');
  if (body.requestKey !== undefined && headerKey !== undefined && body.requestKey !== headerKey) {
    throw new InvalidRequestError('requestKey: differs from the Idempotency-Key header; send one or make them equal');
  }
  const givenKey = body.requestKey ?? headerKey;

  const { batch, created, dispatchError } = await startBatch(deps, { ...body, requestKey: givenKey, toleratedFailures: body.toleratedFailures ?? null });
  if (!created) return json(200, { ...batchView(batch), created: false });
  if (dispatchError !== undefined) {
    // The scheduler dispatches never-started batches; this only made the start sooner.
    deps.log('warn', 'dispatch of a new batch failed', { batchId: batch.id, error: String(dispatchError) });
  }
  const location = scope === undefined ? `/batches/${batch.id}` : `/tenants/${encodeURIComponent(scope)}/batches/${batch.id}`;
  return json(201, { ...batchView(batch), created: true }, { location });
}

async function listBatchesRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, _params: string[], scope?: string): Promise<Result> {
  const q = Object.fromEntries(Object.entries(query(event)).filter(([, v]) => v !== ''));
  if (scope !== undefined && q.tenant !== undefined && q.tenant !== scope) {
    throw new InvalidRequestError(`tenant: differs from the path's tenant ${JSON.stringify(scope)}; leave it out or make them equal`);
  }
  const filter = parseInput(listSchema, scope === undefined ? q : { ...q, tenant: scope }, 'query');
  const batches = await listBatches(deps.sql, filter);
  return json(200, { batches: await withActivity(deps.sql, batches) });
}

async function showBatch(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const [view] = await withActivity(deps.sql, [await getBatch(deps.sql, id)]);
  return json(200, view);
}

async function cancelBatchRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const cancelled = await cancelBatch(deps.sql, id);
  // Its slot is free at once: the tenant's next waiting batch goes to a worker now.
  await dispatchWaiting(deps, cancelled.tenant);
  return json(200, batchView(cancelled));
}

/**
 * Sends the tenant's first waiting batches, as many as its limit leaves room for (at most 10),
 * to workers; a failed send is logged (the scheduler dispatches waiting batches too).
 */
async function dispatchWaiting(deps: ApiDeps, tenant: string): Promise<void> {
  try {
    const t = await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning, limit: 10 });
    const room = Math.max(0, (t.effectiveMaxRunning ?? Infinity) - t.running);
    for (const b of t.waitingBatches.slice(0, room)) await dispatchBatch(deps.sql, deps.dispatcher, b.id);
  } catch (error) {
    deps.log('warn', 'dispatch of waiting batches failed', { tenant, error: String(error) });
  }
}

async function listItemsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const page = parseInput(itemsPageSchema, query(event), 'query');
  return json(200, await itemsPage(deps.sql, id, page));
}

async function listJobs(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const jobs = deps.jobs.names().map((name) => ({ name, description: deps.jobs.get(name).description }));
  return json(200, { jobs });
}

let builtinUnitJobs: UnitJobRegistry | undefined;

function unitJobs(deps: ApiDeps): UnitJobRegistry {
  return deps.unitJobs ?? (builtinUnitJobs ??= defaultUnitJobs());
}

/** A JSON object body, or a 400 naming the body. */
function objectBody(event: APIGatewayProxyEventV2, deps: ApiDeps): Record<string, unknown> {
  const raw = readJsonBody(event, deps.config.maxBodyBytes);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InvalidRequestError(`body: must be a JSON object, got ${typeName(raw)}`);
  }
  return raw as Record<string, unknown>;
}

/** The `{tenant}` path segment, validated like every tenant name. */
function tenantParam(tenant: string): string {
  return parseInput(nameSchema, tenant, 'tenant');
}

async function putUnitsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = tenantParam(rawTenant);
  const body = parseInput(putUnitsSchema, objectBody(event, deps));
  const job = unitJobs(deps).get(body.job);
  if (body.endpoints !== undefined && body.config?.endpoints !== undefined) {
    throw new InvalidRequestError('endpoints: given twice (also as config.endpoints); send one');
  }
  const given = { ...(body.config ?? {}), ...(body.endpoints !== undefined ? { endpoints: body.endpoints } : {}) };
  checkStorableJson(given, 'config');
  // Fields of the config are named as sent: `endpoints[0]` (the shorthand) or `config.x`.
  const name = (path: readonly PropertyKey[]) =>
    path[0] === 'endpoints' && body.config?.endpoints === undefined ? fieldPath(path) : fieldPath(['config', ...path]);
  const parsed = job.config.safeParse(given);
  if (!parsed.success) {
    const message = parsed.error.issues
      .map((i) => (i.code === 'unrecognized_keys' ? i.keys.map((k) => `${name([...i.path, k])}: unknown field`).join('; ') : `${name(i.path)}: ${i.message}`))
      .join('; ');
    throw new InvalidRequestError(message);
  }
  const config = parsed.data;
  // What the schema cannot see, such as where an endpoint's host resolves to.
  const issues = (await job.admit?.(config)) ?? [];
  if (issues.length) throw new InvalidRequestError(issues.map((i) => `${name(i.path)}: ${i.message}`).join('; '));
  const weight = body.weight ?? job.weight?.(config) ?? 1;
  if (!Number.isInteger(weight) || weight < 0) {
    throw new InvalidRequestError(`weight: the job's default weight for this config is ${weight}; give a whole number ≥ 0`);
  }
  const { added, removed } = await putTenantUnits(deps.sql, tenant, { job: job.name, shards: body.shards, weight, config });
  return json(200, { tenant, job: job.name, shards: body.shards, weight, added, removed });
}

async function deleteUnitsRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be deleted, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, { removed: await deleteTenantUnits(deps.sql, tenant) });
}

/** A unit as the API shows it (claim time as ISO 8601). */
function unitView(u: UnitView) {
  return { tenant: u.tenant, shard: u.shard, job: u.job, weight: u.weight, owner: u.owner, claimedAt: iso(u.claimedAt) };
}

/** A process as the API shows it (times as ISO 8601). */
function processView(p: ProcessView) {
  return {
    id: p.id,
    role: p.role,
    retiring: p.retiring,
    hostname: p.hostname,
    version: p.version,
    startedAt: iso(p.startedAt),
    expiresAt: iso(p.expiresAt),
    live: p.live,
    units: p.units,
    weight: p.weight,
  };
}

async function listUnitsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const q = Object.fromEntries(Object.entries(query(event)).filter(([, v]) => v !== ''));
  const filter = parseInput(listUnitsSchema, q, 'query');
  const units = await listUnits(deps.sql, filter);
  return json(200, { units: units.map(unitView) });
}

/**
 * The knob against the fleet: `desired`, `live` (live fleet processes not retiring: what
 * `desired` is compared with), `coming` (invocations sent and not yet confirmed), `retiring`
 * (asked to leave, not gone yet) and `batch` (workers sent for batches: not counted, owning no
 * unit).
 */
function concurrencyView(f: Fleet) {
  return { desired: f.desired, live: f.live, coming: f.coming, retiring: f.retiring, batch: f.batch };
}

async function listProcessesRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const [fleet, processes] = await Promise.all([readFleet(deps.sql), listProcesses(deps.sql)]);
  const owning = processes.filter((p) => p.live && p.role === 'fleet' && !p.retiring).map((p) => p.weight);
  const hysteresis = deps.config.lease?.shedHysteresis ?? LEASE_DEFAULTS.shedHysteresis;
  return json(200, {
    fleet: { ...concurrencyView(fleet), totalWeight: fleet.totalWeight, fairShare: fleet.fairShare, ...balanceOf(owning, fleet.fairShare, hysteresis) },
    processes: processes.map(processView),
  });
}

async function getConcurrency(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  return json(200, concurrencyView(await readFleet(deps.sql)));
}

async function putConcurrency(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const { desired } = parseInput(concurrencySchema, objectBody(event, deps));
  await setDesired(deps.sql, desired);
  return json(200, concurrencyView(await readFleet(deps.sql)));
}

/** A tenant's outbox status as the API shows it (times as ISO 8601). */
function outboxStatusView(o: OutboxStatus) {
  return {
    tenant: o.tenant,
    shards: o.shards,
    endpoints: o.endpoints.map((e) => ({
      url: e.url,
      backlog: e.backlog,
      oldest: e.oldest && { id: e.oldest.id, enqueuedAt: iso(e.oldest.enqueuedAt), ageMs: e.oldest.ageMs },
      failures: e.failures,
      lastError: e.lastError && { message: e.lastError.message, at: iso(e.lastError.at) },
      lastDeliveredAt: iso(e.lastDeliveredAt),
    })),
  };
}

async function outboxStatusRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be looked at, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, outboxStatusView(await outboxStatus(deps.sql, tenant)));
}

async function enqueueOutboxRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = tenantParam(rawTenant);
  const body = parseInput(outboxSchema, objectBody(event, deps));
  checkStorableJson(body.payload, 'payload');
  const { id, shard } = await enqueueOutbox(deps.sql, tenant, { key: body.key, payload: body.payload });
  return json(201, { id, shard });
}

/**
 * A tenant as the API shows it: `running` and `waiting` counts, `maxRunning` (its own limit, null
 * when it uses the default), `effectiveMaxRunning` (the limit in force, null: none),
 * `oldestWaitMs` (how long its longest-waiting batch has waited, since its start or last
 * handoff, database clock; null: none waits), and `runningBatches` / `waitingBatches` (at most
 * 100 each; waiting ones in the order its turns take them) as `[{ id, datasource, job, priority,
 * createdAt, since, forMs }]`.
 */
function tenantView(t: TenantInfo) {
  const batch = (b: TenantInfo['runningBatches'][number]) => ({
    id: b.id,
    datasource: b.datasource,
    job: b.job,
    priority: b.priority,
    createdAt: iso(b.createdAt),
    since: iso(b.since),
    forMs: b.forMs,
  });
  return {
    tenant: t.tenant,
    running: t.running,
    waiting: t.waiting,
    maxRunning: t.maxRunning,
    effectiveMaxRunning: t.effectiveMaxRunning,
    oldestWaitMs: t.oldestWaitMs,
    runningBatches: t.runningBatches.map(batch),
    waitingBatches: t.waitingBatches.map(batch),
  };
}

async function showTenant(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be looked at, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, tenantView(await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning })));
}

async function putTenantLimits(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  const { maxRunning } = parseInput(tenantLimitsSchema, objectBody(event, deps));
  await setTenantLimit(deps.sql, tenant, maxRunning);
  await dispatchWaiting(deps, tenant);
  return json(200, tenantView(await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning })));
}
