// Every statement of the lease module. Times come from the database clock only (now()).
// Unit statements that give a unit to a process check, in the same statement, that the
// process's own row is live.
import type { Sql } from '../store/index.js';

/** A unit's identity. */
export interface UnitKey {
  tenant: string;
  shard: number;
}

/** A unit as the leaser tracks it. */
export interface UnitRow extends UnitKey {
  job: string;
  weight: number;
  config: unknown;
}

// Upserts the process row with expires_at = now() + ttl. Returns whether the row was missing
// (swept) or had already expired before this heartbeat (by the database clock). Expiry is judged
// on the locked row at the moment the lock is held (clock_timestamp(), not the statement's
// start): a claim that took this process's units holds its row (FOR SHARE) until it commits, so
// a heartbeat that started before the TTL ended but got its row after such a claim reports the
// lapse, and a claim never takes units while a heartbeat holds the row.
export async function heartbeat(
  sql: Sql,
  p: { id: string; hostname: string; version: string; ttlMs: number },
): Promise<{ lapsed: boolean }> {
  const rows = await sql<{ inserted: boolean }[]>`insert into leasehold_processes (id, hostname, version, expires_at)
    values (${p.id}, ${p.hostname}, ${p.version}, now() + make_interval(secs => ${p.ttlMs / 1000}))
    on conflict (id) do update set heartbeat_at = now(), expires_at = excluded.expires_at
      where leasehold_processes.expires_at > clock_timestamp()
    returning (xmax = 0) as inserted`;
  if (rows.length === 1) return { lapsed: rows[0].inserted };
  // The row had expired: renew it all the same (same upsert, unconditional).
  await sql`insert into leasehold_processes (id, hostname, version, expires_at)
    values (${p.id}, ${p.hostname}, ${p.version}, now() + make_interval(secs => ${p.ttlMs / 1000}))
    on conflict (id) do update set heartbeat_at = now(), expires_at = excluded.expires_at`;
  return { lapsed: true };
}

// Live processes, total claimable weight, and this process's owned units and weight.
export async function shareState(
  sql: Sql,
  id: string,
): Promise<{ live: number; totalWeight: number; selfLive: boolean; unowned: boolean; abandoned: boolean; owned: UnitRow[] }> {
  // `claimable`: one probe of the unowned index and one per expired process, so a process with
  // nothing to claim sends no claim statement.
  const [r] = await sql<{ live: number; total_weight: number; self_live: boolean; unowned: boolean; abandoned: boolean }[]>`select
      (select count(*) from leasehold_processes where expires_at > now()) as live,
      (select weight from leasehold_unit_totals) as total_weight,
      exists (select 1 from leasehold_processes where id = ${id} and expires_at > now()) as self_live,
      (select pos from leasehold_units where owner is null and weight > 0 order by pos limit 1) is not null as unowned,
      exists (select 1 from leasehold_processes p
              where p.expires_at <= now() and p.id <> ${id}
                and exists (select 1 from leasehold_units u where u.owner = p.id and u.weight > 0)) as abandoned`;
  const owned = await ownedUnits(sql, id);
  return { live: r.live, totalWeight: r.total_weight, selfLive: r.self_live, unowned: r.unowned, abandoned: r.abandoned, owned };
}

// This process's units, through the owner index.
export async function ownedUnits(sql: Sql, id: string): Promise<UnitRow[]> {
  return sql<UnitRow[]>`select tenant, shard, job, weight, config from leasehold_units
    where owner = ${id} order by pos`;
}

// Claims up to `limit` units whose cumulative weight stays within `budget`; the first candidate
// may cross the budget while the total stays within `overCap` (whatever its weight when
// `allowOver`), so a unit heavier than every process's room under its share is still owned,
// and a process overshoots its share by one unit at most: units of expired processes first, then unowned units with
// weight > 0 whose position lies in [from, to). Candidates come through the owner index and the
// partial unowned index, locked with SKIP LOCKED (never more than `limit` of each kind, so
// concurrent claimers do not hide units from each other); nothing is claimed unless the
// claimer's own row is live. The expired owner's row is share-locked too (skipped when locked):
// a heartbeat in progress keeps its units, and one that waits for this claim sees the lapse.
export async function claim(
  sql: Sql,
  a: { id: string; budget: number; limit: number; from: number; to: number; allowOver: boolean; overCap: number; abandoned?: boolean },
): Promise<UnitRow[]> {
  return sql<UnitRow[]>`with me as (
      select 1 from leasehold_processes where id = ${a.id} and expires_at > now()
    ), abandoned as (
      -- One owner-index probe per expired process (never a join over all units), skipping rows
      -- another claimer holds while scanning, so concurrent claimers take different units.
      -- Skipped as a whole (a one-time filter) when the share read found no abandoned unit.
      select c.tenant, c.shard, c.weight, c.pos, 0 as part
      from leasehold_processes p
      cross join lateral (
        select tenant, shard, weight, pos from leasehold_units
        where owner = p.id and weight > 0
        order by pos
        limit ${a.limit}
        for update skip locked
      ) c
      where ${a.abandoned ?? true} and p.expires_at <= now() and p.id <> ${a.id} and exists (select 1 from me)
      limit ${a.limit}
      for share of p skip locked
    ), unowned as (
      select tenant, shard, weight, pos, 1 as part from leasehold_units
      where owner is null and weight > 0 and pos >= ${a.from} and pos < ${a.to} and exists (select 1 from me)
      order by pos limit ${a.limit} for update skip locked
    ), picked as (
      select tenant, shard from (
        select tenant, shard, weight,
               sum(weight) over (order by part, pos rows unbounded preceding) as upto,
               row_number() over (order by part, pos) as n
        from (select * from abandoned union all select * from unowned) c
      ) c
      where n <= ${a.limit}
        and (upto <= ${a.budget}
             -- the unit that crosses the budget: taken while within overCap (or by an empty process)
             or (n = 1 and (upto <= ${a.overCap} or ${a.allowOver})))
    )
    update leasehold_units u set owner = ${a.id}, claimed_at = now()
    from picked where u.tenant = picked.tenant and u.shard = picked.shard
    returning u.tenant, u.shard, u.job, u.weight, u.config`;
}

// Gives back the listed units of this process (shedding).
export async function releaseUnits(sql: Sql, id: string, units: UnitKey[]): Promise<number> {
  if (units.length === 0) return 0;
  const rows = await sql`update leasehold_units u set owner = null, claimed_at = null
    from jsonb_to_recordset(${sql.json(units as never)}) as k(tenant text, shard int)
    where u.owner = ${id} and u.tenant = k.tenant and u.shard = k.shard`;
  return rows.count;
}

// Gives back every unit of this process, in one statement. Rows are locked in key order, as the
// sweep locks them: a release racing a sweep of the same process cannot deadlock.
export async function releaseAll(sql: Sql, id: string): Promise<number> {
  const rows = await sql`with mine as (
      select tenant, shard from leasehold_units where owner = ${id} order by tenant, shard for update
    )
    update leasehold_units u set owner = null, claimed_at = null
    from mine where u.tenant = mine.tenant and u.shard = mine.shard`;
  return rows.count;
}

// Deletes this process's row (last step of a graceful stop).
export async function deleteProcess(sql: Sql, id: string): Promise<boolean> {
  const rows = await sql`delete from leasehold_processes where id = ${id}`;
  return rows.count === 1;
}

// Deletes processes expired longer than cutoffMs and frees their units, in one statement. Units
// are locked in key order, as a release locks them: no deadlock with a swept process releasing.
export async function sweep(sql: Sql, cutoffMs: number): Promise<{ processes: number; units: number }> {
  const [r] = await sql<{ processes: number; units: number }[]>`with dead as (
      delete from leasehold_processes
      where expires_at < now() - make_interval(secs => ${cutoffMs / 1000})
      returning id
    ), doomed as (
      select tenant, shard from leasehold_units
      where owner = any (array(select id from dead)) order by tenant, shard for update
    ), freed as (
      update leasehold_units u set owner = null, claimed_at = null
      from doomed where u.tenant = doomed.tenant and u.shard = doomed.shard
        and u.owner = any (array(select id from dead))
      returning 1
    )
    select (select count(*) from dead) as processes, (select count(*) from freed) as units`;
  return r;
}

/** A unit as `GET /units` shows it. */
export interface UnitView extends UnitRow {
  owner: string | null;
  claimedAt: Date | null;
}

/** A process as `GET /processes` shows it. */
export interface ProcessView {
  id: string;
  hostname: string;
  version: string;
  startedAt: Date;
  expiresAt: Date;
  live: boolean;
  units: number;
  weight: number;
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
    const removed = await t`delete from leasehold_units where tenant = ${a.tenant} and (shard >= ${a.shards} or job <> ${a.job})`;
    const [r] = await t<{ added: number }[]>`with up as (
        insert into leasehold_units (tenant, shard, job, weight, config)
        select ${a.tenant}, s, ${a.job}, ${a.weight}, ${t.json(a.config as never)} from generate_series(0, ${a.shards - 1}) s
        on conflict (tenant, shard) do update set weight = excluded.weight, config = excluded.config
          where leasehold_units.weight is distinct from excluded.weight or leasehold_units.config is distinct from excluded.config
        returning (xmax = 0) as inserted
      ) select count(*) filter (where inserted) as added from up`;
    return { added: r.added, removed: removed.count };
  });
}

// Deletes every unit of a tenant.
export async function deleteTenantUnits(sql: Sql, tenant: string): Promise<number> {
  const rows = await sql`delete from leasehold_units where tenant = ${tenant}`;
  return rows.count;
}

// Lists units (of one tenant, or all), with owner and claim time.
export async function listUnits(sql: Sql, tenant: string | undefined, limit: number): Promise<UnitView[]> {
  return sql<UnitView[]>`select tenant, shard, job, weight, config, owner, claimed_at as "claimedAt"
    from leasehold_units where (${tenant ?? null}::text is null or tenant = ${tenant ?? null})
    order by tenant, shard limit ${limit}`;
}

// Lists processes with the units and weight each owns.
export async function listProcesses(sql: Sql): Promise<ProcessView[]> {
  return sql<ProcessView[]>`select p.id, p.hostname, p.version, p.started_at as "startedAt", p.expires_at as "expiresAt",
      p.expires_at > now() as live,
      (select count(*) from leasehold_units u where u.owner = p.id) as units,
      (select coalesce(sum(weight), 0) from leasehold_units u where u.owner = p.id)::int as weight
    from leasehold_processes p order by p.started_at, p.id`;
}

// Reads the desired count of live processes.
export async function getDesired(sql: Sql): Promise<number> {
  const [r] = await sql<{ value: number }[]>`select value from leasehold_settings where key = 'desired'`;
  return Number(r?.value ?? 0);
}

// Sets the desired count of live processes.
export async function setDesired(sql: Sql, desired: number): Promise<void> {
  await sql`insert into leasehold_settings (key, value) values ('desired', ${sql.json(desired)})
    on conflict (key) do update set value = excluded.value`;
}

// Decides, one scheduler at a time (advisory transaction lock), how many workers to invoke:
// desired − live − invoked but not yet live (within pendingMs), capped at `cap`, and only when
// some unit has weight > 0 (batches bring their own workers by dispatch). Records the
// invocations it decides on.
export async function planInvocations(
  sql: Sql,
  a: { cap: number; pendingMs: number },
): Promise<{ desired: number; live: number; pending: number; work: boolean; invocations: string[] }> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await t`select pg_advisory_xact_lock(hashtextextended('leasehold:scheduler:' || current_schema(), 0))`;
    await t`delete from leasehold_invocations where invoked_at < now() - make_interval(secs => ${a.pendingMs / 1000})`;
    const [s] = await t<{ desired: number; live: number; pending: number; work: boolean }[]>`select
        coalesce((select value::int from leasehold_settings where key = 'desired'), 0) as desired,
        (select count(*) from leasehold_processes where expires_at > now()) as live,
        (select count(*) from leasehold_invocations) as pending,
        (select weight from leasehold_unit_totals) > 0 as work`;
    const need = s.work ? Math.max(0, Math.min(a.cap, s.desired - s.live - s.pending)) : 0;
    const rows = need > 0
      ? await t<{ id: string }[]>`insert into leasehold_invocations (id)
          select gen_random_uuid() from generate_series(1, ${need}) returning id`
      : [];
    return { ...s, invocations: rows.map((r) => r.id) };
  });
}

// An invoked worker became live: its invocation no longer counts as pending.
export async function invocationLive(sql: Sql, invocationId: string): Promise<void> {
  await sql`delete from leasehold_invocations where id = ${invocationId}`;
}

// Forgets every invocation counted as coming (local mode: its invoker is gone with the last run).
export async function forgetInvocations(sql: Sql): Promise<number> {
  const rows = await sql`delete from leasehold_invocations`;
  return rows.count;
}
