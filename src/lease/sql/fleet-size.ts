// Statements of the fleet's size that only the scheduler, the API and local mode run: the
// desired count (leasehold_settings), the fleet read from the process rows, and forgetting the
// invocations counted as coming. Apart from ./fleet.ts (what a worker runs: its start, the
// invocations it plans and reserves), so a worker's cold start does not load them.
import type { Sql } from '../../store/index.js';

/**
 * Reads the desired count of live processes.
 */
export async function getDesired(sql: Sql): Promise<number> {
  const [r] = await sql<{ value: number }[]>`select value from leasehold_settings where key = 'desired'`;
  return Number(r?.value ?? 0);
}

// Sets the desired count of live processes.
export async function setDesired(sql: Sql, desired: number): Promise<void> {
  await sql`insert into leasehold_settings (key, value) values ('desired', ${sql.json(desired)})
    on conflict (key) do update set value = excluded.value`;
}

/** The fleet as the process rows say: counts, and each live fleet process's reported weight. */
export interface FleetRows {
  desired: number;
  /** Live fleet processes not retiring. */
  live: number;
  /** Live fleet processes retiring. */
  retiring: number;
  /** Live batch workers. */
  batch: number;
  /** Invocations sent and not yet confirmed, within their confirmation window. */
  coming: number;
  totalWeight: number;
  /** Weight each live fleet process not retiring owned at its last heartbeat. */
  weights: number[];
  /** Units heavier than `floor(totalWeight / live)` (and than 1), heaviest first, at most `live`. */
  heavy: number[];
}

// Reads the fleet from the process rows (live ones through the expiry index), the settings, the
// invocations and the totals row: never the units, except the few heavy ones through their index.
export async function fleetRows(sql: Sql): Promise<FleetRows> {
  const [r] = await sql<
    {
      desired: number;
      live: number;
      retiring: number;
      batch: number;
      coming: number;
      total_weight: number;
      weights: number[];
      heavy: number[];
    }[]
  >`with p as (
      select role, retiring, weight from leasehold_processes where expires_at > now()
    ), f as (
      select count(*) filter (where role = 'fleet' and not retiring) as live,
        count(*) filter (where role = 'fleet' and retiring) as retiring,
        count(*) filter (where role = 'batch') as batch,
        coalesce(json_agg(weight) filter (where role = 'fleet' and not retiring), '[]') as weights
      from p
    ), totals as (
      -- One row, estimated so (see shareStateStatement in ./ownership.ts).
      select weight from leasehold_unit_totals limit 1
    )
    select coalesce((select value::int from leasehold_settings where key = 'desired'), 0) as desired,
      f.live, f.retiring, f.batch, f.weights,
      (select count(*) from leasehold_invocations where confirm_by > now()) as coming,
      t.weight as total_weight,
      to_json(array(select weight from leasehold_units
            where weight > 1 and weight > t.weight / greatest(f.live, 1)
            order by weight desc limit greatest(f.live, 1))) as heavy
    from f cross join totals t`;
  return {
    desired: r.desired,
    live: r.live,
    retiring: r.retiring,
    batch: r.batch,
    coming: r.coming,
    totalWeight: r.total_weight,
    weights: r.weights.map(Number),
    heavy: r.heavy.map(Number),
  };
}

/**
 * Forgets every invocation counted as coming (local mode: its invoker is gone with the last run).
 */
export async function forgetInvocations(sql: Sql): Promise<number> {
  const rows = await sql`delete from leasehold_invocations`;
  return rows.count;
}
