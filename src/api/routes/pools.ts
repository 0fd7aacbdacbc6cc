// Routes of concurrency pools (docs/design.md, "Concurrency pools"): GET /pools, GET and
// PUT /pools/{name}.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { getPool, listPools, parseInput, poolLimitsOf, setPool, type PoolInfo } from '../../batch/index.js';
import type { ApiDeps } from '../deps.js';
import { RequestError } from '../errors.js';
import { objectBody, poolLimitsSchema, poolNameSchema } from '../request.js';
import { json, type Result } from '../respond.js';
import type { ApiPool } from '../wire.js';

/** A pool as the API answers it. */
function poolView(p: PoolInfo): ApiPool {
  return {
    name: p.name,
    limit: p.perKey === null ? p.total : null,
    perKey: p.perKey,
    total: p.total,
    inFlight: p.inFlight,
    runs: p.runs,
    keys: p.keys,
    updatedAt: p.updatedAt.toISOString(),
  };
}

/** `GET /pools`: every pool (by name, at most 1,000) with its items in flight now. */
export async function listPoolsRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  return json(200, { pools: (await listPools(deps.sql)).map(poolView) });
}

/** `GET /pools/{name}`: one pool with its items in flight now; 404 `not_found` when there is none. */
export async function showPoolRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawName]: string[]): Promise<Result> {
  const name = parseInput(poolNameSchema, rawName, 'name');
  const pool = await getPool(deps.sql, name);
  if (!pool) throw new RequestError('not_found', `no pool ${JSON.stringify(name)}`);
  return json(200, poolView(pool));
}

/**
 * `PUT /pools/{name}` `{ limit }` or `{ perKey, total? }`: create the pool or change its limits,
 * also while batches run (their runs take under the new limits at once; a lower limit takes no
 * permit back, runs give back as their items end, within a beat). 200 the pool.
 */
export async function putPoolRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawName]: string[]): Promise<Result> {
  const name = parseInput(poolNameSchema, rawName, 'name');
  const body = parseInput(poolLimitsSchema, objectBody(event, deps));
  return json(200, poolView(await setPool(deps.sql, name, poolLimitsOf(body))));
}
