import type { Sql } from '../store/index.js';
import * as q from './sql.js';
import type { ProcessView, UnitView } from './sql.js';

/**
 * Register a tenant's units of `job`: shards `0..shards−1`, each with `weight` (default 1; 0
 * means never claimed) and `config` (the job's per-unit settings, e.g. `{ endpoints }`).
 * Changing the shard count adds or removes units; a removed unit's owner stops working it on
 * its next tick. Units of another job of the tenant are removed.
 * @throws {RangeError} shards not a whole number from 1 to 10,000, or weight negative.
 */
export function putTenantUnits(
  sql: Sql,
  tenant: string,
  units: { job: string; shards: number; weight?: number; config?: unknown },
): Promise<{ added: number; removed: number }> {
  if (!Number.isInteger(units.shards) || units.shards < 1 || units.shards > 10_000) {
    throw new RangeError(`shards must be a whole number from 1 to 10000, got ${units.shards}`);
  }
  const weight = units.weight ?? 1;
  if (!Number.isInteger(weight) || weight < 0) throw new RangeError(`weight must be a whole number ≥ 0, got ${weight}`);
  return q.putTenantUnits(sql, { tenant, job: units.job, shards: units.shards, weight, config: units.config ?? {} });
}

/** Remove every unit of `tenant`; returns how many were removed. */
export function deleteTenantUnits(sql: Sql, tenant: string): Promise<number> {
  return q.deleteTenantUnits(sql, tenant);
}

/** Units with owner and claim time, by tenant and shard; `limit` default 1,000. */
export function listUnits(sql: Sql, filter: { tenant?: string; limit?: number } = {}): Promise<UnitView[]> {
  return q.listUnits(sql, filter.tenant, filter.limit ?? 1000);
}

/** Processes (live and expired, not yet swept) with the units and weight each owns. */
export function listProcesses(sql: Sql): Promise<ProcessView[]> {
  return q.listProcesses(sql);
}

/** The desired count of live processes (default 3). */
export function getDesired(sql: Sql): Promise<number> {
  return q.getDesired(sql);
}

/**
 * Set the desired count of live processes.
 * @throws {RangeError} not a whole number from 0 to 1,000.
 */
export function setDesired(sql: Sql, desired: number): Promise<void> {
  if (!Number.isInteger(desired) || desired < 0 || desired > 1000) {
    throw new RangeError(`desired must be a whole number from 0 to 1000, got ${desired}`);
  }
  return q.setDesired(sql, desired);
}

/**
 * The scheduler's decision: how many workers to invoke now, as invocation ids to pass in their
 * events — `desired − live − invoked but not yet live` (an invocation counts as pending for
 * `pendingMs`), at most `cap`, and none when no unit has weight > 0 (open batches are sent to
 * workers by dispatch, so with no unit work and no open batch nothing is invoked).
 * Overlapping callers are serialised, so they never over-invoke.
 */
export function planInvocations(
  sql: Sql,
  options: { cap: number; pendingMs: number },
): Promise<{ desired: number; live: number; pending: number; work: boolean; invocations: string[] }> {
  return q.planInvocations(sql, options);
}

/** Mark an invocation as live (its worker heartbeated), so it no longer counts as pending. */
export function invocationLive(sql: Sql, invocationId: string): Promise<void> {
  return q.invocationLive(sql, invocationId);
}

/**
 * Forget every invocation counted as coming but not yet live. Only for a deployment whose
 * invoker has just started afresh (local mode: the invocations of a stack that is gone will
 * never become live, and would hold back the desired count for `pendingMs`).
 */
export function forgetInvocations(sql: Sql): Promise<number> {
  return q.forgetInvocations(sql);
}
