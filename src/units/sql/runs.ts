// The statements of a unit's run and the fence every write of a unit's owner takes
// (leasehold_units, read with leasehold_processes). Times come from the database clock only
// (now()). Every write a unit's owner makes is fenced in the same statement on that process
// still owning the unit (`leasehold_units.owner`) with a live row (`expires_at > now()`), so a
// process that lost the unit — or whose TTL passed, so that others may claim it — changes
// nothing; the outbox's statements (sql/outbox.ts) take the same fence.
import type { UnitKey } from '../../lease/index.js';
import type { Sql } from '../../store/index.js';
import type { Fence } from '../job.js';

/** The unit row a run starts from. */
export interface OwnedUnitRow {
  job: string;
  weight: number;
  config: unknown;
}

// Marks a run of the unit's job as started (running_since = now()) and returns the unit's job
// and config, only if `processId` owns the unit and is live now (two primary key lookups): if
// this process dies before the run ends, whoever frees the unit counts a crash (docs/design.md,
// "Crashes and quarantine").
export async function startRun(sql: Sql, unit: UnitKey, processId: string): Promise<OwnedUnitRow | undefined> {
  const [row] = await sql<OwnedUnitRow[]>`update leasehold_units u set running_since = now()
    from leasehold_processes p
    where u.tenant = ${unit.tenant} and u.shard = ${unit.shard} and u.owner = ${processId}
      and p.id = u.owner and p.expires_at > now()
    returning u.job, u.weight, u.config`;
  return row;
}

// Clears the mark of a run that ended (returned or threw: not a crash) and with it the unit's
// crashes in a row, only while `processId` still owns the unit (after a loss: nothing).
export async function endRun(sql: Sql, unit: UnitKey, processId: string): Promise<void> {
  await sql`update leasehold_units set running_since = null, crashes = 0
    where tenant = ${unit.tenant} and shard = ${unit.shard} and owner = ${processId}`;
}

// A condition (no statement of its own): true only while `processId` owns the unit and its
// row is live (database clock).
export function fence(sql: Sql, unit: UnitKey, processId: string): Fence {
  return sql`exists (select 1 from leasehold_units u join leasehold_processes p on p.id = u.owner
    where u.tenant = ${unit.tenant} and u.shard = ${unit.shard} and u.owner = ${processId} and p.expires_at > now())`;
}

// Whether `processId` owns the unit and is live now.
export async function owns(sql: Sql, unit: UnitKey, processId: string): Promise<boolean> {
  const [r] = await sql<{ owned: boolean }[]>`select ${fence(sql, unit, processId)} as owned`;
  return r.owned;
}
