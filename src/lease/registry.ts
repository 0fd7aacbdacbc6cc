import type { Sql } from '../store/index.js';
import { fairShareOf } from './share.js';
import * as q from './sql.js';
import type { InvocationPlan, ProcessView, UnitView } from './sql.js';
import { InvalidSettingError } from '../errors.js';

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
  if (!Number.isInteger(weight) || weight < 0) throw new InvalidSettingError('weight', `must be a whole number ≥ 0, got ${weight}`);
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

/**
 * Processes (live and expired, not yet swept), oldest first, with role, retirement, and the
 * units and weight each owns now.
 */
export function listProcesses(sql: Sql): Promise<ProcessView[]> {
  return q.listProcesses(sql);
}

/** The desired count of live processes (default 3). */
export function getDesired(sql: Sql): Promise<number> {
  return q.getDesired(sql);
}

/**
 * Set the desired count of live processes.
 * @throws {InvalidSettingError} not a whole number from 0 to 1,000.
 */
export function setDesired(sql: Sql, desired: number): Promise<void> {
  if (!Number.isInteger(desired) || desired < 0 || desired > 1000) {
    throw new InvalidSettingError('desired', `must be a whole number from 0 to 1000, got ${desired}`);
  }
  return q.setDesired(sql, desired);
}

/**
 * The scheduler's decision, keeping the live count of fleet processes at the desired count both
 * ways (docs/design.md, "Process membership and unit ownership"):
 * - up: workers to invoke now, as invocation ids to pass in their events —
 *   `desired − live − coming`, at most `cap`, none when no unit has weight > 0 (open batches are
 *   sent to workers by dispatch, so with no unit work and no open batch nothing is invoked). An
 *   invocation counts as coming until its worker's first heartbeat confirms it
 *   ({@link invocationLive}) or for `pendingMs` (the confirmation window), so a dropped
 *   invocation holds back the count for that window only;
 * - down: exactly the surplus of live fleet processes is marked retiring, the latest started
 *   first (ties by id); each learns it on its next heartbeat and leaves. Retiring processes no
 *   longer count as live.
 * Batch workers count neither way. Overlapping callers are serialised, so they never
 * over-invoke or over-retire.
 */
export function planInvocations(sql: Sql, options: { cap: number; pendingMs: number }): Promise<InvocationPlan> {
  return q.planInvocations(sql, options);
}

/** The fleet against its knob, and the weight its processes own. */
export interface Fleet {
  /** The desired count of live fleet processes. */
  desired: number;
  /** Live fleet processes not retiring: what the desired count is compared with. */
  live: number;
  /** Invocations sent and not yet confirmed, within their confirmation window. */
  coming: number;
  /** Live fleet processes asked to retire, not gone yet. */
  retiring: number;
  /** Live batch workers (sent for a batch; not counted, owning no unit). */
  batch: number;
  /** Total claimable weight (units with weight > 0). */
  totalWeight: number;
  /** The fair share of a live fleet process (see {@link fairShareOf}); 0 with none live. */
  fairShare: number;
  /** Weight each live fleet process not retiring owned at its last heartbeat, in no order. */
  reportedWeights: number[];
}

/**
 * Read the fleet from the process rows, the settings, the invocations and the totals row (never
 * a scan of the units; a few heavy units through their index).
 */
export async function readFleet(sql: Sql): Promise<Fleet> {
  const r = await q.fleetRows(sql);
  const fairShare = await fairShareOf(r.totalWeight, r.live, r.heavy, (a) => q.heavyUnits(sql, a));
  return {
    desired: r.desired,
    live: r.live,
    coming: r.coming,
    retiring: r.retiring,
    batch: r.batch,
    totalWeight: r.totalWeight,
    fairShare,
    reportedWeights: r.weights,
  };
}

/** Mark an invocation as confirmed (its worker heartbeated), so it no longer counts as coming. */
export function invocationLive(sql: Sql, invocationId: string): Promise<void> {
  return q.invocationLive(sql, invocationId);
}

/**
 * Forget every invocation counted as coming but not yet live. Only for a deployment whose
 * invoker has just started afresh (local mode: the invocations of a stack that is gone will
 * never become live, and would hold back the desired count for their confirmation window).
 */
export function forgetInvocations(sql: Sql): Promise<number> {
  return q.forgetInvocations(sql);
}
