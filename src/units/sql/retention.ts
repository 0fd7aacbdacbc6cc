// Statements of outbox retention (docs/design.md, "Retention"): delivered outbox messages and
// their deliveries, deleted once older than the retention period (database clock).
import type { Sql } from '../../store/index.js';

/** What one chunk of {@link deleteDeliveredOutbox} did. */
export interface OutboxChunk {
  /** Messages read (at most the limit), whatever became of them. */
  scanned: number;
  /** The highest message id read, as decimal text (a bigint: exact past 2^53); null when none was. */
  last: string | null;
  /** Messages deleted, and their deliveries (deleted by the cascade). */
  messages: number;
  deliveries: number;
  /** A message read was newer than the cutoff, or fewer than the limit were left: nothing older follows. */
  reached: boolean;
}

// Reads the next `limit` messages after id `after` (a primary-key range: ids grow with
// created_at) and deletes those of them that were assigned, were created more than `days` days
// ago, and have no undelivered delivery, with their deliveries (cascade); a message another
// transaction holds is skipped. Messages still to deliver and unassigned ones are never touched.
export async function deleteDeliveredOutbox(sql: Sql, a: { days: number; after: string; limit: number }): Promise<OutboxChunk> {
  // Every look-up is a probe of a primary key: the scanned ids as an array, each message's
  // undelivered deliveries as a subquery with a limit (a semi- or anti-join let the planner hash
  // whole tables), the locked rows deleted by ctid.
  const [r] = await sql<OutboxChunk[]>`with scan as materialized (
      select id, created_at, assigned_at from leasehold_outbox
      where id > ${a.after}::bigint order by id limit ${a.limit}
    ), expired as (
      select o.ctid, o.id from leasehold_outbox o
      where o.id = any(array(
          select s.id from scan s
          where s.assigned_at is not null and s.created_at < now() - make_interval(days => ${a.days})
            and (select 1 from leasehold_outbox_deliveries d
                 where d.message_id = s.id and d.delivered_at is null limit 1) is null))
      for update skip locked
    ), gone as (
      delete from leasehold_outbox where ctid = any(array(select ctid from expired)) returning id
    )
    select (select count(*) from scan)::int as scanned,
      (select max(id) from scan)::text as last,
      (select count(*) from gone)::int as messages,
      (select count(*) from leasehold_outbox_deliveries where message_id = any(array(select id from gone)))::int as deliveries,
      (select count(*) < ${a.limit} or bool_or(created_at >= now() - make_interval(days => ${a.days})) from scan) as reached`;
  return r;
}
