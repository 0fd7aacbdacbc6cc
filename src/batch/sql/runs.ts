// The statements of a run's lease (leasehold_runs, with leasehold_batches and leasehold_tenants,
// and the items a run recovers or gives back in leasehold_items): the takeover that starts a run,
// the reads that tell a runner whether to look again or hand off, the recovery of items left
// running by runs that are gone, the beat, and the end of a run's lease (a handoff, a leave, a
// hand-back). Every statement that changes items is fenced on the run's own row; a takeover locks
// with skip locked except the batch it was sent for (its row, then its tenant's, waited for), and
// every statement that changes both locks the run rows before the batch row and the batch row
// before its tenant's, so none deadlocks with another (docs/design.md, "Fan-out" and "Tenant
// fairness").
import type { Sql } from '../../store/index.js';
import type { BatchInfo } from '../types.js';
import { storableText } from '../values.js';
import { moved, type EncodedMoves } from './moves.js';
import { beatAnswers, beatResult, ownRun, toInfo, type BatchRow, type BeatResult, type BeatRow } from './shared.js';

/** A batch a takeover joined, with how long it waited for its first run. */
export type TakenBatch = BatchInfo & {
  /** ms from its start to this takeover when this is its first run (database clock); else null. */
  queueWaitMs: number | null;
  /** The stale run this one replaced (its running items count their attempt); null: a new run. */
  replaced: string | null;
};

// Starts one run of an open batch in one statement: the new run's row is inserted, and either
// a stale run of the batch is replaced (its row deleted) or the batch's live runs grow by one.
// The choice (docs/design.md, "Fan-out" and "Tenant fairness"):
// - `batchId`: a stale run of that batch, else a new run of it while it is below its target and
//   its tenant below its limit, its row and its tenant's waited for; with `orFairer`, the new run
//   only while no other tenant with a batch below target runs fewer runs (else the choice
//   below); without it nothing else is taken;
// - else a stale run of any batch (beat older than staleMs, database clock): the slot is its own;
// - else a batch below its target of the tenant running the fewest runs, below its limit
//   (`max_running`, else `maxRunning`), longest unchanged first among equals; within the tenant,
//   highest priority, then oldest. A tenant whose row another statement holds is skipped only
//   for one running as few runs (`fewest`, read first without a lock); when every such tenant is
//   held, nothing is taken and the runner tries again (takeoverMayFind), never a tenant running
//   more.
// Every row the choice may change is locked with skip locked (a tenant row, then its batch row;
// a stale run row with its batch row), except a new run of the batch it was sent for: that
// batch's row, then its tenant's, are waited for (the takeovers sent at once for one batch join
// one after another instead of all but one finding nothing), before any other row is locked. So
// a takeover waits only in the order every statement locks in (run rows, then the batch, then
// the tenant, as a handoff, cancel or finish does through the trigger of migration 016) and
// never deadlocks with one. Tenants and batches are found through the partial
// indexes `leasehold_tenants_wanting` and `leasehold_batches_wanting`; stale runs by reading the
// small table of live runs. Batches in `skip` are never taken. A paused batch (target 0,
// migration 030) is never below its target, and its stale runs are left alone until it resumes.
export async function takeOver(sql: Sql, a: TakeOverArgs): Promise<TakenBatch | undefined> {
  const [r] = await sql<(BatchRow & { queue_wait_ms: number | null; replaced: string | null })[]>`${takeOverStatement(sql, a)}`;
  return r && { ...toInfo(r), queueWaitMs: r.queue_wait_ms, replaced: r.replaced };
}

/** What {@link takeOver} takes: the new run and its process, and the choice's settings. */
export interface TakeOverArgs {
  run: string;
  process: string;
  staleMs: number;
  /** Limit of runs of tenants without their own; {@link NO_LIMIT} for none. */
  maxRunning: number;
  batchId?: string;
  /** With `batchId`: take a better choice instead when one exists (a worker sent for the batch). */
  orFairer?: boolean;
  skip?: string[];
  /** The memory size a stale run replaced is counted at, MB (its own is not stored). Default 1,024. */
  memoryMb?: number;
  /** The architecture a stale run replaced is counted at. Default `x86_64`. */
  architecture?: 'x86_64' | 'arm64';
}

// A tenant (as `t`) that may take one more run (below its limit) and has a batch below its
// target that the runner does not skip: the takeover's choice and takeoverMayFind share it.
function eligibleTenant(sql: Sql, maxRunning: number, skip: ReturnType<Sql['json']>) {
  return sql`t.wanting > 0 and t.running < coalesce(t.max_running, ${maxRunning})
        and exists (select 1 from leasehold_batches w
                    where w.tenant = t.tenant and w.status = 'open' and w.live_runs < w.target
                      and w.id::text not in (select jsonb_array_elements_text(${skip})))`;
}

// The usage of the stale run a takeover replaced (the CTEs `gone` and `joined`): it died without
// reporting (docs/design.md, "Usage and cost"), so it is counted from its start to its last beat,
// at this worker's memory size; should it report after all, its own figures replace these.
function deadRunUsage(sql: Sql, a: TakeOverArgs) {
  return sql`insert into leasehold_run_usage (run_id, batch_id, tenant, process, worker_ms, memory_mb, architecture, died)
      select g.id, g.batch_id, j.tenant, g.process,
        greatest(extract(epoch from g.beat_at - g.started_at) * 1000, 0)::float8, ${a.memoryMb ?? 1024}::int,
        ${a.architecture ?? 'x86_64'}, true
      from gone g join joined j on j.id = g.batch_id
      on conflict (run_id) do nothing`;
}

// The instant before which a run's beat is stale (database clock): the takeover's choice and
// takeoverMayFind share it.
function staleBefore(sql: Sql, staleMs: number) {
  return sql`now() - make_interval(secs => ${staleMs / 1000})`;
}

/** The takeover statement as a fragment (the benchmark and a test read its plan with EXPLAIN). */
export function takeOverStatement(sql: Sql, a: TakeOverArgs) {
  const skip = sql.json(a.skip ?? []);
  const sent = a.batchId ?? null;
  const only = a.batchId !== undefined && !a.orFairer;
  const stale = staleBefore(sql, a.staleMs);
  const eligible = eligibleTenant(sql, a.maxRunning, skip);
  // The fewest runs any eligible tenant runs, read without a lock: the tenant taken below runs
  // no more. Skipping a locked row alone let a takeover racing another one (which holds the
  // fairest tenant's row for its statement) take a tenant running more runs instead.
  return sql`with fewest as materialized (
      select t.running from leasehold_tenants t
      where ${eligible}
      order by t.running, t.served_at nulls first, t.tenant
      limit 1
    ), tenant as materialized (
      select t.tenant, t.running from leasehold_tenants t
      where ${eligible} and t.running <= (select running from fewest)
      order by t.running, t.served_at nulls first, t.tenant
      limit 1
      for update of t skip locked
    ), fair as (
      select w.id, tenant.running
      from tenant
      cross join lateral (
        select id from leasehold_batches
        where leasehold_batches.tenant = tenant.tenant and status = 'open' and live_runs < target
          and id::text not in (select jsonb_array_elements_text(${skip}))
        order by priority desc, created_at, id
        limit 1
        for update skip locked
      ) w
    ), stale as (
      -- The batches are looked up by the ids of the stale runs (= any of an array): joined
      -- plainly, a planner that thought the runs many hashed every open batch.
      select r.batch_id as id, r.id as dead from leasehold_runs r
      join leasehold_batches b on b.id = r.batch_id
      where r.beat_at < ${stale} and b.status = 'open' and b.paused_at is null
        and b.id = any(array(select batch_id from leasehold_runs where beat_at < ${stale}))
        and r.batch_id::text not in (select jsonb_array_elements_text(${skip}))
      order by r.beat_at
      limit 1
      for update of r, b skip locked
    ), sent_stale as (
      select r.batch_id as id, r.id as dead from leasehold_runs r
      join leasehold_batches b on b.id = r.batch_id
      where r.batch_id = ${sent}::uuid and r.beat_at < ${stale} and b.status = 'open' and b.paused_at is null
      order by r.beat_at
      limit 1
      for update of r, b skip locked
    ), sent_free as (
      -- Waits for the rows (batch, then tenant: the order of every statement here) rather than
      -- skipping them: runs sent at once for one batch join one after another, each seeing the
      -- live runs the one before it left, instead of all but one finding nothing.
      select b.id, t.running
      from leasehold_batches b join leasehold_tenants t on t.tenant = b.tenant
      where b.id = ${sent}::uuid and b.status = 'open' and b.live_runs < b.target
        and t.running < coalesce(t.max_running, ${a.maxRunning})
      for update of b, t
    ), fewest_other as materialized (
      -- The fewest runs a tenant other than the sent batch's runs (read without a lock, as
      -- fewest is): compared with its tenant's count as locked, which the takeovers before it in
      -- the row's queue raised, so its own tenant's older count never turns it away.
      select t.running from leasehold_tenants t
      where ${eligible} and t.tenant <> (select tenant from leasehold_batches where id = ${sent}::uuid)
      order by t.running, t.served_at nulls first, t.tenant
      limit 1
    ), pick as (
      select id, dead, 0 as o from sent_stale
      union all select id, null::uuid, 1 from sent_free
        where ${only} or not exists (select 1 from fewest_other where fewest_other.running < sent_free.running)
      union all select id, dead, 2 from stale where not ${only}
      union all select id, null::uuid, 3 from fair where not ${only}
      order by o
      limit 1
    ), gone as (
      delete from leasehold_runs r using pick where r.id = pick.dead
      returning r.id, r.batch_id, r.process, r.started_at, r.beat_at
    ), joined as (
      update leasehold_batches b
      set live_runs = b.live_runs + case when pick.dead is null then 1 else 0 end,
          taken_at = now(), handed_off_at = null, runs = b.runs + 1, stalled_runs = b.stalled_runs + 1
      from pick
      where b.id = pick.id and (pick.dead is null or (select count(*) from gone) = 1)
      returning b.*
    ), run as (
      insert into leasehold_runs (id, batch_id, process) select ${a.run}, id, ${a.process} from joined
      returning id, batch_id, process, started_at, beat_at, settled
    ), dead_usage as (
      ${deadRunUsage(sql, a)}
    )
    select j.*, null::jsonb as counts,
      (select json_agg(json_build_object('id', r.id, 'process', r.process, 'started_at', r.started_at,
          'beat_at', r.beat_at, 'settled', r.settled, 'age_ms', 0)) from run r) as run_list,
      case when j.runs = 1 then (extract(epoch from now() - j.created_at) * 1000)::float8 end as queue_wait_ms,
      (select dead from pick) as replaced
    from joined j`;
}

// Whether a takeover that took nothing may have skipped a batch only because another statement
// held its row or its tenant's (the choice skips locked rows): the named batch is still below
// its target with its tenant below its limit, or (without one) some such tenant has a batch
// below its target that the runner does not skip (`skip`, as the takeover's: else a runner
// whose only waiting batch is its own or one of an unknown job asks again and again); or, with
// `staleMs`, a run of the named batch (without one, of any batch not skipped) is stale, and its
// open, unpaused batch row was held (by a callback's wake, a cancel, another takeover) when the
// takeover skipped it.
export async function takeoverMayFind(
  sql: Sql,
  a: { batchId?: string; maxRunning: number; skip?: string[]; staleMs?: number },
): Promise<boolean> {
  const skip = sql.json(a.skip ?? []);
  const staleRun =
    a.staleMs === undefined
      ? sql`false`
      : sql`exists (
          select 1 from leasehold_runs r join leasehold_batches b on b.id = r.batch_id
          where r.beat_at < ${staleBefore(sql, a.staleMs)}
            and b.status = 'open' and b.paused_at is null
            and ${a.batchId === undefined ? sql`r.batch_id::text not in (select jsonb_array_elements_text(${skip}))` : sql`r.batch_id = ${a.batchId}::uuid`}
        )`;
  const [r] = a.batchId
    ? await sql<{ waiting: boolean }[]>`select exists (
        select 1 from leasehold_batches b join leasehold_tenants t on t.tenant = b.tenant
        where b.id = ${a.batchId}::uuid and b.status = 'open' and b.live_runs < b.target
          and t.running < coalesce(t.max_running, ${a.maxRunning})
      ) or ${staleRun} as waiting`
    : await sql<{ waiting: boolean }[]>`select exists (
        select 1 from leasehold_tenants t where ${eligibleTenant(sql, a.maxRunning, skip)}
      ) or ${staleRun} as waiting`;
  return r.waiting;
}

// Whether a tenant other than `tenant` has a batch below its target and is below its limit
// (through the partial index of tenants wanting runs): a run past its slice hands off then.
export async function othersWaiting(sql: Sql, tenant: string, maxRunning: number): Promise<boolean> {
  const [r] = await sql<{ waiting: boolean }[]>`select exists (
      select 1 from leasehold_tenants
      where wanting > 0 and running < coalesce(max_running, ${maxRunning}) and tenant <> ${tenant}
    ) as waiting`;
  return r.waiting;
}

// After a takeover: items left running by runs that are gone (the stale run replaced, or a run
// that handed off while an item ignored its signal) count that attempt; they go back to
// pending, or to failed when their attempts are used up. An item of a live run of the batch is
// never touched: the runs are read as of the statement's snapshot, so an item is changed only
// while it is still held by the run found gone (an item another recovery put back and a run
// that joined since claimed is that run's). An attempt that was going on after its wait (its
// `woke` is of this attempt) hands how the wait ended to the next one: the answer came, and the
// attempt died with its run rather than failed (docs/design.md, "Waiting items: callbacks and
// sleeps"). Fenced on the new run.
export async function recoverRunning(sql: Sql, a: RecoverArgs): Promise<number> {
  const rows = await sql`${recoverRunningStatement(sql, a)}`;
  return rows.count;
}

/** What {@link recoverRunning} takes: the batch, the new run, the attempts an item may use. */
export interface RecoverArgs {
  batchId: string;
  run: string;
  attempts: number;
}

/** The recovery statement as a fragment (the plan test reads its plan); see {@link recoverRunning}. */
export function recoverRunningStatement(sql: Sql, a: RecoverArgs) {
  return sql`with own as (
      ${ownRun(sql, a.run)}
    ), gone as (
      select ctid as tid, run_id from leasehold_items
      where batch_id = ${a.batchId} and state = 'running' and exists (select 1 from own)
        -- An anti-join: "run_id <> all (the batch's runs)" compared each running item with every
        -- run of the batch (13.8 ms at 1,019 runs and 8,232 running items, against 2.7 ms).
        and not exists (select 1 from leasehold_runs r where r.id = leasehold_items.run_id and r.batch_id = ${a.batchId})
    )
    update leasehold_items i
    set state = case when i.attempts >= ${a.attempts} then 'failed' else 'pending' end,
        error = case when i.attempts >= ${a.attempts}
          then 'the run executing this item died (attempt ' || i.attempts || ' of ' || ${a.attempts}::int || ')'
          else i.error end,
        run_id = ${a.run}, run_after = greatest(i.run_after, now()), updated_at = now(),
        woke = case when (i.woke ->> 'attempt')::int = i.attempts
          then jsonb_set(i.woke, '{attempt}', to_jsonb(i.attempts + 1)) else i.woke end
    from gone
    -- By the ctids found (a Tid Scan: a join on the key let a planner walk the batch's items);
    -- a row another statement changed meanwhile is rechecked as it stands, and left alone
    -- unless the gone run still holds it.
    where i.ctid = any(array(select tid from gone)) and i.ctid = gone.tid and i.state = 'running'
      and i.run_id is not distinct from gone.run_id`;
}

// Puts back items this run holds as running but is not executing (claimed by a statement
// whose answer was lost): pending again, the uncounted attempt given back, due when they were
// (an item claimed ahead of its due time keeps its backoff). Fenced on the run.
export function releaseOrphans(sql: Sql, batchId: string, run: string) {
  return releaseOrphansStatement(sql, { batchId, run });
}

/** {@link releaseOrphans} with its arguments as one object (the plan test's form). */
export function releaseOrphansStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with own as (
      ${ownRun(sql, run)}
    )
    update leasehold_items set state = 'pending', attempts = attempts - 1, run_after = greatest(run_after, now()),
      updated_at = now()
    where batch_id = ${batchId} and run_id = ${run} and state = 'running' and exists (select 1 from own)`;
}

// Proves the run still holds its lease, and says whether it is a surplus run (the newest runs
// beyond the batch's max_concurrency, or any run of a paused batch), the batch's own rate now,
// and whether its deadline passed (database clock). Updates the run's own row only.
export async function beat(sql: Sql, batchId: string, run: string): Promise<BeatResult> {
  const [r] = await sql<BeatRow[]>`${beatStatement(sql, { batchId, run })}`;
  return beatResult(r);
}

/** The beat as a fragment (the plan test reads its plan); see {@link beat}. */
export function beatStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`update leasehold_runs r set beat_at = now()
    where r.id = ${run} and r.batch_id = ${batchId}
    returning ${beatAnswers(sql)}`;
}

// Ends the run's lease in one statement: writes the settled items; gives every other item this
// run holds as running, except those still executing (`hold`: their keys, with the settled
// ones, as a JSON array), back to pending with its attempt given back and its due time kept —
// claimed ahead but never started, or claimed by a statement whose answer was lost; deletes the
// run's row and counts one live run less, so another process may join at once. With `leave`
// (the run found no work while other runs of the batch go on) it ends only while another run
// of the batch is live (decided on the locked batch row, so the last run never leaves), and
// lowers the batch's target to the runs left, so no worker joins for the tail. A graceful
// handoff is no stalled run: with `recordProgress` the stalled runs go to 0, else this run's
// count is taken back — unless `stalledBy` (its source reader kept failing): then its count
// stands, and the open batch's reason keeps that error, for a give-up to name.
export async function handOffRun(
  sql: Sql,
  a: HandOffArgs,
): Promise<{ handed: boolean; kept: boolean; moved: number; givenBack: number }> {
  const [r] = await sql<{ handed: number; kept: boolean; moved: number; given_back: number }[]>`${handOffStatement(sql, a)}`;
  return { handed: r.handed === 1, kept: r.handed === 0 && r.kept, moved: r.moved, givenBack: r.given_back };
}

/**
 * What {@link handOffRun} takes; `hold` is a JSON array text of keys still executing. It answers
 * whether the run's lease ended (`handed`), or, for a `leave` refused because it is the batch's
 * last run, that the lease stands (`kept`).
 */
export interface HandOffArgs {
  batchId: string;
  run: string;
  moves: EncodedMoves;
  hold: string;
  recordProgress: boolean;
  /** Leave for want of work: only while another run is live; the target drops to the runs left. */
  leave?: boolean;
  /**
   * The run hands off because its source reader kept failing, with this error: no graceful
   * handoff, its stalled run stands, and the batch's `reason` is set to it while the batch is open.
   */
  stalledBy?: string;
}

/** The handoff as a fragment (the plan test reads its plan); see {@link handOffRun}. */
export function handOffStatement(sql: Sql, a: HandOffArgs) {
  const leave = a.leave ?? false;
  const stalledBy = a.stalledBy === undefined ? null : storableText(a.stalledBy);
  return sql`with left_batch as (
      -- The run's row is locked (by the subquery) before the batch row, as every statement does.
      update leasehold_batches
      set live_runs = live_runs - 1, handed_off_at = now(),
          -- A paused batch (target 0, migration 030) stays at 0.
          target = case when ${leave} and target > 0 then greatest(1, least(target, live_runs - 1)) else target end,
          stalled_runs = case when ${a.recordProgress} then 0 when ${stalledBy}::text is not null then stalled_runs
                              else greatest(stalled_runs - 1, 0) end,
          reason = coalesce(${stalledBy}::text, reason)
      where id = ${a.batchId} and status = 'open' and (not ${leave} or live_runs > 1)
        and exists (select 1 from leasehold_runs where id = ${a.run} and batch_id = ${a.batchId} for update)
      returning id
    ), own as (
      delete from leasehold_runs where id = ${a.run} and exists (select 1 from left_batch) returning id
    ), moved as (
      ${moved(sql, a.batchId, a.run, a.moves)}
    ), back as (
      update leasehold_items i
      set state = 'pending', attempts = i.attempts - 1, run_after = greatest(i.run_after, now()), updated_at = now()
      where i.batch_id = ${a.batchId} and i.run_id = ${a.run} and i.state = 'running'
        and i.key <> all(array(select jsonb_array_elements_text(${a.hold}::text::jsonb)))
        and exists (select 1 from own)
      returning 1
    )
    select (select count(*) from own)::int as handed, (select count(*) from moved)::int as moved,
      (select count(*) from back)::int as given_back,
      -- The row still stands (a leave refused for the last run): read locked, so a row that a
      -- finish, cancel or takeover deleted after the statement's snapshot is seen gone (lost).
      exists (select 1 from leasehold_runs where id = ${a.run} for update) as kept`;
}

// Hands back a batch this runner joined but cannot run (its job is unknown here): its run row
// is deleted so any process joins at once; the takeover does not count as a stalled run.
export async function handBack(sql: Sql, batchId: string, run: string): Promise<boolean> {
  const rows = await sql`with b as (
      update leasehold_batches
      set live_runs = live_runs - 1, handed_off_at = now(), stalled_runs = greatest(stalled_runs - 1, 0)
      where id = ${batchId} and status = 'open'
        and exists (select 1 from leasehold_runs where id = ${run} and batch_id = ${batchId} for update)
      returning id
    )
    delete from leasehold_runs where id = ${run} and exists (select 1 from b) returning id`;
  return rows.length === 1;
}
