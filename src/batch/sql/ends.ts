// The ends of a batch (leasehold_batches, leasehold_runs, leasehold_items, and its Batch
// Finished event in leasehold_batch_events): cancel, finish, give up and the end by tolerance,
// and the wait state a run reads between steps. Every end deletes all the batch's run rows first
// (each delete waits for the move in flight on it), ends the batch only while it is open, so
// once, deletes the runs that joined while it ran, and writes its Batch Finished event last, in
// the same transaction (sql/events.ts): a run's next fenced statement changes nothing
// (docs/design.md, "End").
import type postgres from 'postgres';
import type { Sql } from '../../store/index.js';
import { storableText } from '../values.js';
import type { BatchStatus } from '../types.js';
import { writeEndEvent } from './event-writes.js';
import { anyWaiting } from './waiting.js';

// Cancels an open batch for good. Every run row of the batch is deleted first (each delete
// waits for the move in flight on it), then the batch row: a run's next fenced statement
// changes nothing. Items keep the state they had (a count of running items says what was
// running at the cancel). No counts are stored: a move the cancel waited for lands after the
// statement's snapshot, so the batch's counts are read from its items.
export async function cancelBatch(sql: Sql, id: string): Promise<BatchStatus | undefined> {
  return endInTransaction(sql, async (t, lastTry) => {
    const status = await cancelOnce(t, id);
    if (status) {
      await noLateRuns(t, id, lastTry);
      await writeEndEvent(t, id);
    }
    return status;
  });
}

async function cancelOnce(sql: Sql, id: string): Promise<BatchStatus | undefined> {
  const [r] = await sql<{ status: BatchStatus }[]>`with gone as (
      delete from leasehold_runs where batch_id = ${id} returning 1
    )
    update leasehold_batches b
    set status = 'cancelled', finished_at = now(), live_runs = 0, reading = false
    where id = ${id} and status = 'open' and (select count(*) from gone) >= 0
    returning status`;
  return r?.status;
}

// Ends an open batch whose deadline has passed (database clock; migration 030): `failed` with
// reason 'deadline'. Every run row is deleted first, so each run stops at its next statement or
// beat and aborts its items; the items still running go back to pending with their attempt given
// back (a second statement, as the tolerance end does: a claim the deletes waited for is seen only
// by a later snapshot); pending items stay pending, never run. Its Batch Finished event is
// written in the same transaction. Not fenced on a run: the scheduler or any run of the batch may
// send it, and only the first ends the batch. Answers whether this call ended it.
export async function endPastDeadline(sql: Sql, id: string): Promise<boolean> {
  return endInTransaction(sql, async (t, lastTry) => {
    const [r] = await t<{ status: BatchStatus }[]>`with gone as (
        delete from leasehold_runs where batch_id = ${id} and exists (
          select 1 from leasehold_batches where id = ${id} and status = 'open' and deadline_at <= now())
        returning 1
      )
      update leasehold_batches b
      set status = 'failed', reason = 'deadline', finished_at = now(), live_runs = 0, reading = false
      where id = ${id} and status = 'open' and deadline_at <= now() and (select count(*) from gone) >= 0
      returning status`;
    if (!r) return false;
    await noLateRuns(t, id, lastTry);
    await t`${giveBackRunningStatement(t, { batchId: id })}`;
    await writeEndEvent(t, id);
    return true;
  });
}

// Every run row of a batch, deleted (each delete waits for the move in flight on it) when the
// run `run` still holds its lease and `when` holds: the first step of every end of a batch.
function endRuns(sql: Sql, batchId: string, run: string, when: postgres.Fragment) {
  return sql`delete from leasehold_runs
    where batch_id = ${batchId} and exists (select 1 from leasehold_runs where id = ${run}) and ${when}
    returning id`;
}

// The run rows a batch that just ended still has: runs that joined while the end ran. A takeover
// that joins holds the batch row until it commits; the end's delete of the run rows, from a
// snapshot taken before that commit, missed the new row, and its update of the batch row waited
// for the takeover and then ended the batch. Read here from a later snapshot, in the end's
// transaction: it holds the batch row, so no run joins any more and every run that did is seen.
// Such a run may already be in its first step, holding its own row and waiting for the batch row
// (the stalled-runs reset): deleting its row now would lock a run row after the batch row, the
// reverse of the order every statement keeps (docs/design.md, "Lock order"), and deadlock. So the
// end is rolled back and tried again: its first statement then deletes that run's row before it
// locks the batch row. Only the last try deletes late rows behind the batch row (endLateRuns), with
// the deadlock retry below as the net.
export async function noLateRuns(t: Sql, batchId: string, lastTry: boolean): Promise<void> {
  if (lastTry) {
    await t`${endLateRuns(t, batchId)}`;
    return;
  }
  const [r] = await t<{ late: boolean }[]>`select exists (select 1 from leasehold_runs where batch_id = ${batchId}) as late`;
  if (r.late) throw new LateRunsJoined();
}

/** An end found runs that joined while it ran: it is rolled back and tried again (see noLateRuns). */
export class LateRunsJoined extends Error {}

// The late run rows deleted behind the batch row: an end's last try (see noLateRuns).
function endLateRuns(sql: Sql, batchId: string) {
  return sql`delete from leasehold_runs where batch_id = ${batchId}`;
}

/** Tries of an end's transaction that PostgreSQL aborted to break a deadlock (see endInTransaction). */
const END_DEADLOCK_TRIES = 3;
/** Tries of an end that found runs joined while it ran (see noLateRuns). */
const END_LATE_TRIES = 5;

// Runs `f` in a transaction of its own, or in a savepoint when `sql` is a caller's transaction,
// trying it again (up to END_LATE_TRIES) while it finds runs that joined meanwhile (noLateRuns);
// `lastTry` tells `f` it may not ask again. A transaction of its own is also tried again when
// PostgreSQL aborted it for a deadlock (40P01), a net under the lock order (a cancel from the
// API has no other retry); nothing of an aborted try stands.
export async function endInTransaction<T>(sql: Sql, f: (t: Sql, lastTry: boolean) => Promise<T>): Promise<T> {
  const savepoint = (sql as { savepoint?: Sql['begin'] }).savepoint?.bind(sql);
  let deadlocks = 0;
  for (let tries = 1; ; tries++) {
    const lastTry = tries >= END_LATE_TRIES;
    try {
      if (savepoint) return (await savepoint((tx) => f(tx as unknown as Sql, lastTry))) as T;
      return (await sql.begin((tx) => f(tx as unknown as Sql, lastTry))) as T;
    } catch (e) {
      if (e instanceof LateRunsJoined) continue;
      const deadlock = (e as { code?: unknown } | null)?.code === '40P01';
      if (savepoint || !deadlock || ++deadlocks >= END_DEADLOCK_TRIES) throw e;
    }
  }
}

// Ends a batch whose runs keep failing before they store anything: `failed` with `reason`, and
// every item still pending, running or waiting `failed` with `itemError`. Fenced on the run's lease.
export async function giveUp(sql: Sql, a: { batchId: string; run: string; reason: string; itemError: string }): Promise<boolean> {
  return endInTransaction(sql, async (t, lastTry) => {
    const given = await giveUpOnce(t, a);
    if (given) {
      await noLateRuns(t, a.batchId, lastTry);
      await writeEndEvent(t, a.batchId);
    }
    return given;
  });
}

async function giveUpOnce(sql: Sql, a: { batchId: string; run: string; reason: string; itemError: string }): Promise<boolean> {
  const [r] = await sql<{ given_up: number }[]>`with gone as (
      ${endRuns(sql, a.batchId, a.run, sql`true`)}
    ), own as (
      update leasehold_batches
      set status = 'failed', reason = ${storableText(a.reason)}, finished_at = now(), live_runs = 0
      where id = ${a.batchId} and status = 'open' and ${a.run}::uuid in (select id from gone)
      returning id
    ), failed as (
      update leasehold_items i set state = 'failed', error = ${storableText(a.itemError)}, run_id = ${a.run}, updated_at = now()
      where i.batch_id = ${a.batchId} and i.state in ('pending', 'running', 'waiting') and exists (select 1 from own)
      returning 1
    )
    select (select count(*) from own)::int as given_up, (select count(*) from failed)::int as items`;
  return r.given_up === 1;
}

// Finishes the batch once no item is pending, running or waiting: succeeded, or failed when any item
// failed — or, when the batch tolerates failures, when more items failed than it allows (the
// reason then says so). Any run of the batch holding its lease can, and only once (status must
// still be open): every run row of the batch is deleted first, so the other runs stop.
export async function finishBatch(sql: Sql, batchId: string, run: string): Promise<BatchStatus | undefined> {
  return endInTransaction(sql, async (t, lastTry) => {
    const [r] = await t<{ status: BatchStatus }[]>`${finishStatement(t, { batchId, run })}`;
    if (r) {
      await noLateRuns(t, batchId, lastTry);
      await writeEndEvent(t, batchId);
    }
    return r?.status;
  });
}

/**
 * {@link finishBatch} as a fragment. "No item pending or running" is two look-ups, each of the
 * first entry of the partial index its state has, in that index's order (one test of `state in
 * (…)` let a planner that thought the batch small walk all its items, and a plain `not exists`
 * let one that thought it large scan the table until it met a pending item). The
 * failed count reads the batch's failed items only; the counts are stored on the row.
 */
export function finishStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  const idle = sql`(select run_after from leasehold_items where batch_id = ${batchId} and state = 'pending'
           order by run_after limit 1) is null
      and (select batch_id from leasehold_items where batch_id = ${batchId} and state = 'running'
           order by batch_id limit 1) is null
      and not ${anyWaiting(sql, batchId)}
      and not (select reading from leasehold_batches where id = ${batchId})`;
  return sql`with gone as (
      ${endRuns(sql, batchId, run, idle)}
    )
    update leasehold_batches b
    set status = case when (b.allowed_failures is null and n.failed > 0) or n.failed > b.allowed_failures
          then 'failed' else 'succeeded' end,
        reason = case when n.failed > b.allowed_failures then ${toleranceReason(sql)} else b.reason end,
        final_counts = jsonb_build_object('pending', 0, 'running', 0, 'done', b.total - n.failed, 'failed', n.failed),
        finished_at = now(), live_runs = 0
    from (select count(*)::int as failed from leasehold_items where batch_id = ${batchId} and state = 'failed') n
    where b.id = ${batchId} and b.status = 'open' and ${run}::uuid in (select id from gone)
    returning b.status`;
}

// The reason of a batch ended by its tolerance, from `b` (the batch row) and `n.failed`.
function toleranceReason(sql: Sql) {
  return sql`'more items failed than tolerated: ' || n.failed || ' failed, ' || b.allowed_failures || ' tolerated ('
    || case when b.tolerated_count is not null then 'count ' || b.tolerated_count
            else b.tolerated_percent || ' % of ' || b.total || ' items' end || ')'`;
}

/** What {@link endIntolerable} did. */
export interface IntolerableEnd {
  /** The batch ended `failed` by this statement. */
  ended: boolean;
  /** Items put back to pending (running or claimed when it ended). */
  givenBack: number;
  /** The batch's failed items as counted by the statement. */
  failed: number;
  /**
   * Failed items the batch tolerates now: its count, or its percent of the items stored so far;
   * null when it has no tolerance, or when its tolerance is a percent and its source is still
   * read (a percent ends a batch early only once its total is known: docs/design.md, "End").
   */
  allowed: number | null;
}

// Ends the batch `failed` at once when more of its items have failed than its tolerance allows
// (a batch without one is never ended here), with the reason; the items still running under
// any of its runs (executing or claimed ahead) go back to pending with their attempt given
// back (the end interrupted them), pending ones stay pending. The failed count is the batch's,
// shared by all its runs: every run checks it after each move that failed an item, so the run
// whose move passes the allowance (or a later one) ends the batch, once (every run row is
// deleted first; a second end finds none). A percent tolerance is judged only once the batch's
// source has been read (its total is final; a percent of the first pages would end a healthy
// batch at a few early failures); a count applies at once. It answers the allowance it judged
// by, which the run keeps (docs/design.md, "End").
// The give-back is a second statement of the end's transaction: the end's deletes wait for the
// moves in flight on the run rows, and a claim among them (pending to running, committed after
// the end's snapshot) is seen only by a later snapshot; in the end's own statement such items
// stayed running in the ended batch (docs/design.md, "Fan-out").
export async function endIntolerable(sql: Sql, batchId: string, run: string): Promise<IntolerableEnd> {
  return endInTransaction(sql, async (t, lastTry) => {
    const [r] = await t<
      { ended: number; failed: number; allowed: number | null }[]
    >`${endIntolerableStatement(t, { batchId, run })}`;
    if (r.ended === 1) await noLateRuns(t, batchId, lastTry);
    const givenBack = r.ended === 1 ? (await t`${giveBackRunningStatement(t, { batchId })}`).count : 0;
    if (r.ended === 1) await writeEndEvent(t, batchId);
    return { ended: r.ended === 1, givenBack, failed: r.failed, allowed: r.allowed };
  });
}

/** The end of {@link endIntolerable} as a fragment (the plan test reads its plan). */
export function endIntolerableStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with n as materialized (
      select count(*)::int as failed from leasehold_items where batch_id = ${batchId} and state = 'failed'
    ), a as materialized (
      select case when tolerated_percent is not null and reading then null else allowed_failures end as allowed
      from leasehold_batches where id = ${batchId}
    ), gone as (
      ${endRuns(sql, batchId, run, sql`(select failed from n) > (select allowed from a)`)}
    ), ended as (
      update leasehold_batches b
      set status = 'failed', reason = ${toleranceReason(sql)}, finished_at = now(), live_runs = 0
      from n
      where b.id = ${batchId} and b.status = 'open' and ${run}::uuid in (select id from gone)
      returning b.id
    )
    select (select count(*) from ended)::int as ended, (select failed from n) as failed, (select allowed from a) as allowed`;
}

/** What {@link endCompleted} did. */
export interface CompletedEnd {
  /** The batch ended `succeeded` by this call. */
  ended: boolean;
  /** Done items the batch's runs reported so far (its `done_seen`, a count that may run high). */
  seen: number;
}

// Early completion (docs/design.md, "End"): the run adds the `done` items its flush stored to the
// batch's `done_seen` (fenced on its lease, one row), and once that reaches the batch's
// `min_succeeded` the items are counted exactly and, when at least that many are done, the batch
// ends `succeeded` at once with a reason saying so; the items still running under any of its runs
// go back to pending with their attempt given back (their work is told to stop), and pending ones
// stay pending, never run. Ended once, like the end by tolerance (every run row is deleted first;
// a second end finds none). `done_seen` is the cheap trigger, never the judge: a move whose answer
// was lost and that is sent again counts twice there, and only costs an exact count early.
// The count is a statement of its own, committed before the end's transaction: it locks the
// batch row, and the end then deletes run rows, which must never be locked after their batch's
// row in one transaction (docs/design.md, "Lock order").
export async function endCompleted(sql: Sql, a: { batchId: string; run: string; done: number }): Promise<CompletedEnd> {
  const [seen] = await sql<{ seen: number; enough: boolean }[]>`${doneSeenStatement(sql, a)}`;
  if (!seen?.enough) return { ended: false, seen: seen?.seen ?? 0 };
  const ended = await endInTransaction(sql, async (t, lastTry) => {
    const [r] = await t<{ ended: number }[]>`${endCompletedStatement(t, a)}`;
    if (r.ended === 1) {
      await noLateRuns(t, a.batchId, lastTry);
      await t`${giveBackRunningStatement(t, { batchId: a.batchId })}`;
      await writeEndEvent(t, a.batchId);
    }
    return r.ended === 1;
  });
  return { ended, seen: seen.seen };
}

/** The count of {@link endCompleted} as a fragment (the plan test reads its plan): one row, fenced on the run. */
export function doneSeenStatement(sql: Sql, { batchId, run, done }: { batchId: string; run: string; done: number }) {
  return sql`update leasehold_batches set done_seen = done_seen + ${done}::int
    where id = ${batchId} and status = 'open' and min_succeeded is not null
      and exists (select 1 from leasehold_runs where id = ${run})
    returning done_seen as seen, done_seen >= min_succeeded as enough`;
}

/**
 * The end of {@link endCompleted} as a fragment (the plan test reads its plan): the done items
 * are counted up to `min_succeeded` (a LIMIT), read only once `done_seen` says enough.
 */
export function endCompletedStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with m as materialized (
      select min_succeeded as n from leasehold_batches where id = ${batchId} and status = 'open'
    ), d as materialized (
      select count(*)::int as done from (
        select 1 from leasehold_items where batch_id = ${batchId} and state = 'done'
        limit coalesce((select n from m), 0)) x
    ), gone as (
      ${endRuns(sql, batchId, run, sql`(select done from d) >= (select n from m)`)}
    ), ended as (
      update leasehold_batches b
      set status = 'succeeded', finished_at = now(), live_runs = 0, reading = false,
          reason = 'completed early: minSucceeded ' || b.min_succeeded || ' reached'
      where b.id = ${batchId} and b.status = 'open' and ${run}::uuid in (select id from gone)
      returning b.id
    )
    select (select count(*) from ended)::int as ended`;
}

/**
 * The give-back of {@link endIntolerable} as a fragment (the plan test reads its plan): the
 * items of the batch still running go back to pending with their attempt given back, due now
 * at the latest. Sent only in the transaction that just ended the batch.
 */
export function giveBackRunningStatement(sql: Sql, { batchId }: { batchId: string }) {
  return sql`update leasehold_items i
    set state = 'pending', attempts = greatest(i.attempts - 1, 0), run_after = greatest(i.run_after, now()),
        updated_at = now()
    where i.batch_id = ${batchId} and i.state = 'running'`;
}

// Whether the run still holds its lease, how long until the batch's next pending item is due
// (ms, by the database clock; null when none is pending), how many runs the batch has, and
// whether its source is still being read (more items are coming), and whether any item waits
// (docs/design.md, "Waiting items: callbacks and sleeps").
export async function waitState(
  sql: Sql,
  batchId: string,
  run: string,
): Promise<{ owned: boolean; dueInMs: number | null; liveRuns: number; reading: boolean; waiting: boolean }> {
  const [r] = await sql<
    { owned: boolean; due_in_ms: number | null; live_runs: number; reading: boolean; waiting: boolean }[]
  >`${waitStateStatement(sql, { batchId, run })}`;
  return { owned: r.owned, dueInMs: r.due_in_ms, liveRuns: r.live_runs ?? 0, reading: r.reading, waiting: r.waiting };
}

/** {@link waitState} as a fragment (the plan test reads its plan). */
export function waitStateStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`select
      exists (select 1 from leasehold_runs where id = ${run}) as owned,
      (select greatest(0, extract(epoch from run_after - now()) * 1000)::float8 from leasehold_items
        where batch_id = ${batchId} and state = 'pending' order by run_after limit 1) as due_in_ms,
      (select live_runs from leasehold_batches where id = ${batchId}) as live_runs,
      coalesce((select reading from leasehold_batches where id = ${batchId}), false) as reading,
      ${anyWaiting(sql, batchId)} as waiting`;
}
