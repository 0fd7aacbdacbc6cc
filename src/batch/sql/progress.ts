// Statements the dashboard reads (src/batch/progress.ts): read-only, every age and rate from the
// database clock.
import type { Sql } from '../../store/index.js';

// How long a batch has lived: until it finished, or until now while open, ms; undefined: no batch.
export async function batchSpan(sql: Sql, id: string): Promise<{ createdAt: Date; spanMs: number } | undefined> {
  const [r] = await sql<{ created_at: Date; span_ms: number }[]>`select created_at,
      (extract(epoch from coalesce(finished_at, now()) - created_at) * 1000)::float8 as span_ms
    from leasehold_batches where id = ${id}`;
  return r && { createdAt: r.created_at, spanMs: r.span_ms };
}

// Counts a batch's finished items (done, failed) by when they last finished, in buckets of
// `bucketMs` from the batch's creation; bucket i covers [i·bucketMs, (i+1)·bucketMs).
export async function finishedBuckets(
  sql: Sql,
  id: string,
  bucketMs: number,
): Promise<{ bucket: number; done: number; failed: number }[]> {
  return sql<{ bucket: number; done: number; failed: number }[]>`${finishedBucketsStatement(sql, id, bucketMs)}`;
}

/** The read of {@link finishedBuckets} as a fragment (the plan test reads its plan with EXPLAIN). */
export function finishedBucketsStatement(sql: Sql, id: string, bucketMs: number) {
  return sql`select
      greatest(0, floor(extract(epoch from i.updated_at - b.created_at) * 1000 / ${bucketMs}))::int as bucket,
      count(*) filter (where i.state = 'done')::int as done,
      count(*) filter (where i.state = 'failed')::int as failed
    from leasehold_items i join leasehold_batches b on b.id = i.batch_id
    where i.batch_id = ${id} and i.state in ('done', 'failed')
    group by 1 order by 1`;
}

// Per batch: its age (ms), and items finished per second: over the last `windowMs` (or its whole
// life when younger) while open, over its whole life once finished.
export async function batchActivity(
  sql: Sql,
  ids: string[],
  windowMs: number,
): Promise<{ id: string; age_ms: number; per_second: number }[]> {
  return sql<{ id: string; age_ms: number; per_second: number }[]>`${batchActivityStatement(sql, ids, windowMs)}`;
}

/** The read of {@link batchActivity} as a fragment (the plan test reads its plan with EXPLAIN). */
export function batchActivityStatement(sql: Sql, ids: string[], windowMs: number) {
  return sql`select b.id,
      (extract(epoch from now() - b.created_at) * 1000)::float8 as age_ms,
      (case when b.status = 'open' then
        (select count(*) from leasehold_items i where i.batch_id = b.id and i.state in ('done', 'failed')
           and i.updated_at > now() - make_interval(secs => ${windowMs / 1000}))
        / greatest(least(extract(epoch from now() - b.created_at), ${windowMs / 1000}), 1)
      else
        (select count(*) from leasehold_items i where i.batch_id = b.id and i.state in ('done', 'failed'))
        / greatest(extract(epoch from b.finished_at - b.created_at), 1)
      end)::float8 as per_second
    from leasehold_batches b where b.id in (select jsonb_array_elements_text(${sql.json(ids)})::uuid)`;
}
