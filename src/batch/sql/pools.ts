// Statements of concurrency pools (leasehold_pools, leasehold_pool_leases, migration 031;
// docs/design.md, "Concurrency pools"). A pool caps the items in flight across every run of every
// batch naming it. A run holds permits as one lease row per (pool, run, key), which lapses at its
// `expires_at` (the database clock: staleMs after the run's last take): a run that dies returns
// its permits by itself. A take locks the pool's row first, then, in a second statement of the
// same transaction (a fresh snapshot, taken once the lock is held, so it sees every take that
// committed before), counts the live leases of the other runs and writes the run's own: two runs
// never hold one permit. Nothing here touches leasehold_items or the move+claim statement.
import type { Sql } from '../../store/index.js';

/** A pool's limits: `total` permits at once, and at most `perKey` of them per key (null: no per-key cap). */
export interface PoolLimits {
  total: number;
  perKey: number | null;
}

/** A pool with the permits out now (live leases), as the API shows it. */
export interface PoolInfo extends PoolLimits {
  name: string;
  /** Permits held now by live runs (database clock): the items in flight under the pool. */
  inFlight: number;
  /** Runs holding permits now. */
  runs: number;
  /** Keys with permits out now, and how many each (at most 100, the busiest first). */
  keys: { key: string; inFlight: number }[];
  updatedAt: Date;
}

/** One key's answer of {@link syncPermits}: the permits the run now holds for it. */
export interface PermitGrant {
  key: string;
  held: number;
}

/** What {@link syncPermits} answers. */
export interface PermitAnswer {
  grants: PermitGrant[];
  /** More permits are out than the pool's limits allow now (a lowered limit): runs give back as items end. */
  over: boolean;
  limits: PoolLimits;
}

/**
 * Set the run's permits of `pool`, per key, to `targets` as far as the pool allows, in one
 * transaction: the pool's row is locked (created with `defaults` when missing), and then each
 * key keeps what the run holds of it up to its target (a lowered limit takes nothing back: the
 * run gives back as its items end) and gains, in key order, what the pool's total and per-key
 * limits leave after every other run's live leases. Keys absent from `targets`, and keys whose
 * answer is 0, are deleted; every kept lease of the run expires `leaseMs` from now (database
 * clock), which is also how a run renews its leases. Leases of the pool that lapsed are deleted
 * (at most 100 a take). Targets are whole numbers ≥ 0.
 */
export async function syncPermits(
  sql: Sql,
  a: { pool: string; run: string; targets: { key: string; target: number }[]; leaseMs: number; defaults: PoolLimits },
): Promise<PermitAnswer> {
  const targets = [...a.targets].sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  return sql.begin(async (t) => {
    const limits = await lockPool(t as unknown as Sql, a.pool, a.defaults);
    // Lapsed leases go first, a bounded few per take (the count below skips them anyway).
    await t`delete from leasehold_pool_leases where ctid = any(array(
        select ctid from leasehold_pool_leases where pool = ${a.pool} and expires_at <= clock_timestamp() limit 100))`;
    const rows = await t<
      { key: string; held: number; over: boolean }[]
    >`${permitsStatement(t as unknown as Sql, { ...a, targets }, limits)}`;
    return { grants: rows.map((r) => ({ key: r.key, held: r.held })), over: rows.some((r) => r.over), limits };
  }) as Promise<PermitAnswer>;
}

/**
 * The write of {@link syncPermits} as a fragment (the plan test reads its plan): sent once the
 * pool's row is locked, in the same transaction. Reads the pool's live leases only.
 */
export function permitsStatement(
  sql: Sql,
  a: { pool: string; run: string; targets: { key: string; target: number }[]; leaseMs: number },
  limits: PoolLimits,
) {
  return sql`with w as (
        select v.key, greatest(v.target, 0) as target, v.ord
        from jsonb_to_recordset(${JSON.stringify(a.targets.map((x, ord) => ({ key: x.key, target: x.target, ord })))}::text::jsonb)
          as v(key text, target int, ord int)
      ), live as (
        select run_id, key, held from leasehold_pool_leases
        where pool = ${a.pool} and expires_at > clock_timestamp()
      ), others as (
        select coalesce(sum(held), 0)::int as n from live where run_id <> ${a.run}
      ), cur as (
        select w.key, w.target, w.ord,
          coalesce((select held from live where run_id = ${a.run} and live.key = w.key), 0) as held,
          coalesce((select sum(held) from live where run_id <> ${a.run} and live.key = w.key), 0)::int as others_key
        from w
      ), base as (
        -- What each key keeps (never more than it holds or wants) and what more it may want.
        select cur.*, least(cur.target, cur.held) as keep,
          greatest(0, least(cur.target, coalesce(${limits.perKey}::int - cur.others_key, cur.target)) - least(cur.target, cur.held)) as extra
        from cur
      ), room as (
        select ${limits.total}::int - (select n from others) - coalesce((select sum(keep) from base), 0)::int as n
      ), granted as (
        select b.key, b.keep + greatest(0, least(b.extra,
          (select n from room) - (coalesce(sum(b.extra) over (order by b.ord), 0) - b.extra)))::int as held
        from base b
      ), gone as (
        delete from leasehold_pool_leases l
        where l.pool = ${a.pool} and l.run_id = ${a.run}
          and not exists (select 1 from granted g where g.key = l.key and g.held > 0)
      ), kept as (
        insert into leasehold_pool_leases as l (pool, run_id, key, held, expires_at)
        select ${a.pool}, ${a.run}, g.key, g.held, clock_timestamp() + make_interval(secs => ${a.leaseMs}::float8 / 1000)
        from granted g where g.held > 0
        order by g.key
        on conflict (pool, run_id, key) do update set held = excluded.held, expires_at = excluded.expires_at
      )
      select g.key, g.held,
        (select n from others) + (select coalesce(sum(held), 0) from granted) > ${limits.total}::int
          or exists (select 1 from granted g2 join cur c on c.key = g2.key
                     where ${limits.perKey}::int is not null and c.others_key + g2.held > ${limits.perKey}::int) as over
      from granted g`;
}

// Locks the pool's row (the one lock every take of the pool queues on), creating it with the
// job's declared limits when it is missing, and answers its limits.
async function lockPool(sql: Sql, name: string, defaults: PoolLimits): Promise<PoolLimits> {
  let [r] = await sql<{ total: number; per_key: number | null }[]>`select total, per_key from leasehold_pools
    where name = ${name} for update`;
  if (!r) {
    await sql`insert into leasehold_pools (name, total, per_key) values (${name}, ${defaults.total}, ${defaults.perKey}::int)
      on conflict (name) do nothing`;
    [r] = await sql<{ total: number; per_key: number | null }[]>`select total, per_key from leasehold_pools
      where name = ${name} for update`;
  }
  return { total: r.total, perKey: r.per_key };
}

/** Give back every permit the run holds of `pool` (its end): its lease rows are deleted. */
export async function releasePermits(sql: Sql, a: { pool: string; run: string }): Promise<void> {
  await sql`delete from leasehold_pool_leases where pool = ${a.pool} and run_id = ${a.run}`;
}

/**
 * Create or change a pool's limits (`PUT /pools/{name}`): takes from then on grant under them; a
 * lower limit takes no permit back, runs give back as their items end. Answers the pool.
 */
export async function setPool(sql: Sql, name: string, limits: PoolLimits): Promise<PoolInfo> {
  await sql`insert into leasehold_pools (name, total, per_key) values (${name}, ${limits.total}, ${limits.perKey}::int)
    on conflict (name) do update set total = excluded.total, per_key = excluded.per_key, updated_at = now()`;
  return (await getPool(sql, name))!;
}

/** Whether a pool of that name exists. */
export async function poolExists(sql: Sql, name: string): Promise<boolean> {
  const [r] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_pools where name = ${name}`;
  return r.n > 0;
}

interface PoolRow {
  name: string;
  total: number;
  per_key: number | null;
  updated_at: Date;
  in_flight: number;
  runs: number;
  keys: { key: string; n: number }[] | null;
}

const toPool = (r: PoolRow): PoolInfo => ({
  name: r.name,
  total: r.total,
  perKey: r.per_key,
  inFlight: r.in_flight,
  runs: r.runs,
  keys: (r.keys ?? []).map((k) => ({ key: k.key, inFlight: Number(k.n) })),
  updatedAt: r.updated_at,
});

/** One pool with its permits out now (live leases, database clock); undefined: no such pool. */
export async function getPool(sql: Sql, name: string): Promise<PoolInfo | undefined> {
  const [r] = await sql<PoolRow[]>`select p.*, u.* from leasehold_pools p
    cross join lateral (${poolUse(sql)}) u where p.name = ${name}`;
  return r && toPool(r);
}

/** Every pool (by name, at most 1,000) with its permits out now. */
export async function listPools(sql: Sql): Promise<PoolInfo[]> {
  const rows = await sql<PoolRow[]>`select p.*, u.* from (select * from leasehold_pools order by name limit 1000) p
    cross join lateral (${poolUse(sql)}) u order by p.name`;
  return rows.map(toPool);
}

// The live leases of pool `p`: permits out, runs holding them, and the busiest keys.
function poolUse(sql: Sql) {
  return sql`select coalesce(sum(l.held), 0)::int as in_flight, count(distinct l.run_id)::int as runs,
      (select json_agg(json_build_object('key', k.key, 'n', k.n) order by k.n desc, k.key) from (
        select key, sum(held)::int as n from leasehold_pool_leases
        where pool = p.name and expires_at > clock_timestamp() group by key order by 2 desc, 1 limit 100) k) as keys
    from leasehold_pool_leases l where l.pool = p.name and l.expires_at > clock_timestamp()`;
}
