// The writes of Batch Finished events (leasehold_batch_events, migration 019; docs/design.md,
// "Events"): the row the transaction that ends a batch writes, after its end statement. Apart
// from the senders' statements (events.ts, which re-exports these), so a worker that finishes a
// batch loads only these (docs/design.md, "Cold starts and code splitting").
import type postgres from 'postgres';
import type { Sql } from '../../store/index.js';

// A batch's counts for its event, from `b` (its row): those its finish stored, else counted from
// its items (one index range of the batch, read once: `offset 0` keeps the planner from pulling
// `c` up into each of its four uses, which counted the items four times). Sent after the end
// statement in the same transaction, so a move the end waited for, committed after the end's
// snapshot, is counted.
function eventCounts(sql: Sql) {
  return sql`(select jsonb_build_object('total', b.total,
      'pending', coalesce((c ->> 'pending')::int, 0), 'running', coalesce((c ->> 'running')::int, 0),
      'done', coalesce((c ->> 'done')::int, 0), 'failed', coalesce((c ->> 'failed')::int, 0))
    from (select coalesce(b.final_counts, (select jsonb_object_agg(s.state, s.n) from
            (select state, count(*) as n from leasehold_items where batch_id = b.id group by state) s)) as c
          offset 0) x)`;
}

// Writes the Batch Finished event of a batch that just ended, in the transaction that ended it
// (the caller holds the batch row): one row with a fresh id, its detail built from the batch row
// (with `traceparent`, the batch's trace context, when it has one), and the start's notify URL.
// Only a batch no longer open gets one.
export async function writeEndEvent(tx: Sql, batchId: string): Promise<void> {
  await tx`${insertEndEvents(tx, { status: tx`b.status`, finishedAt: tx`coalesce(b.finished_at, now())` }, tx`b.id = ${batchId} and b.status <> 'open'`)}`;
}

// Writes the Batch Finished events of a chunk of open batches a bulk cancel is about to end (at
// most `ids.length` rows, none for a batch not open in this statement's snapshot), each as
// writeEndEvent writes it once the batch is cancelled: status `cancelled`, finishedAt now() (the
// transaction's, as the cancel's finished_at). Sent after the chunk's run rows are deleted (so
// a move the delete waited for is counted) and before its batch rows are locked, so the tenant
// rows the cancel's trigger locks are held for one statement, not for this one; the cancel
// deletes the events of batches it then did not end (src/batch/sql/cancels.ts). Answers the
// events' ids.
export async function writeCancelEvents(tx: Sql, ids: readonly string[]): Promise<string[]> {
  const rows = await tx<{ id: string }[]>`${cancelEventsStatement(tx, ids)}`;
  return rows.map((r) => r.id);
}

/** {@link writeCancelEvents} as a fragment (the plan test reads its plan): answers `{ id }` rows, the events' ids. */
export function cancelEventsStatement(tx: Sql, ids: readonly string[]) {
  return tx`${insertEndEvents(
    tx,
    { status: tx`'cancelled'`, finishedAt: tx`now()` },
    tx`b.id in (select x::uuid from jsonb_array_elements_text(${tx.json(ids as string[])}) as x) and b.status = 'open'`,
  )} returning id`;
}

// The insert of Batch Finished events of the batches `b` that `where` keeps, with `as` the status and
// finish instant in their detail; each a fresh id (a volatile column of the subquery: one per row).
function insertEndEvents(tx: Sql, as: { status: postgres.Fragment; finishedAt: postgres.Fragment }, where: postgres.Fragment) {
  return tx`insert into leasehold_batch_events (id, batch_id, tenant, detail, notify_url)
    select b.event_id, b.id, b.tenant, jsonb_build_object(
        'id', b.event_id, 'batchId', b.id, 'tenant', b.tenant, 'datasource', b.datasource, 'job', b.job,
        'requestKey', b.request_key, 'status', ${as.status}, 'reason', b.reason, 'counts', ${eventCounts(tx)},
        'results', null, 'redrives', b.redrives,
        'createdAt', to_char(b.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'finishedAt', to_char(${as.finishedAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
        || case when b.trace_context is null then '{}'::jsonb
           else jsonb_build_object('traceparent', split_part(b.trace_context, ' ', 1)) end,
      b.notify_url
    from (select b.*, gen_random_uuid() as event_id from leasehold_batches b where ${where}) b`;
}
