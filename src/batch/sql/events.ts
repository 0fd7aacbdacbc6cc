// Statements of Batch Finished events (leasehold_batch_events, migration 019; docs/design.md,
// "Events"). The row is written by the transaction that ends a batch, after its end statement;
// senders take rows with SKIP LOCKED and push their due time on by a claim window in the same
// statement, so no sender holds a lock or a transaction across a send, two senders do not take
// one row at once, and a sender that dies leaves the row to the next after the window. Every
// comparison of time is with now().
import type { Sql } from '../../store/index.js';
import { storableText } from '../values.js';
import { RESULTS_MAX_TRIES } from './results.js';
import type { Usage } from '../usage.js';

// The writes of events, by the transactions that end batches, are event-writes.ts: every worker
// that finishes a batch loads them, the senders' statements below only the senders.
export { cancelEventsStatement, writeCancelEvents, writeEndEvent } from './event-writes.js';

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
