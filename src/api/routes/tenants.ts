// Routes of a tenant's fairness and usage: GET /tenants/{tenant}, PUT /tenants/{tenant}/limits.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { getTenant, getTenantUsage, parseInput, setTenantLimit, storedNameSchema } from '../../batch/index.js';
import type { ApiDeps } from '../deps.js';
import { objectBody, query, tenantLimitsSchema, tenantUsageSchema } from '../request.js';
import { json, type Result } from '../respond.js';
import { tenantUsageView, tenantView } from '../views.js';
import { dispatchWaiting } from './batches.js';

/**
 * `GET /tenants/{tenant}?from=&to=`: its running and waiting batches, limit and oldest wait, and
 * its `usage` recorded in `[from, to)` (ISO 8601; default the last 30 days; docs/design.md,
 * "Usage and cost"). 400 `invalid_request` for a bad instant or `from` not before `to`.
 */
export async function showTenant(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be looked at, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  const range = parseInput(tenantUsageSchema, query(event), 'query');
  const [info, usage] = await Promise.all([
    getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning }),
    getTenantUsage(deps.sql, tenant, range, deps.config.prices),
  ]);
  return json(200, { ...tenantView(info), usage: tenantUsageView(usage) });
}

/** `PUT /tenants/{tenant}/limits` `{ maxRunning }`: set (null: clear) the tenant's limit. */
export async function putTenantLimits(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  const { maxRunning } = parseInput(tenantLimitsSchema, objectBody(event, deps));
  await setTenantLimit(deps.sql, tenant, maxRunning);
  await dispatchWaiting(deps, tenant);
  return json(200, tenantView(await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning })));
}
