// Statements of retention (docs/design.md, "Retention"): finished batches, their items and
// redrives, and deferred trigger firings, deleted once older than the retention period, and usage
// rows once older than theirs. Every cutoff is `now() - make_interval(days => …)` (database
// clock). Each statement touches at most its own limit of rows, found through an index whatever
// the statistics say, and skips rows another transaction holds (SKIP LOCKED): retention never
// waits for a worker, and a worker waits for it at most one short statement (a redrive of the
// very batch being deleted, a run's report of a usage row being deleted).
import type { Sql } from '../../store/index.js';

// Ids of batches finished (succeeded, failed, cancelled) more than `days` days ago, oldest
// first, at most `limit`, leaving out `skip`: a range of the partial index over finished batches
// by finished_at. Reads only.
export async function expiredBatches(sql: Sql, a: { days: number; limit: number; skip: string[] }): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`select id from leasehold_batches
    where status <> 'open' and finished_at < now() - make_interval(days => ${a.days})
      and id <> all(${`{${a.skip.join(',')}}`}::uuid[])
    order by finished_at limit ${a.limit}`;
  return rows.map((r) => r.id);
}

// Deletes at most `limit` items of batch `batchId`, in key order after `after`, only while that
// batch is finished more than `days` days ago: the batch row is share-locked for the statement
// (skipped when locked: a redrive holding it wins, and a redrive waits for at most this
// statement), so a batch that was redriven (open again) loses no item. The items are an index
// range of the primary key (batch_id, key) from `after`, so a chunk reads about its own size of
// rows and not the dead entries of chunks deleted before it; items another transaction holds are
// skipped. Returns how many it deleted and the last key it reached (null when none).
export async function deleteExpiredItems(
  sql: Sql,
  a: { batchId: string; days: number; after: string; limit: number },
): Promise<{ deleted: number; last: string | null }> {
  // Its own transaction with synchronous_commit off: the pass waits for no flush of the
  // write-ahead log it writes (the runs' commits do not queue behind its flushes), and a chunk lost
  // in a crash is deleted again by the next pass (idempotent). SET LOCAL: no session setting
  // (inside a savepoint it holds to the end of the caller's transaction).
  // Inside a caller's transaction (a test holding a lock timeout), a savepoint instead.
  const within = (sql as { savepoint?: Sql['begin'] }).savepoint?.bind(sql) ?? sql.begin.bind(sql);
  const [r] = await within(async (tx) => {
    await tx`set local synchronous_commit = off`;
    return tx<{ deleted: number; last: string | null }[]>`with batch as (
      select id from leasehold_batches
      where id = ${a.batchId} and status <> 'open' and finished_at < now() - make_interval(days => ${a.days})
      for share skip locked
    ), gone as (
      delete from leasehold_items where ctid = any(array(
        select i.ctid from leasehold_items i
        where i.batch_id = (select id from batch) and i.key > ${a.after}
        order by i.key limit ${a.limit}
        for update skip locked))
      returning key
    )
    select count(*)::int as deleted, max(key) as last from gone`;
  });
  return r;
}

// Deletes batch `batchId` (its redrives go with it, a few rows, by cascade) only if it is
// finished more than `days` days ago and has no item left, so the cascade to leasehold_items
// deletes nothing: one primary-key probe of the batch, one of its items. Skipped when another
// transaction holds the row. Returns whether it deleted the batch, and its redrives.
export async function deleteEmptyBatch(
  sql: Sql,
  a: { batchId: string; days: number },
): Promise<{ deleted: boolean; redrives: number }> {
  const [r] = await sql<{ deleted: number; redrives: number }[]>`with batch as (
      select id from leasehold_batches b
      where id = ${a.batchId} and status <> 'open' and finished_at < now() - make_interval(days => ${a.days})
        and not exists (select 1 from leasehold_items i where i.batch_id = b.id)
      for update skip locked
    ), gone as (
      delete from leasehold_batches where id = (select id from batch) returning id
    )
    select (select count(*) from gone)::int as deleted,
      (select count(*) from leasehold_redrives where batch_id = (select id from gone))::int as redrives`;
  return { deleted: r.deleted === 1, redrives: r.redrives };
}

// Deletes at most `limit` deferred trigger firings kept more than `days` days (created_at),
// oldest first: a range of the created_at index; firings a scheduler is starting now (locked)
// are skipped. Returns how many it deleted.
export async function deleteExpiredDeferred(sql: Sql, a: { days: number; limit: number }): Promise<number> {
  const rows = await sql`delete from leasehold_deferred_starts where ctid = any(array(
      select ctid from leasehold_deferred_starts
      where created_at < now() - make_interval(days => ${a.days})
      order by created_at limit ${a.limit}
      for update skip locked))`;
  return rows.count;
}

// Up to `limit` tenants that have usage rows (leasehold_run_usage, migration 038; docs/design.md,
// "Usage and cost"), in order after `after`, each with whether its oldest row was recorded more
// than `days` days ago. A loose scan of the index on (tenant, recorded_at): one probe per tenant
// for the next tenant and one for its oldest row, never the rows between. Reads only.
export async function usageTenants(
  sql: Sql,
  a: { days: number; after: string; limit: number },
): Promise<{ tenant: string; expired: boolean }[]> {
  return sql<{ tenant: string; expired: boolean }[]>`with recursive t as (
      (select u.tenant from leasehold_run_usage u where u.tenant > ${a.after} order by u.tenant limit 1)
      union all
      select (select u.tenant from leasehold_run_usage u where u.tenant > t.tenant order by u.tenant limit 1)
      from t where t.tenant is not null
    ), page as (select tenant from t where tenant is not null limit ${a.limit})
    select page.tenant, coalesce((select u.recorded_at from leasehold_run_usage u where u.tenant = page.tenant
        order by u.recorded_at limit 1) < now() - make_interval(days => ${a.days}), false) as expired
    from page`;
}

// Deletes at most `limit` usage rows of tenant `tenant` recorded more than `days` days ago and
// not before `after` (the last instant a previous chunk reached, as text: exact to the
// microsecond), oldest first: a range of the index on (tenant, recorded_at) from `after`, so a
// chunk does not reread the dead entries of the chunks before it; rows another transaction holds
// (a run's own report replacing a takeover's estimate) are skipped. Its own transaction with
// synchronous_commit off, as an item chunk. Returns how many it deleted and the last instant it
// reached (null when none).
export async function deleteExpiredUsage(
  sql: Sql,
  a: { tenant: string; days: number; after: string; limit: number },
): Promise<{ deleted: number; last: string | null }> {
  const within = (sql as { savepoint?: Sql['begin'] }).savepoint?.bind(sql) ?? sql.begin.bind(sql);
  const [r] = await within(async (tx) => {
    await tx`set local synchronous_commit = off`;
    return tx<{ deleted: number; last: string | null }[]>`with gone as (
      delete from leasehold_run_usage where ctid = any(array(
        select u.ctid from leasehold_run_usage u
        where u.tenant = ${a.tenant} and u.recorded_at >= ${a.after}::text::timestamptz
          and u.recorded_at < now() - make_interval(days => ${a.days})
        order by u.recorded_at limit ${a.limit}
        for update skip locked))
      returning recorded_at
    )
    select count(*)::int as deleted, max(recorded_at)::text as last from gone`;
  });
  return r;
}
