// Routes of a tenant's fairness: GET /tenants/{tenant}, PUT /tenants/{tenant}/limits.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { getTenant, parseInput, setTenantLimit, storedNameSchema } from '../../batch/index.js';
import type { ApiDeps } from '../deps.js';
import { objectBody, tenantLimitsSchema } from '../request.js';
import { json, type Result } from '../respond.js';
import { tenantView } from '../views.js';
import { dispatchWaiting } from './batches.js';

/** `GET /tenants/{tenant}`: its running and waiting batches, limit and oldest wait. */
export async function showTenant(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be looked at, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, tenantView(await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning })));
}

/** `PUT /tenants/{tenant}/limits` `{ maxRunning }`: set (null: clear) the tenant's limit. */
export async function putTenantLimits(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  const { maxRunning } = parseInput(tenantLimitsSchema, objectBody(event, deps));
  await setTenantLimit(deps.sql, tenant, maxRunning);
  await dispatchWaiting(deps, tenant);
  return json(200, tenantView(await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning })));
}
