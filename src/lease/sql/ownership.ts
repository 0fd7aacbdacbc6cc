// Statements of process membership and unit ownership (leasehold_processes and the owner of
// leasehold_units): heartbeat, claim, shed, release (the sweep is ./sweep.ts). Times come from
// the database clock only (now()).
// Unit statements that give a unit to a process check, in the same statement, that the
// process's own row is live.
import type { Sql } from '../../store/index.js';

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

/**
 * How crashes of a unit are counted (docs/design.md, "Crashes and quarantine"): a unit freed
 * from an expired owner while its job ran counts a crash; at `maxCrashes` in a row it is
 * quarantined for `quarantineMs × 2^(quarantines so far)`, at most `maxQuarantineMs` (ms).
 */
export interface CrashRule {
  maxCrashes: number;
  quarantineMs: number;
  maxQuarantineMs: number;
}

/** The defaults of {@link CrashRule}: 3 crashes, 5 minutes doubling, at most a day. */
export const CRASH_DEFAULTS: CrashRule = { maxCrashes: 3, quarantineMs: 300_000, maxQuarantineMs: 86_400_000 };

// True for a unit (alias u) whose owner is being replaced while its job ran and which reaches
// the crash limit with this crash: it is quarantined instead of claimed.
function poisoned(sql: Sql, r: CrashRule) {
  return sql`(u.running_since is not null and u.crashes + 1 >= ${r.maxCrashes})`;
}

// The assignments that free a unit (alias u) from an owner that is gone: a run in flight counts
// a crash, and the crash that reaches the limit quarantines it (the backoff doubling per
// quarantine, by the database clock). A unit with no run in flight is unchanged but for the mark.
export function crashAssignments(sql: Sql, r: CrashRule) {
  return sql`crashes = u.crashes + (u.running_since is not null)::int,
      quarantines = u.quarantines + ${poisoned(sql, r)}::int,
      quarantined_until = case when ${poisoned(sql, r)}
        then now() + least(make_interval(secs => ${r.quarantineMs / 1000}) * power(2, least(u.quarantines, 40)),
                           make_interval(secs => ${r.maxQuarantineMs / 1000}))
        else u.quarantined_until end,
      running_since = null`;
}

/**
 * The chain a process continues (docs/design.md, "Process chains"): a worker that reaches its
 * deadline invokes its replacement (or a continuation) with the chain its row is in, and the new
 * process's row joins it. Times are ISO 8601 from the database clock.
 */
export interface ProcessChain {
  /** The process this one replaces: the one that invoked it at its deadline. */
  replaces: string;
  /** The chain's id: its first process's id. */
  id: string;
  /** When the chain's first process started. */
  startedAt: string;
  /** Processes before this one in the chain (1 for the first replacement). */
  replacements: number;
}

/** Who acts: a process id and the token only the instance that created its row holds. */
export interface Me {
  id: string;
  token: string;
}

/** A process's part in the fleet: `fleet` owns units and counts against the desired count. */
export type ProcessRole = 'fleet' | 'batch';

/**
 * What a heartbeat found: `live` (renewed in time), `lapsed` (the row was missing, had expired,
 * or was an expired row of another instance, now taken over with its units freed), `in-use` (a
 * live row of another instance: nothing was written).
 */
export type HeartbeatOutcome = 'live' | 'lapsed' | 'in-use';

// Upserts this instance's process row with expires_at = now() + ttl and the units and weight it
// owns, only while the row is its own (token) and live. Expiry is judged on the locked row at
// the moment the lock is held (clock_timestamp(), not the statement's start): a claim that took
// this process's units holds its row (FOR SHARE) until it commits, so a heartbeat that started
// before the TTL ended but got its row after such a claim reports the lapse, and a claim never
// takes units while a heartbeat holds the row. Anything else goes to heartbeatSlow.
export async function heartbeat(sql: Sql, p: HeartbeatArgs): Promise<{ outcome: HeartbeatOutcome; retiring: boolean }> {
  const rows = await sql<{ inserted: boolean; retiring: boolean }[]>`${heartbeatStatement(sql, p)}`;
  if (rows.length === 1) return { outcome: rows[0].inserted ? 'lapsed' : 'live', retiring: rows[0].retiring };
  return heartbeatSlow(sql, p);
}

/** What a heartbeat writes: the process, its instance's token, its TTL (ms) and what it owns now. */
export type HeartbeatArgs = Me & {
  role: ProcessRole;
  hostname: string;
  version: string;
  ttlMs: number;
  units: number;
  weight: number;
  /** How the units of another instance's expired row, freed here, count crashes. Default {@link CRASH_DEFAULTS}. */
  crash?: CrashRule;
  /** The chain the process continues, written with its row; none: the first of a new chain. */
  chain?: ProcessChain;
};

// The chain columns of a new process row: the chain it continues, or a chain of its own that
// starts now (chain_started_at = now(), which is also the row's started_at).
function chainValues(sql: Sql, p: HeartbeatArgs) {
  const c = p.chain;
  return sql`${c?.replaces ?? null}::uuid, ${c?.id ?? p.id}::uuid,
    coalesce(${c?.startedAt ?? null}::timestamptz, now()), ${c?.replacements ?? 0}`;
}

/** The heartbeat's upsert as a fragment (the plan test reads its plan with EXPLAIN). */
export function heartbeatStatement(sql: Sql, p: HeartbeatArgs) {
  return sql`insert into leasehold_processes
      (id, token, role, hostname, version, expires_at, units, weight, replaces, chain_id, chain_started_at, replacements)
    values (${p.id}, ${p.token}, ${p.role}, ${p.hostname}, ${p.version},
      now() + make_interval(secs => ${p.ttlMs / 1000}), ${p.units}, ${p.weight}, ${chainValues(sql, p)})
    on conflict (id) do update set heartbeat_at = now(), expires_at = excluded.expires_at,
        units = excluded.units, weight = excluded.weight
      where leasehold_processes.token = excluded.token and leasehold_processes.expires_at > clock_timestamp()
    returning (xmax = 0) as inserted, retiring`;
}

// The row is expired, or another instance's, or was swept meanwhile; decided on the locked row.
// Its own expired row: renewed. Another instance's live row: untouched ('in-use'). Another
// instance's expired row: that instance's units are freed (locked in key order, as a release
// and the sweep lock them: no deadlock) and the row becomes this instance's, as new.
async function heartbeatSlow(sql: Sql, p: HeartbeatArgs): Promise<{ outcome: HeartbeatOutcome; retiring: boolean }> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const [row] = await t<{ mine: boolean; expired: boolean }[]>`select token = ${p.token} as mine,
        expires_at <= clock_timestamp() as expired
      from leasehold_processes where id = ${p.id} for update`;
    if (!row) {
      const inserted = await t`insert into leasehold_processes
          (id, token, role, hostname, version, expires_at, units, weight, replaces, chain_id, chain_started_at, replacements)
        values (${p.id}, ${p.token}, ${p.role}, ${p.hostname}, ${p.version},
          now() + make_interval(secs => ${p.ttlMs / 1000}), ${p.units}, ${p.weight}, ${chainValues(t, p)})
        on conflict (id) do nothing`;
      return { outcome: inserted.count === 1 ? 'lapsed' : 'in-use', retiring: false };
    }
    if (!row.mine && !row.expired) return { outcome: 'in-use', retiring: false };
    if (!row.mine) {
      await t`with theirs as (
          select tenant, shard from leasehold_units where owner = ${p.id} order by tenant, shard for update
        )
        update leasehold_units u set owner = null, claimed_at = null, ${crashAssignments(t, p.crash ?? CRASH_DEFAULTS)}
        from theirs where u.tenant = theirs.tenant and u.shard = theirs.shard`;
    }
    // Another instance's row taken over as new gets this instance's chain; its own keeps its own.
    const [r] = await t<{ retiring: boolean }[]>`update leasehold_processes set
        token = ${p.token}, role = ${p.role}, hostname = ${p.hostname}, version = ${p.version},
        started_at = case when token = ${p.token} then started_at else now() end,
        replaces = case when token = ${p.token} then replaces else ${p.chain?.replaces ?? null}::uuid end,
        chain_id = case when token = ${p.token} then chain_id else ${p.chain?.id ?? p.id}::uuid end,
        chain_started_at = case when token = ${p.token} then chain_started_at
          else coalesce(${p.chain?.startedAt ?? null}::timestamptz, now()) end,
        replacements = case when token = ${p.token} then replacements else ${p.chain?.replacements ?? 0} end,
        retiring = token = ${p.token} and retiring,
        heartbeat_at = now(), expires_at = now() + make_interval(secs => ${p.ttlMs / 1000}),
        units = ${p.units}, weight = ${p.weight}
      where id = ${p.id}
      returning retiring`;
    return { outcome: 'lapsed', retiring: r.retiring };
  });
}

/** What a tick reads before it claims or sheds. */
export interface ShareState {
  /** Live fleet processes not retiring (this one included when it is one). */
  live: number;
  /** Least weight another live fleet process owned at its last heartbeat; null when none. */
  othersMinWeight: number | null;
  totalWeight: number;
  /** This instance's row exists and is live. */
  selfLive: boolean;
  /** The scheduler asked this process to retire. */
  selfRetiring: boolean;
  /** Some unit with weight > 0 is unowned. */
  unowned: boolean;
  /** Some expired process owns a unit with weight > 0. */
  abandoned: boolean;
  /** Weights of units heavier than `floor(totalWeight / live)` (and than 1), heaviest first, at most `live`. */
  heavy: number[];
  owned: UnitRow[];
}

// Live fleet processes and the least weight the others own (their rows, never the units), total
// claimable weight, this instance's liveness and retirement, whether anything is claimable, and
// the units heavier than the plain fair share, then this instance's owned units.
export async function shareState(sql: Sql, me: Me): Promise<ShareState> {
  // `unowned` / `abandoned`: one probe of the unowned index and one per expired process, so a
  // process with nothing to claim sends no claim statement. `heavy`: a backward scan of the
  // partial weight index, bounded by the live count (empty when every unit weighs 1).
  const [r] = await sql<
    {
      live: number;
      others_min_weight: number | null;
      total_weight: number;
      self_live: boolean;
      self_retiring: boolean;
      unowned: boolean;
      abandoned: boolean;
      heavy: number[];
    }[]
  >`${shareStateStatement(sql, me)}`;
  const owned = await ownedUnits(sql, me);
  return {
    live: r.live,
    othersMinWeight: r.others_min_weight,
    totalWeight: r.total_weight,
    selfLive: r.self_live,
    selfRetiring: r.self_retiring,
    unowned: r.unowned,
    abandoned: r.abandoned,
    heavy: r.heavy.map(Number),
    owned,
  };
}

/** The share read of {@link shareState} as a fragment (the plan test reads its plan with EXPLAIN). */
export function shareStateStatement(sql: Sql, me: Me) {
  return sql`with fleet as (
      select count(*) as live, min(weight) filter (where id <> ${me.id}) as others_min_weight
      from leasehold_processes where expires_at > now() and role = 'fleet' and not retiring
    ), totals as (
      -- One row (the table holds one), estimated so whatever its statistics say: a planner that
      -- estimated it at 1,810 rows multiplied the cost of the heavy read by that, past
      -- jit_above_cost (even "where id", through the primary key, is estimated at half the table).
      select weight from leasehold_unit_totals limit 1
    ), self as (
      select expires_at > now() as live, retiring from leasehold_processes where id = ${me.id} and token = ${me.token}
    )
    select f.live, f.others_min_weight, t.weight as total_weight,
      coalesce((select live from self), false) as self_live,
      coalesce((select retiring from self), false) as self_retiring,
      (select pos from leasehold_units where owner is null and weight > 0 and quarantined_until is null
       order by pos limit 1) is not null as unowned,
      -- One owner-index probe per expired process, its first unit in pos order (a semi-join let a
      -- planner that thought the units few read every unit of every owner).
      exists (select 1 from leasehold_processes p
              cross join lateral (select 1 from leasehold_units u where u.owner = p.id and u.weight > 0
                                  order by u.pos limit 1) x
              where p.expires_at <= now() and p.id <> ${me.id}) as abandoned,
      to_json(array(select weight from leasehold_units
            where weight > 1 and weight > t.weight / greatest(f.live, 1)
            order by weight desc limit greatest(f.live, 1))) as heavy
    from fleet f cross join totals t`;
}

// Weights of units heavier than `above` and at most `atMost` (and heavier than 1), heaviest first,
// at most `limit`: through the partial weight index.
export async function heavyUnits(sql: Sql, a: { above: number; atMost: number; limit: number }): Promise<number[]> {
  const rows = await sql<{ weight: number }[]>`select weight from leasehold_units
    where weight > 1 and weight > ${a.above} and weight <= ${a.atMost}
    order by weight desc limit ${a.limit}`;
  return rows.map((r) => Number(r.weight));
}

// This instance's units, through the owner index; none when its row is another instance's or gone.
export async function ownedUnits(sql: Sql, me: Me): Promise<UnitRow[]> {
  return sql<UnitRow[]>`${ownedUnitsStatement(sql, me)}`;
}

/** The read of {@link ownedUnits} as a fragment (the plan test reads its plan with EXPLAIN). */
export function ownedUnitsStatement(sql: Sql, me: Me) {
  return sql`select tenant, shard, job, weight, config from leasehold_units
    where owner = ${me.id} and exists (select 1 from leasehold_processes where id = ${me.id} and token = ${me.token})
    order by pos`;
}

// Claims up to `limit` units whose cumulative weight stays within `budget`, except the first
// candidate, which is taken whatever its weight (a process below its share may take one unit
// heavier than its remaining budget, so a heavy unit is never stranded): units of expired
// processes first, then unowned units with weight > 0 whose position lies in [from, to).
// Candidates come through the owner index and the partial unowned index, locked with SKIP
// LOCKED (never more than `limit` of each kind, so concurrent claimers do not hide units from
// each other). Nothing is claimed unless the claimer's own row is its instance's and live; that
// row is share-locked, so a takeover of the row by another instance waits for this claim (and
// frees what it took) or makes it claim nothing. The expired owner's row is share-locked too
// (skipped when locked): a heartbeat in progress keeps its units, and one that waits for this
// claim sees the lapse.
export async function claim(sql: Sql, me: Me, a: ClaimArgs): Promise<UnitRow[]> {
  return sql<UnitRow[]>`${claimStatement(sql, me, a)}`;
}

/** What {@link claim} takes: weight budget, most units, the position range, whether to look at expired owners (default true). */
export interface ClaimArgs {
  budget: number;
  limit: number;
  from: number;
  to: number;
  abandoned?: boolean;
  /** How units of expired owners count crashes. Default {@link CRASH_DEFAULTS}. */
  crash?: CrashRule;
}

/** The claim statement as a fragment (the plan test reads its plan with EXPLAIN). */
export function claimStatement(sql: Sql, me: Me, a: ClaimArgs) {
  return sql`with me as (
      select 1 from leasehold_processes where id = ${me.id} and token = ${me.token} and expires_at > now()
      for share
    ), abandoned as (
      -- One owner-index probe per expired process (never a join over all units), skipping rows
      -- another claimer holds while scanning, so concurrent claimers take different units.
      -- Skipped as a whole (a one-time filter) when the share read found no abandoned unit.
      select c.ctid, c.weight, c.pos, 0 as part, c.suspect
      from leasehold_processes p
      cross join lateral (
        select ctid, weight, pos, (running_since is not null or crashes > 0) as suspect from leasehold_units
        where owner = p.id and weight > 0
        order by pos
        limit ${a.limit}
        for update skip locked
      ) c
      where ${a.abandoned ?? true} and p.expires_at <= now() and p.id <> ${me.id} and exists (select 1 from me)
      limit ${a.limit}
      for share of p skip locked
    ), unowned as (
      select ctid, weight, pos, 1 as part, crashes > 0 as suspect from leasehold_units
      where owner is null and weight > 0 and quarantined_until is null
        and pos >= ${a.from} and pos < ${a.to} and exists (select 1 from me)
      order by pos limit ${a.limit} for update skip locked
    ), candidates as (
      -- A suspect (its owner died while its job ran, or it crashed before and has not run
      -- cleanly since) is claimed alone: at most one per claim, and none by a process that owns
      -- one already, so units that died together (a poison unit and whatever ran beside it) are
      -- spread over processes and the innocent ones run cleanly (docs/design.md, "Crashes and
      -- quarantine"). The probe reads this process's own units through the owner index.
      select *, sum(suspect::int) over (order by part, pos rows unbounded preceding) as suspects
      from (select * from abandoned union all select * from unowned) c
    ), picked as (
      select ctid from (
        select ctid, weight,
               sum(weight) over (order by part, pos rows unbounded preceding) as upto,
               row_number() over (order by part, pos) as n
        from candidates
        where not suspect or (suspects = 1 and not exists (
          select 1 from leasehold_units o where o.owner = ${me.id} and o.crashes > 0))
      ) c
      where n <= ${a.limit} and (upto <= ${a.budget} or n = 1)
    -- The picked rows are locked by this statement, so they are updated through their ctids (a Tid
    -- Scan; joined back on the primary key, a planner that thought the units few hashed them all).
    -- A row that changed after this statement's snapshot and still qualified when locked has a
    -- version the snapshot cannot see: it is left unclaimed (claimed on a later tick), never taken
    -- from anyone. A unit of an expired owner whose job ran counts a crash (docs/design.md,
    -- "Crashes and quarantine"); the one that reaches the limit is quarantined, not claimed.
    ), claimed as (
      update leasehold_units u set
        owner = case when ${poisoned(sql, a.crash ?? CRASH_DEFAULTS)} then null else ${me.id}::uuid end,
        claimed_at = case when ${poisoned(sql, a.crash ?? CRASH_DEFAULTS)} then null else now() end,
        ${crashAssignments(sql, a.crash ?? CRASH_DEFAULTS)}
      where u.ctid = any(array(select ctid from picked))
      returning u.tenant, u.shard, u.job, u.weight, u.config, u.owner
    )
    select tenant, shard, job, weight, config from claimed where owner is not null`;
}

// Gives back the listed units of this instance (shedding): nothing when its row is another
// instance's or gone. The row is share-locked first, as a claim locks it.
export async function releaseUnits(sql: Sql, me: Me, units: UnitKey[]): Promise<number> {
  if (units.length === 0) return 0;
  const rows = await sql`${releaseUnitsStatement(sql, me, units)}`;
  return rows.count;
}

/** The shed statement of {@link releaseUnits} (at least one unit) as a fragment (the plan test reads its plan with EXPLAIN). */
export function releaseUnitsStatement(sql: Sql, me: Me, units: UnitKey[]) {
  return sql`with me as (
      select 1 from leasehold_processes where id = ${me.id} and token = ${me.token} for share
    )
    update leasehold_units u set owner = null, claimed_at = null, running_since = null
    from jsonb_to_recordset(${sql.json(units as never)}) as k(tenant text, shard int)
    where u.owner = ${me.id} and u.tenant = k.tenant and u.shard = k.shard and exists (select 1 from me)`;
}

// Gives back every unit of this instance, in one statement; nothing when its row is another
// instance's or gone. The row is share-locked before the first unit (only when there is one, so
// a release of nothing writes nothing), then the units in key order, as the sweep locks them: a
// release racing a sweep of the same process cannot deadlock.
export async function releaseAll(sql: Sql, me: Me): Promise<number> {
  const rows = await sql`${releaseAllStatement(sql, me)}`;
  return rows.count;
}

/** The statement of {@link releaseAll} as a fragment (the plan test reads its plan with EXPLAIN). */
export function releaseAllStatement(sql: Sql, me: Me) {
  return sql`with mine as (
      select ctid from leasehold_units u
      where owner = ${me.id}
        and exists (select 1 from leasehold_processes p where p.id = u.owner and p.token = ${me.token} for share)
      order by tenant, shard for update
    )
    -- Through the owner index (the rows locked above, in key order first), not joined back on the
    -- primary key (a hash of every unit) nor by ctid: a unit a registration changed after this
    -- statement's snapshot (its config, its weight) has a version the snapshot cannot see, and an
    -- update by ctid would leave it owned by a process about to delete its row, for good.
    update leasehold_units u set owner = null, claimed_at = null, running_since = null
    where u.owner = ${me.id} and (select count(*) from mine) > 0`;
}

// Deletes this instance's process row (last step of a graceful stop); never another's. Returns
// the chain a replacement of it continues, read from the row it deleted (a row written before
// migration 021 is the first of its own chain).
export async function deleteProcess(sql: Sql, me: Me): Promise<ProcessChain | undefined> {
  const [row] = await sql<{ id: string; startedAt: Date; replacements: number }[]>`delete from leasehold_processes
    where id = ${me.id} and token = ${me.token}
    returning coalesce(chain_id, id) as id, coalesce(chain_started_at, started_at) as "startedAt", replacements`;
  return row && { replaces: me.id, id: row.id, startedAt: row.startedAt.toISOString(), replacements: row.replacements + 1 };
}
