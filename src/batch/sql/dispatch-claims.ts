// The scheduler's dispatch claim (leasehold_batches.dispatched_at, read with leasehold_runs and
// leasehold_tenants): which open batches need workers and how many, marked so overlapping
// schedulers never send workers to one batch twice within the cooldown. Apart from the one-batch
// marks a worker sets (./dispatch.ts), so a worker's cold start does not load it (docs/design.md,
// "Fan-out").
import type { Sql } from '../../store/index.js';

/** A batch the scheduler sends workers to, and how many. */
export interface DispatchRow {
  id: string;
  /** Runs it lacks: below its target (within its tenant's limit), plus its stale runs. */
  workers: number;
}

// Marks open batches that need workers (below their target with their tenant below its limit,
// or with a stale run) as dispatched and returns them with how many workers each needs; a
// batch dispatched less than cooldownMs ago that no run has joined since is skipped, so
// overlapping schedulers never dispatch one batch twice. A batch below its target whose tenant
// runs its limit of runs (`max_running`, else `maxRunning`) needs no worker yet.
export async function claimDispatch(sql: Sql, a: DispatchArgs): Promise<DispatchRow[]> {
  return sql<DispatchRow[]>`${claimDispatchStatement(sql, a)}`;
}

/** What {@link claimDispatch} takes (ms, database clock), the most batches to mark, the default tenant limit. */
export interface DispatchArgs {
  staleMs: number;
  cooldownMs: number;
  limit: number;
  maxRunning: number;
}

/** {@link claimDispatch} as a fragment (the plan test reads its plan). */
export function claimDispatchStatement(sql: Sql, a: DispatchArgs) {
  return sql`update leasehold_batches b set dispatched_at = now()
    from (
      select o.id, s.workers from leasehold_batches o
      cross join lateral (
        select least(greatest(o.target - o.live_runs, 0),
                     coalesce((select greatest(coalesce(t.max_running, ${a.maxRunning}) - t.running, 0)
                               from leasehold_tenants t where t.tenant = o.tenant), ${a.maxRunning}))
          + (select count(*) from leasehold_runs r
             where r.batch_id = o.id and r.beat_at < now() - make_interval(secs => ${a.staleMs / 1000}))::int as workers
      ) s
      where o.status = 'open' and s.workers > 0 and o.paused_at is null
        and (o.dispatched_at is null or o.dispatched_at < o.taken_at
             or o.dispatched_at < now() - make_interval(secs => ${a.cooldownMs / 1000}))
      order by o.created_at
      limit ${a.limit}
      for update of o skip locked
    ) s
    where b.id = s.id
    returning b.id, s.workers`;
}
