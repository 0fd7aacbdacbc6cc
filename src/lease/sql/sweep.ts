// The sweep's statement (docs/design.md, "Process membership and unit ownership"): the scheduler
// runs it every minute, a process's own loop every sweepIntervalMs. Apart from ./ownership.ts so
// that a worker loads it on its first sweep, not at its cold start.
import type { Sql } from '../../store/index.js';
import { CRASH_DEFAULTS, crashAssignments, type CrashRule } from './ownership.js';

// Deletes processes expired longer than cutoffMs and frees their units, in one statement. Units
// are locked in key order, as a release locks them: no deadlock with a swept process releasing.
// A unit whose job ran when its owner died counts a crash (and may be quarantined).
export async function sweep(
  sql: Sql,
  cutoffMs: number,
  crash: CrashRule = CRASH_DEFAULTS,
): Promise<{ processes: number; units: number }> {
  const [r] = await sql<{ processes: number; units: number }[]>`${sweepStatement(sql, cutoffMs, crash)}`;
  return r;
}

/** The sweep statement as a fragment (the plan test reads its plan with EXPLAIN). */
export function sweepStatement(sql: Sql, cutoffMs: number, crash: CrashRule = CRASH_DEFAULTS) {
  return sql`with dead as (
      delete from leasehold_processes
      where expires_at < now() - make_interval(secs => ${cutoffMs / 1000})
      returning id
    ), doomed as (
      select tenant, shard from leasehold_units
      where owner = any (array(select id from dead)) order by tenant, shard for update
    ), freed as (
      update leasehold_units u set owner = null, claimed_at = null, ${crashAssignments(sql, crash)}
      from doomed where u.tenant = doomed.tenant and u.shard = doomed.shard
        and u.owner = any (array(select id from dead))
      returning 1
    )
    select (select count(*) from dead) as processes, (select count(*) from freed) as units`;
}
