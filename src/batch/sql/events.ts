// Statements of Batch Finished events (leasehold_batch_events, migration 019; docs/design.md,
// "Events"). The row is written by the transaction that ends a batch, after its end statement;
// senders take rows with SKIP LOCKED and push their due time on by a claim window in the same
// statement, so no sender holds a lock or a transaction across a send, two senders do not take
// one row at once, and a sender that dies leaves the row to the next after the window. Every
// comparison of time is with now().
import type postgres from 'postgres';
import type { Sql } from '../../store/index.js';
import { storableText } from '../values.js';
import { RESULTS_MAX_TRIES } from './results.js';
import type { Usage } from '../usage.js';

/** The counts of an event's detail: items by state when the batch ended. */
export interface EventCounts {
  total: number;
  pending: number;
  running: number;
  done: number;
  failed: number;
}

/**
 * The `detail` of a `Batch Finished` event, as stored in the ending transaction and sent (to
 * EventBridge, and in the webhook's body) unchanged on every send, but for `usage`, which the
 * sender reads at each send.
 */
export interface BatchFinishedDetail {
  /** The event's stable id (a UUID): the same on every send; a chained batch's request key is made from it. */
  id: string;
  batchId: string;
  tenant: string;
  datasource: string;
  job: string;
  requestKey: string;
  /** How the batch ended: `succeeded`, `failed` or `cancelled`. */
  status: 'succeeded' | 'failed' | 'cancelled';
  /** Why it failed when it was given up or ended by its tolerance; else null. */
  reason: string | null;
  counts: EventCounts;
  /**
   * Where the batch's results were written: `{ manifest: "s3://bucket/key" }`, or null when it
   * asked for none, was cancelled, or its writes gave up. An event of a batch whose results are
   * still being written is held until they are (docs/design.md, "Events").
   */
  results: { manifest: string } | null;
  /** Redrives before this end (0: its first end). */
  redrives: number;
  /**
   * What the batch's workers used, with an estimated cost (docs/design.md, "Usage and cost"), as
   * recorded when the event was sent: added by the sender, never stored in the row. A run of the
   * batch still ending then is not in it (`GET /batches/{id}` has the final figures).
   */
  usage?: Usage;
  /** ISO 8601, database clock. */
  createdAt: string;
  finishedAt: string;
  /**
   * The W3C `traceparent` of the span that started the batch (docs/design.md, "Traces"), present
   * when the batch has one: a consumer's span continues the batch's trace as its child (a chained
   * batch does). Absent: the batch was started without a trace context and without tracing.
   */
  traceparent?: string;
  /**
   * Only in an event as sent whose detail was past EventBridge's 256 KiB: the fields cut to fit
   * (`reason`, `results.manifest`, `requestKey`, `datasource`, `job`, `tenant`), each ending
   * with `…`. The stored detail is whole.
   */
  truncated?: string[];
}

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

// An event's batch still has results to write (a finished batch with a target, no manifest and
// tries left): its event waits, so the event can name where they are.
function resultsPending(sql: Sql) {
  return sql`exists (select 1 from leasehold_batches b where b.id = batch_id and b.results is not null
    and b.results_manifest is null and b.results_tries < ${RESULTS_MAX_TRIES} and b.status in ('succeeded', 'failed'))`;
}

// The event's detail with `results` as the batch has them now: the manifest once written, else null.
function detailWithResults(sql: Sql) {
  return sql`jsonb_set(e.detail, '{results}', coalesce((select jsonb_build_object('manifest', b.results_manifest)
    from leasehold_batches b where b.id = e.batch_id and b.results_manifest is not null), 'null'::jsonb))`;
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

/** An event a sender took: its id, detail and the sends (or deliveries) tried, this one included. */
export interface TakenEvent {
  id: string;
  detail: BatchFinishedDetail;
  attempts: number;
  /** The webhook's URL (only for {@link takeUnnotified}). */
  notifyUrl: string | null;
}

/** What {@link takeUnsent} and {@link takeUnnotified} take. */
export interface TakeArgs {
  /** Most rows taken. */
  limit: number;
  /** How long the rows are the taker's (their due time is pushed on by it), ms. */
  claimMs: number;
  /** Only this batch's events (the run that ended it). */
  batchId?: string;
}

// Takes up to `limit` events not yet sent whose send is due (oldest due first; of one batch
// with `batchId`), skipping rows another transaction holds, and pushes their due time on by
// claimMs with one more attempt counted: the partial index of unsent events (or the batch's).
export async function takeUnsent(sql: Sql, a: TakeArgs): Promise<TakenEvent[]> {
  const rows = await sql<{ id: string; detail: BatchFinishedDetail; send_attempts: number }[]>`
    update leasehold_batch_events e
    set send_after = now() + make_interval(secs => ${a.claimMs}::float8 / 1000), send_attempts = e.send_attempts + 1,
      detail = ${detailWithResults(sql)}
    where e.id = any (array(
      select id from leasehold_batch_events
      where sent_at is null and send_after <= now() ${a.batchId === undefined ? sql`` : sql`and batch_id = ${a.batchId}`}
        and not ${resultsPending(sql)}
      order by send_after limit ${a.limit}
      for update skip locked))
      and e.sent_at is null
    returning e.id, e.detail, e.send_attempts`;
  return rows.map((r) => ({ id: r.id, detail: r.detail, attempts: r.send_attempts, notifyUrl: null }));
}

// Marks events sent (PutEvents accepted them), once.
export async function markSent(sql: Sql, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await sql`update leasehold_batch_events set sent_at = now(), send_error = null
    where id in (select x::uuid from jsonb_array_elements_text(${sql.json(ids as string[])}) as x) and sent_at is null`;
}

/** A failed send or delivery: which event, why, and when to try again (ms from now). */
export interface EventFailure {
  id: string;
  error: string;
  retryInMs: number;
}

// Records a failed send: the error, and the next try at now() + retryInMs.
export async function markSendFailed(sql: Sql, f: EventFailure): Promise<void> {
  await sql`update leasehold_batch_events
    set send_error = ${storableText(f.error, 1000)}, send_after = now() + make_interval(secs => ${f.retryInMs}::float8 / 1000)
    where id = ${f.id} and sent_at is null`;
}

// Takes up to `limit` webhooks not yet delivered whose delivery is due, as takeUnsent does:
// the partial index of undelivered webhooks (or the batch's events).
export async function takeUnnotified(sql: Sql, a: TakeArgs): Promise<TakenEvent[]> {
  const rows = await sql<{ id: string; detail: BatchFinishedDetail; notify_attempts: number; notify_url: string }[]>`
    update leasehold_batch_events e
    set notify_after = now() + make_interval(secs => ${a.claimMs}::float8 / 1000), notify_attempts = e.notify_attempts + 1,
      detail = ${detailWithResults(sql)}
    where e.id = any (array(
      select id from leasehold_batch_events
      where notify_url is not null and notified_at is null and notify_after <= now()
        ${a.batchId === undefined ? sql`` : sql`and batch_id = ${a.batchId}`}
        and not ${resultsPending(sql)}
      order by notify_after limit ${a.limit}
      for update skip locked))
      and e.notified_at is null
    returning e.id, e.detail, e.notify_attempts, e.notify_url`;
  return rows.map((r) => ({ id: r.id, detail: r.detail, attempts: r.notify_attempts, notifyUrl: r.notify_url }));
}

// Marks a webhook delivered (its URL answered 2xx), once.
export async function markNotified(sql: Sql, id: string): Promise<void> {
  await sql`update leasehold_batch_events set notified_at = now(), notify_error = null where id = ${id} and notified_at is null`;
}

// Records a failed webhook delivery: the error, and the next try at now() + retryInMs.
export async function markNotifyFailed(sql: Sql, f: EventFailure): Promise<void> {
  await sql`update leasehold_batch_events
    set notify_error = ${storableText(f.error, 1000)}, notify_after = now() + make_interval(secs => ${f.retryInMs}::float8 / 1000)
    where id = ${f.id} and notified_at is null`;
}

/** One event row as {@link batchEvents} reads it (tests, `GET /batches/{id}`). */
export interface EventRow {
  id: string;
  detail: BatchFinishedDetail;
  createdAt: Date;
  sentAt: Date | null;
  sendAttempts: number;
  sendError: string | null;
  notifyUrl: string | null;
  notifiedAt: Date | null;
  notifyAttempts: number;
  notifyError: string | null;
}

// A batch's events, oldest first (the batch's index).
export async function batchEvents(sql: Sql, batchId: string): Promise<EventRow[]> {
  return sql<EventRow[]>`select id, detail, created_at as "createdAt", sent_at as "sentAt", send_attempts as "sendAttempts",
      send_error as "sendError", notify_url as "notifyUrl", notified_at as "notifiedAt", notify_attempts as "notifyAttempts",
      notify_error as "notifyError"
    from leasehold_batch_events where batch_id = ${batchId} order by created_at, id`;
}
