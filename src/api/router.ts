// The API's router: the route table and the one entry, handleApi (docs/design.md, "Serverless
// runtime": api). The routes live in routes/, one file per family; views.ts shapes their answers.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { BatchNotFoundError, getBatch, parseInput, storedNameSchema } from '../batch/index.js';
import type { ApiDeps } from './deps.js';
import { errorAnswer, RequestError } from './errors.js';
import { errorResult, type Result } from './respond.js';
import {
  cancelBatchRoute,
  finishedRoute,
  listBatchesRoute,
  listItemsRoute,
  patchBatchRoute,
  redriveRoute,
  showBatch,
  startBatchRoute,
} from './routes/batches.js';
import { getConcurrency, listProcessesRoute, putConcurrency } from './routes/fleet.js';
import { listJobs } from './routes/jobs.js';
import { enqueueOutboxRoute, outboxStatusRoute } from './routes/outbox.js';
import { putTenantLimits, showTenant } from './routes/tenants.js';
import { deleteUnitsRoute, listUnitsRoute, putUnitsRoute, releaseUnitRoute } from './routes/units.js';

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
  { pattern: ['batches', '*'], methods: { GET: showBatch, PATCH: patchBatchRoute } },
  { pattern: ['batches', '*', 'cancel'], methods: { POST: cancelBatchRoute } },
  { pattern: ['batches', '*', 'items'], methods: { GET: listItemsRoute } },
  { pattern: ['batches', '*', 'redrive'], methods: { POST: redriveRoute } },
  { pattern: ['batches', '*', 'finished'], methods: { GET: finishedRoute } },
  {
    pattern: ['tenants', '*', 'batches'],
    methods: { POST: scoped(startBatchRoute, false), GET: scoped(listBatchesRoute, false) },
  },
  { pattern: ['tenants', '*', 'batches', '*'], methods: { GET: scoped(showBatch, true), PATCH: scoped(patchBatchRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'cancel'], methods: { POST: scoped(cancelBatchRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'items'], methods: { GET: scoped(listItemsRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'redrive'], methods: { POST: scoped(redriveRoute, true) } },
  { pattern: ['tenants', '*', 'batches', '*', 'finished'], methods: { GET: scoped(finishedRoute, true) } },
  { pattern: ['jobs'], methods: { GET: listJobs } },
  { pattern: ['tenants', '*'], methods: { GET: showTenant } },
  { pattern: ['tenants', '*', 'limits'], methods: { PUT: putTenantLimits } },
  { pattern: ['tenants', '*', 'units'], methods: { PUT: putUnitsRoute, DELETE: deleteUnitsRoute } },
  { pattern: ['tenants', '*', 'units', '*', 'release'], methods: { POST: releaseUnitRoute } },
  { pattern: ['tenants', '*', 'outbox'], methods: { POST: enqueueOutboxRoute, GET: outboxStatusRoute } },
  { pattern: ['units'], methods: { GET: listUnitsRoute } },
  { pattern: ['processes'], methods: { GET: listProcessesRoute } },
  { pattern: ['concurrency'], methods: { GET: getConcurrency, PUT: putConcurrency } },
];

/**
 * Answer one API Gateway HTTP API (payload v2) request (docs/design.md, "Serverless runtime": api).
 *
 * Routes:
 * - `POST /batches` `{ tenant, datasource, job, params?, requestKey?, priority?, toleratedFailures?,
 *   maxConcurrency?, timeoutMs? }` (`maxConcurrency` 1..10,000, default `LEASEHOLD_BATCH_CONCURRENCY`: most
 *   runs at once, docs/design.md "Fan-out"; `timeoutMs`, ms, the items' timeout, at most what a
 *   worker invocation gives an item, docs/design.md "Item timeouts")
 *   (or header `Idempotency-Key`; `priority` 0..9, default 5, orders the tenant's own batches
 *   only; `toleratedFailures` is `{ count }` or `{ percent }`, see docs/design.md, "Batches":
 *   "End") → 201 with the new batch (plus `created: true`), sent to its target's workers at once;
 *   200 with the batch the request key started before (`created: false`), without expanding
 *   the params again. Without any request key every request starts a new batch.
 * - `GET /batches?tenant=&status=&limit=` → 200 `{ batches }`, newest first (limit 1..1000,
 *   default 100), each with its `ageMs` and `itemsPerSecond` (database clock).
 * - `GET /batches/{id}` → 200 with the batch, with its `ageMs`, `itemsPerSecond` and its runs.
 * - `PATCH /batches/{id}` `{ maxConcurrency?, rateLimit? }` → 200 the batch ({@link patchBatchRoute}).
 * - `POST /batches/{id}/cancel` → 200 with the cancelled batch.
 * - `POST /batches/{id}/redrive` → 200 the batch reopened with its failed items pending again
 *   ({@link redriveRoute}).
 * - `GET /batches/{id}/items?after=&limit=&state=` → 200 `{ items, next }`: items (`key`, `state`,
 *   `attempts`, `output`, `error`) in key order after `after`, only those in `state` when given;
 *   `next` is the `after` of the next page, null on the last (limit 1..1000, default 1000).
 * - `GET /batches/{id}/finished?buckets=` → 200 items finished over the batch's life
 *   ({@link finishedRoute}).
 * - Every batch route above has a tenant-scoped twin under `/tenants/{tenant}` (`POST`/`GET
 *   /tenants/{tenant}/batches`, `GET`/`PATCH /tenants/{tenant}/batches/{id}`, `…/cancel`, `…/items`,
 *   `…/redrive`, `…/finished`), so an IAM policy can allow one tenant's paths only: the start's
 *   and the list's tenant is the path's (a different one in the body or query is a 400), and a
 *   batch of another tenant answers 404 `batch_not_found`.
 * - `GET /jobs` → 200 `{ jobs: [{ name, description }] }`.
 * - `GET /tenants/{tenant}` → 200 `tenantView` (views.ts): the tenant's running and waiting batches,
 *   its limit and its oldest wait (docs/design.md, "Tenant fairness").
 * - `PUT /tenants/{tenant}/limits` `{ maxRunning }` (0..2,147,483,647, or null for the default)
 *   → 200 `tenantView` (views.ts) after the change.
 * - `PUT /tenants/{tenant}/units` `{ job, shards, weight?, endpoints?, config? }` → 200
 *   `{ tenant, job, shards, weight, added, removed }`: the tenant's units become shards
 *   `0..shards−1` of the unit job `job` (1..10,000 shards); `config` (or `endpoints`, shorthand
 *   for `config.endpoints`) is validated by the unit job's schema and its `admit` checks (for
 *   `outbox-delivery`: endpoints must point at public addresses, 400 naming `endpoints[i]`); `weight` defaults to the job's
 *   (`outbox-delivery`: the endpoint count; others 1). 404 `unknown_job` for a job that is not a unit job.
 * - `DELETE /tenants/{tenant}/units` → 200 `{ removed }`.
 * - `GET /units?tenant=&limit=` → 200 `{ units: [{ tenant, shard, job, weight, owner, claimedAt,
 *   runningSince, crashes, quarantines, quarantinedUntil }] }` by tenant and shard (limit
 *   1..10,000, default 1,000).
 * - `POST /tenants/{tenant}/units/{shard}/release` → 200 `{ unit }`: the unit's quarantine is
 *   lifted and its crashes forgotten (docs/design.md, "Crashes and quarantine"); 404
 *   `unit_not_found`.
 * - `GET /processes` → 200 `{ fleet, processes }`: `fleet` is `concurrencyView` (views.ts) plus
 *   `totalWeight`, `fairShare`, `evenShare` (the exact share it rounds up), and the spread of the
 *   weight live fleet processes (not retiring) own now: `minWeight`, `maxWeight`, `starving`
 *   (below `fairShare × (1 − shedHysteresis)` and below `fairShare − 1`);
 *   `processes` (live and expired, not yet swept, oldest first) are `[{ id, role, retiring,
 *   hostname, version, startedAt, expiresAt, live, units, weight }]`, `weight` being what each
 *   owns now.
 * - `GET /concurrency` → 200 `concurrencyView` (views.ts); `PUT /concurrency` `{ desired }` (0..1000)
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
 * `unknown_job`, `no_outbox_units`, `unit_not_found`), 405 (`method_not_allowed`, with `allow`), 409
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
