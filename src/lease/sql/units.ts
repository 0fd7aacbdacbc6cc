// Statements of unit registrations (leasehold_units as tenants register them) and the listings
// of units and processes.
import type { Sql } from '../../store/index.js';
import type { ProcessRole, UnitRow } from './ownership.js';

export interface UnitView extends UnitRow {
  owner: string | null;
  claimedAt: Date | null;
  /** When the owner's current run of the unit job started; null while none runs. */
  runningSince: Date | null;
  /** Crashes in a row: runs during which the owner died or its lease lapsed. */
  crashes: number;
  /** Quarantines so far (each lasts twice the one before, up to the cap). */
  quarantines: number;
  /** Not claimed until then (database clock); null when not quarantined. */
  quarantinedUntil: Date | null;
}

/** A process as `GET /processes` shows it. */
export interface ProcessView {
  id: string;
  /** `fleet`: counted against the desired count, owns units; `batch`: sent for a batch. */
  role: ProcessRole;
  /** Asked by the scheduler to leave (the fleet is above the desired count). */
  retiring: boolean;
  hostname: string;
  version: string;
  startedAt: Date;
  expiresAt: Date;
  live: boolean;
  /** Units owned now. */
  units: number;
  /** Weight of the units owned now. */
  weight: number;
  /** The process this one replaced at its deadline (docs/design.md, "Process chains"); null: the first of its chain. */
  replaces: string | null;
  /** Its chain: the id of the chain's first process. */
  chainId: string;
  /** When the chain's first process started. */
  chainStartedAt: Date;
  /** Processes before this one in its chain: how many times the chain's process was replaced. */
  replacements: number;
}

// One tenant's unit changes run one after another: two puts (or a put and a delete) of one
// tenant lock its rows in different orders and would deadlock. The last to commit wins.
function lockTenantUnits(t: Sql, tenant: string) {
  return t`select pg_advisory_xact_lock(hashtextextended(${'leasehold_units:' + tenant}, 0))`;
}

// Sets a tenant's units of `job` to shards 0..shards-1 with the given weight and config:
// inserts missing shards, updates existing ones, deletes shards at or above `shards`. Owners of
// deleted units find them gone on their next tick.
export async function putTenantUnits(
  sql: Sql,
  a: { tenant: string; job: string; shards: number; weight: number; config: unknown },
): Promise<{ added: number; removed: number }> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await lockTenantUnits(t, a.tenant);
    const removed = await t`delete from leasehold_units where tenant = ${a.tenant} and (shard >= ${a.shards} or job <> ${a.job})`;
    const [r] = await t<{ added: number }[]>`with up as (
        insert into leasehold_units (tenant, shard, job, weight, config)
        select ${a.tenant}, s, ${a.job}, ${a.weight}, ${t.json(a.config as never)} from generate_series(0, ${a.shards - 1}) s
        on conflict (tenant, shard) do update set weight = excluded.weight, config = excluded.config,
            crashes = 0, quarantines = 0, quarantined_until = null
          -- A registration lifts a quarantine and forgets the crashes (docs/design.md, "Crashes
          -- and quarantine"): it is how a tenant says its data or config changed.
          where leasehold_units.weight is distinct from excluded.weight or leasehold_units.config is distinct from excluded.config
            or leasehold_units.crashes > 0 or leasehold_units.quarantines > 0
        returning (xmax = 0) as inserted
      ) select count(*) filter (where inserted) as added from up`;
    return { added: r.added, removed: removed.count };
  });
}

/**
 * Deletes every unit of a tenant.
 */
export async function deleteTenantUnits(sql: Sql, tenant: string): Promise<number> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await lockTenantUnits(t, tenant);
    const rows = await t`delete from leasehold_units where tenant = ${tenant}`;
    return rows.count;
  });
}

// Lists units (of one tenant, or all), with owner and claim time.
export async function listUnits(sql: Sql, tenant: string | undefined, limit: number): Promise<UnitView[]> {
  return sql<UnitView[]>`${listUnitsStatement(sql, tenant, limit)}`;
}

/** The read of {@link listUnits} as a fragment (the plan test reads its plan with EXPLAIN). */
export function listUnitsStatement(sql: Sql, tenant: string | undefined, limit: number) {
  return sql`select tenant, shard, job, weight, config, owner, claimed_at as "claimedAt",
      running_since as "runningSince", crashes, quarantines, quarantined_until as "quarantinedUntil"
    from leasehold_units where (${tenant ?? null}::text is null or tenant = ${tenant ?? null})
    order by tenant, shard limit ${limit}`;
}

// Lifts the quarantine of one unit and forgets its crashes (the operator's release); the unit
// is claimable at once. Its owner, if any, keeps it. Returns the unit, or undefined when there
// is no such unit.
export async function releaseUnit(sql: Sql, tenant: string, shard: number): Promise<UnitView | undefined> {
  const [row] = await sql<UnitView[]>`update leasehold_units set crashes = 0, quarantines = 0, quarantined_until = null
    where tenant = ${tenant} and shard = ${shard}
    returning tenant, shard, job, weight, config, owner, claimed_at as "claimedAt",
      running_since as "runningSince", crashes, quarantines, quarantined_until as "quarantinedUntil"`;
  return row;
}

// Ends the quarantines that are over (database clock), through the partial index of quarantined
// units: those units are claimable again; their crashes and quarantines stay counted, so the
// next crash in a row quarantines again, for twice as long. Returns how many were lifted.
export async function liftQuarantines(sql: Sql): Promise<number> {
  const rows = await sql`${liftQuarantinesStatement(sql)}`;
  return rows.count;
}

/** The statement of {@link liftQuarantines} as a fragment (the plan test reads its plan with EXPLAIN). */
export function liftQuarantinesStatement(sql: Sql) {
  return sql`update leasehold_units set quarantined_until = null
    where quarantined_until is not null and quarantined_until <= now()`;
}

/**
 * Processes (live and expired, not yet swept), oldest first, with role, retirement, and the
 * units and weight each owns now.
 */
export async function listProcesses(sql: Sql): Promise<ProcessView[]> {
  return sql<ProcessView[]>`${listProcessesStatement(sql)}`;
}

/** The read of {@link listProcesses} as a fragment (the plan test reads its plan with EXPLAIN). */
export function listProcessesStatement(sql: Sql) {
  return sql`select p.id, p.role, p.retiring, p.hostname, p.version, p.started_at as "startedAt", p.expires_at as "expiresAt",
      p.expires_at > now() as live,
      (select count(*) from leasehold_units u where u.owner = p.id) as units,
      (select coalesce(sum(weight), 0) from leasehold_units u where u.owner = p.id)::bigint as weight,
      p.replaces, coalesce(p.chain_id, p.id) as "chainId",
      coalesce(p.chain_started_at, p.started_at) as "chainStartedAt", p.replacements
    from leasehold_processes p order by p.started_at, p.id`;
}
