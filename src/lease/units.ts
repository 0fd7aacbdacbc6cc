// Unit administration: a tenant's units registered, removed and listed (docs/design.md, "Process
// membership and unit ownership"); the statements are in sql/units.ts.
import { InvalidSettingError, LeaseholdError } from '../errors.js';
import type { Sql } from '../store/index.js';
import * as q from './sql/units.js';
import type { UnitView } from './sql/units.js';

/**
 * Register a tenant's units of `job`: shards `0..shards−1`, each with `weight` (default 1; 0
 * means never claimed) and `config` (the job's per-unit settings, e.g. `{ endpoints }`).
 * Changing the shard count adds or removes units; a removed unit's owner stops working it on
 * its next tick. Units of another job of the tenant are removed.
 * @throws {InvalidSettingError} shards not a whole number from 1 to 10,000, or weight negative.
 */
export function putTenantUnits(
  sql: Sql,
  tenant: string,
  units: { job: string; shards: number; weight?: number; config?: unknown },
): Promise<{ added: number; removed: number }> {
  if (!Number.isInteger(units.shards) || units.shards < 1 || units.shards > 10_000) {
    throw new InvalidSettingError('shards', `must be a whole number from 1 to 10000, got ${units.shards}`);
  }
  const weight = units.weight ?? 1;
  if (!Number.isInteger(weight) || weight < 0)
    throw new InvalidSettingError('weight', `must be a whole number ≥ 0, got ${weight}`);
  return q.putTenantUnits(sql, { tenant, job: units.job, shards: units.shards, weight, config: units.config ?? {} });
}

/** Units with owner and claim time, by tenant and shard; `limit` default 1,000. */
export function listUnits(sql: Sql, filter: { tenant?: string; limit?: number } = {}): Promise<UnitView[]> {
  return q.listUnits(sql, filter.tenant, filter.limit ?? 1000);
}

/** No unit `(tenant, shard)` is registered (code `unit_not_found`, API 404). */
export class UnitNotFoundError extends LeaseholdError {
  constructor(
    readonly tenant: string,
    readonly shard: number,
  ) {
    super('unit_not_found', `tenant ${tenant} has no unit with shard ${shard}`);
  }
}

/**
 * Lift the quarantine of one unit and forget its crashes (`POST /tenants/{t}/units/{shard}/release`,
 * docs/design.md "Crashes and quarantine"): it is claimable at once; an owner keeps it.
 * Returns the unit as `GET /units` shows it.
 * @throws {UnitNotFoundError} no such unit.
 */
export async function releaseUnit(sql: Sql, tenant: string, shard: number): Promise<UnitView> {
  const unit = await q.releaseUnit(sql, tenant, shard);
  if (!unit) throw new UnitNotFoundError(tenant, shard);
  return unit;
}

/**
 * End the quarantines that are over (database clock; the scheduler runs it every minute): those
 * units are claimable again, their crashes still counted, so one more crash in a row
 * quarantines again, for twice as long. Returns how many were lifted.
 */
export function liftQuarantines(sql: Sql): Promise<number> {
  return q.liftQuarantines(sql);
}
