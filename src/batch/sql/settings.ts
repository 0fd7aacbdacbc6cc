// The settings an open batch takes while it runs (leasehold_batches, and for a rate raise the
// due times of its pending items in leasehold_items): its most runs and its own rate limit. Each
// changes an open batch only, answers its status (undefined: no such batch), and is read by the
// runs at their next beat or token take (docs/design.md, "Fan-out" and "Rate limits").
import type { Sql } from '../../store/index.js';
import type { BatchStatus } from '../types.js';
import { RUN_ITEMS, statusAfter } from './shared.js';

// Sets how many runs a batch may have while it is open; the target follows (one run per
// RUN_ITEMS items, at most the new limit). Runs beyond it are told by their next beat
// (`surplus`) and hand off. Answers the batch's status, undefined when there is no such batch.
export async function setMaxConcurrency(sql: Sql, batchId: string, maxConcurrency: number): Promise<BatchStatus | undefined> {
  return statusAfter(
    sql,
    batchId,
    sql`b as (
      update leasehold_batches
      set max_concurrency = ${maxConcurrency},
          -- A paused batch keeps target 0 (migration 030): its resume sets the target from the new limit.
          target = case when paused_at is not null then 0
            else least(${maxConcurrency}::int, greatest(1, ceil(total / ${RUN_ITEMS}::float8)::int)) end
      where id = ${batchId} and status = 'open'
      returning status
    )`,
  );
}

// Sets an open batch's own rate limit (items per second), which every run's next token take
// reads (sql/rate.ts) and a run without a rate limit picks up at its next beat. Answers the
// batch's status, undefined when there is no such batch.
//
// A raise also brings forward the items given back for want of a token (pending, due later, no
// error: a retry's backoff and a Retry-After wait keep their error text, and their times): they
// were spaced at the old rate. With an old rate of the batch's own, the wait left is scaled by
// old / new; with the job's rate (unknown here), they are due at once, and the next claim gives
// them back again spaced at the new rate. The CTEs share one snapshot, so `old` reads the rate
// before the update.
export async function setRatePerSecond(sql: Sql, batchId: string, perSecond: number): Promise<BatchStatus | undefined> {
  return statusAfter(
    sql,
    batchId,
    sql`old as (
      select rate_per_second as rate from leasehold_batches where id = ${batchId} and status = 'open'
    ), b as (
      update leasehold_batches set rate_per_second = ${perSecond}::float8
      where id = ${batchId} and status = 'open'
      returning status
    ), sooner as (
      update leasehold_items i
      set run_after = now() + (i.run_after - now()) * coalesce((select rate from old) / ${perSecond}::float8, 0)
      where i.batch_id = ${batchId} and i.state = 'pending' and i.run_after > now() and i.error is null
        and coalesce((select rate from old) < ${perSecond}::float8, true) and exists (select 1 from b)
    )`,
  );
}
