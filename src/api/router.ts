// The API's router: the route table and the one entry, handleApi (docs/design.md, "Serverless
// runtime": api). The routes live in routes/, one file per family; views.ts shapes their answers.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { BatchNotFoundError, getBatch, parseInput, storedNameSchema } from '../batch/index.js';
import { API_PATHS, type ApiPath } from '../contract.js';
import type { ApiDeps } from './deps.js';
import { errorAnswer, RequestError } from './errors.js';
import { errorResult, type Result } from './respond.js';
import { showActionRoute, startActionRoute } from './routes/actions.js';
import {
  cancelBatchRoute,
  finishedRoute,
  listBatchesRoute,
  listItemsRoute,
  patchBatchRoute,
  pauseBatchRoute,
  resumeBatchRoute,
  redriveRoute,
  showBatch,
  startBatchRoute,
} from './routes/batches.js';
import { failCallbackRoute, heartbeatCallbackRoute, succeedCallbackRoute } from './routes/callbacks.js';
import { getConcurrency, listProcessesRoute, putConcurrency } from './routes/fleet.js';
import { listPoolsRoute, putPoolRoute, showPoolRoute } from './routes/pools.js';
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

/**
 * Each path's methods (the paths are src/contract.ts's `API_PATHS`, which the component routes
 * to this function; typed by it, so a path added there needs its handlers here).
 */
const METHODS: Record<ApiPath, Record<string, Handler>> = {
  '/batches': { POST: startBatchRoute, GET: listBatchesRoute },
  '/batches/{id}': { GET: showBatch, PATCH: patchBatchRoute },
  '/batches/{id}/cancel': { POST: cancelBatchRoute },
  '/batches/{id}/pause': { POST: pauseBatchRoute },
  '/batches/{id}/resume': { POST: resumeBatchRoute },
  '/batches/{id}/items': { GET: listItemsRoute },
  '/batches/{id}/redrive': { POST: redriveRoute },
  '/batches/{id}/finished': { GET: finishedRoute },
  '/tenants/{tenant}/batches': { POST: scoped(startBatchRoute, false), GET: scoped(listBatchesRoute, false) },
  '/tenants/{tenant}/batches/{id}': { GET: scoped(showBatch, true), PATCH: scoped(patchBatchRoute, true) },
  '/tenants/{tenant}/batches/{id}/cancel': { POST: scoped(cancelBatchRoute, true) },
  '/tenants/{tenant}/batches/{id}/pause': { POST: scoped(pauseBatchRoute, true) },
  '/tenants/{tenant}/batches/{id}/resume': { POST: scoped(resumeBatchRoute, true) },
  '/tenants/{tenant}/batches/{id}/items': { GET: scoped(listItemsRoute, true) },
  '/tenants/{tenant}/batches/{id}/redrive': { POST: scoped(redriveRoute, true) },
  '/tenants/{tenant}/batches/{id}/finished': { GET: scoped(finishedRoute, true) },
  '/jobs': { GET: listJobs },
  '/tenants/{tenant}': { GET: showTenant },
  '/tenants/{tenant}/limits': { PUT: putTenantLimits },
  '/tenants/{tenant}/units': { PUT: putUnitsRoute, DELETE: deleteUnitsRoute },
  '/tenants/{tenant}/units/{shard}/release': { POST: releaseUnitRoute },
  '/tenants/{tenant}/outbox': { POST: enqueueOutboxRoute, GET: outboxStatusRoute },
  '/units': { GET: listUnitsRoute },
  '/processes': { GET: listProcessesRoute },
  '/concurrency': { GET: getConcurrency, PUT: putConcurrency },
  '/actions': { POST: startActionRoute },
  '/actions/{id}': { GET: showActionRoute },
  '/pools': { GET: listPoolsRoute },
  '/pools/{name}': { GET: showPoolRoute, PUT: putPoolRoute },
  '/callbacks/{token}/succeed': { POST: succeedCallbackRoute },
  '/callbacks/{token}/fail': { POST: failCallbackRoute },
  '/callbacks/{token}/heartbeat': { POST: heartbeatCallbackRoute },
};

/** Every route the API serves, `{ method, path }`, in API_PATHS order (docs/api.md lists each; a test checks). */
export function apiRoutes(): { method: string; path: ApiPath }[] {
  return API_PATHS.flatMap((path) => Object.keys(METHODS[path]).map((method) => ({ method, path })));
}

/** The routes: path pattern (`*` is one path segment, a path's `{name}`) → method → handler. */
const ROUTES: { pattern: string[]; methods: Record<string, Handler> }[] = API_PATHS.map((path) => ({
  pattern: path
    .split('/')
    .filter(Boolean)
    .map((s) => (s.startsWith('{') ? '*' : s)),
  methods: METHODS[path],
}));

/**
 * Answer one API Gateway HTTP API (payload v2) request (docs/design.md, "Serverless runtime": api).
 * The routes, their bodies, answers and error codes are docs/api.md's reference (a test checks
 * that it names every path of `API_PATHS` and every code of `HTTP_STATUS`). Every answer is JSON;
 * an error is `{ error: { code, message } }` with its code's status (errors.ts); anything else is
 * a 500 `internal` whose details are logged, not answered. Never throws.
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
    const requestId = event.requestContext?.requestId;
    log('error', 'request failed', {
      requestId,
      method,
      path,
      error: e instanceof Error ? (e.stack ?? e.message) : String(e),
    });
    // Its details are the log's, never the answer's: the answer says where to find them.
    return errorResult(
      500,
      'internal',
      requestId ? `internal error: its details are logged with request id ${requestId}` : 'internal error',
    );
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
