// Statements of redrives (leasehold_redrives) and the batch and item changes a redrive makes
// (docs/design.md, "Batches").
import type { BatchStatus } from '../types.js';
import { RUN_ITEMS, type Tx } from './shared.js';

// Locks the batch row against takeovers, finishes, cancels and other redrives until commit, and
// reads its status as of the lock.
export async function lockBatch(tx: Tx, id: string): Promise<{ status: BatchStatus; sourceFailed: boolean } | undefined> {
  const [r] = await tx<{ status: BatchStatus; source_failed: boolean }[]>`
    select status, source_failed from leasehold_batches where id = ${id} for update`;
  return r && { status: r.status, sourceFailed: r.source_failed };
}

/** Most unfinished items {@link countUnfinished} counts: past it, the count is this (it sets a target of runs only). */
export const UNFINISHED_COUNTED = 100_000;

// Counts a finished batch's items its end left pending, running or waiting (a deadline or its
// failures ended it first), up to UNFINISHED_COUNTED of each: each through its own index (the
// pending and running items' partial indexes, the waits' primary key), never a walk of the batch
// (`test/store/plans.test.ts`, "redrive: unfinished items").
export function unfinishedStatement(sql: Tx, batchId: string) {
  return sql`select
      (select count(*) from (select 1 from leasehold_items where batch_id = ${batchId} and state = 'pending'
        limit ${UNFINISHED_COUNTED}) p)
      + (select count(*) from (select 1 from leasehold_items where batch_id = ${batchId} and state = 'running'
        limit ${UNFINISHED_COUNTED}) r)
      + (select count(*) from (select 1 from leasehold_waits where batch_id = ${batchId}
        limit ${UNFINISHED_COUNTED}) w) as n`;
}

/** {@link unfinishedStatement}'s count. */
export async function countUnfinished(tx: Tx, batchId: string): Promise<number> {
  const [r] = await tx<{ n: number }[]>`${unfinishedStatement(tx, batchId)}`;
  return Number(r.n);
}

/** One recorded redrive of a batch. */
export interface RedriveRow {
  number: number;
  idempotency_key: string | null;
  items: number;
  created_at: Date;
}

// Reads the redrive an idempotency key did on a batch, if any.
export async function redriveByKey(tx: Tx, batchId: string, key: string): Promise<RedriveRow | undefined> {
  const [r] = await tx<RedriveRow[]>`select number, idempotency_key, items, created_at from leasehold_redrives
    where batch_id = ${batchId} and idempotency_key = ${key}`;
  return r;
}

// Counts a batch's failed items (through the index of failed items).
export async function countFailed(tx: Tx, batchId: string): Promise<number> {
  const [r] = await tx<
    { n: number }[]
  >`select count(*) as n from leasehold_items where batch_id = ${batchId} and state = 'failed'`;
  return r.n;
}

// Puts a finished batch's failed items back to pending with fresh attempts, due now; only
// while the batch is finished (caller holds its row lock), so no run's move can meet them.
export async function resetFailed(tx: Tx, batchId: string): Promise<number> {
  const rows = await tx`update leasehold_items i
    set state = 'pending', attempts = 0, output = null, error = null, run_id = null, run_after = now(), updated_at = now()
    from leasehold_batches b
    where b.id = ${batchId} and b.status in ('succeeded', 'failed')
      and i.batch_id = b.id and i.state = 'failed'`;
  return rows.count;
}

// Whether retention has begun to delete the batch (fewer items than its total): one count of the
// batch's own items (a redrive is rare), read under the batch row lock the redrive holds, which a
// retention chunk share-locks too.
export async function partlyDeleted(tx: Tx, batchId: string): Promise<boolean> {
  const [r] = await tx<
    { gone: boolean }[]
  >`select (select count(*) from leasehold_items where batch_id = ${batchId}) < b.total as gone
    from leasehold_batches b where b.id = ${batchId}`;
  return r?.gone ?? false;
}

// Opens a finished batch again with no run, so the next takeover or dispatch joins it at once,
// and counts the redrive; its target counts the `items` redriven (one run per 100, at most its
// max_concurrency: it fans out again). Its results (to S3) are due again at its next end, under
// the same part names. Returns its number (undefined: not finished).
export async function reopenBatch(tx: Tx, batchId: string, items: number): Promise<number | undefined> {
  const [r] = await tx<{ redrives: number }[]>`update leasehold_batches
    set status = 'open', finished_at = null, final_counts = null, live_runs = 0, handed_off_at = null,
        target = least(max_concurrency, greatest(1, ceil(${items} / ${RUN_ITEMS}::float8)::int)),
        redrives = redrives + 1, stalled_runs = 0, reason = null, paused_at = null, deadline_at = null,
        results_manifest = null, results_started_at = null, results_tries = 0, results_error = null
    where id = ${batchId} and status in ('succeeded', 'failed')
    returning redrives`;
  return r?.redrives;
}

// Records a redrive; a second one with the same (batch, key) fails on the unique constraint.
export async function recordRedrive(
  tx: Tx,
  a: { batchId: string; number: number; key: string | null; items: number },
): Promise<RedriveRow> {
  const [r] = await tx<RedriveRow[]>`insert into leasehold_redrives (batch_id, number, idempotency_key, items)
    values (${a.batchId}, ${a.number}, ${a.key}, ${a.items})
    returning number, idempotency_key, items, created_at`;
  return r;
}
