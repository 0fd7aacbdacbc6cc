// Routes of unit registrations: PUT and DELETE /tenants/{tenant}/units, GET /units, and the
// release of a quarantined unit: POST /tenants/{tenant}/units/{shard}/release.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { checkStorableJson, fieldPath, parseInput, storedNameSchema } from '../../batch/index.js';
import { InvalidRequestError, LeaseholdError } from '../../errors.js';
import { deleteTenantUnits, listUnits, putTenantUnits, releaseUnit } from '../../lease/index.js';
import { defaultUnitJobs, type UnitJob, type UnitJobRegistry } from '../../units/index.js';
import type { ApiDeps } from '../deps.js';
import { listUnitsSchema, objectBody, putUnitsSchema, query, shardParam, tenantParam } from '../request.js';
import { json, type Result } from '../respond.js';
import { unitView } from '../views.js';
import * as z from '../../zod.js';

let builtinUnitJobs: UnitJobRegistry | undefined;

/** The deps' unit jobs, else the built-in ones (`outbox-delivery`). */
export function unitJobs(deps: ApiDeps): UnitJobRegistry {
  return deps.unitJobs ?? (builtinUnitJobs ??= defaultUnitJobs());
}

/**
 * The unit job named `name`. @throws {LeaseholdError} code `unknown_job` (404), its message
 * naming the unit jobs this app has and, for `outbox-delivery` (opt-in: docs/app.md), the line
 * that adds it: a new user's first `units put` names it before the app registers it.
 */
function findUnitJob(registry: UnitJobRegistry, name: string): UnitJob<unknown> {
  const job = registry.find(name);
  if (job) return job;
  const names = registry.names();
  const has = names.length ? `this app's unit jobs: ${names.join(', ')}` : 'this app has no unit jobs';
  const hint =
    name === 'outbox-delivery' ? "; add outboxDelivery() (from 'leasehold') to createHandlers' unitJobs to deliver outboxes" : '';
  throw new LeaseholdError('unknown_job', `unknown unit job "${name}" (${has})${hint}`);
}

/** `PUT /tenants/{tenant}/units`: register the tenant's units of a unit job, the config checked by the job's schema and `admit`. */
export async function putUnitsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  const tenant = tenantParam(rawTenant);
  const body = parseInput(putUnitsSchema, objectBody(event, deps));
  const job = findUnitJob(unitJobs(deps), body.job);
  if (body.endpoints !== undefined && body.config?.endpoints !== undefined) {
    throw new InvalidRequestError('endpoints: given twice (also as config.endpoints); send one');
  }
  const given = { ...(body.config ?? {}), ...(body.endpoints !== undefined ? { endpoints: body.endpoints } : {}) };
  checkStorableJson(given, 'config');
  // Fields of the config are named as sent: `endpoints[0]` (the shorthand) or `config.x`.
  const name = (path: readonly PropertyKey[]) =>
    path[0] === 'endpoints' && body.config?.endpoints === undefined ? fieldPath(path) : fieldPath(['config', ...path]);
  const parsed = z.safeParse(job.config, given);
  if (!parsed.success) {
    const message = parsed.error.issues
      .map((i) =>
        i.code === 'unrecognized_keys'
          ? i.keys.map((k) => `${name([...i.path, k])}: unknown field`).join('; ')
          : `${name(i.path)}: ${i.message}`,
      )
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

/** `DELETE /tenants/{tenant}/units`: remove every unit of the tenant. */
export async function deleteUnitsRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [rawTenant]: string[]): Promise<Result> {
  // Any stored tenant name may be deleted, not only the registration charset.
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  return json(200, { removed: await deleteTenantUnits(deps.sql, tenant) });
}

/** `GET /units?tenant=&limit=`: units with owner and claim time. */
export async function listUnitsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps): Promise<Result> {
  const q = Object.fromEntries(Object.entries(query(event)).filter(([, v]) => v !== ''));
  const filter = parseInput(listUnitsSchema, q, 'query');
  const units = await listUnits(deps.sql, filter);
  return json(200, { units: units.map(unitView) });
}

/**
 * `POST /tenants/{tenant}/units/{shard}/release`: lift the unit's quarantine and forget its
 * crashes (docs/design.md, "Crashes and quarantine"); 200 `{ unit }`, 404 `unit_not_found`.
 */
export async function releaseUnitRoute(
  _event: APIGatewayProxyEventV2,
  deps: ApiDeps,
  [rawTenant, rawShard]: string[],
): Promise<Result> {
  const tenant = parseInput(storedNameSchema, rawTenant, 'tenant');
  const unit = await releaseUnit(deps.sql, tenant, shardParam(rawShard));
  return json(200, { unit: unitView(unit) });
}
