// The statements an operator steers an open batch with (leasehold_batches, migration 030;
// docs/design.md, "Pause, deadline and startBy"): pause and resume, the deadline, and the read of
// the batches past their deadline. Each changes an open batch only and answers its status
// (undefined: no such batch). The runs learn of a pause at their next beat (sql/runs.ts, `beat`).
import type { Sql } from '../../store/index.js';
import type { BatchStatus } from '../types.js';
import { RUN_ITEMS, statusAfter } from './shared.js';

// Pauses an open batch: paused_at is set (kept when it was paused already) and its target goes to
// 0, so no takeover, dispatch or fleet process joins it and its tenant no longer counts it as
// wanting runs (the trigger of migration 016). Its runs hand off at their next beat. Items are
// untouched. Answers the batch's status, undefined when there is no such batch.
export async function pauseBatch(sql: Sql, batchId: string): Promise<BatchStatus | undefined> {
  return statusAfter(
    sql,
    batchId,
    sql`b as (
      update leasehold_batches set paused_at = coalesce(paused_at, now()), target = 0
      where id = ${batchId} and status = 'open'
      returning status
    )`,
  );
}

// Resumes a paused open batch: paused_at cleared, its target back to min(max_concurrency, one run
// per RUN_ITEMS items), and its dispatch mark cleared, so the next scheduler run (or the caller)
// sends it workers at once. A batch that is not paused is left as it is. Answers its status.
export async function resumeBatch(sql: Sql, batchId: string): Promise<BatchStatus | undefined> {
  return statusAfter(
    sql,
    batchId,
    sql`b as (
      update leasehold_batches
      set paused_at = null, dispatched_at = null,
          target = least(max_concurrency, greatest(1, ceil(total / ${RUN_ITEMS}::float8)::int))
      where id = ${batchId} and status = 'open' and paused_at is not null
      returning status
    )`,
  );
}

/** A deadline as a statement takes it: an instant, or ms from the batch's start; null clears it. */
export type DeadlineArg = { at: Date } | { afterStartMs: number } | null;

// Sets (or clears) an open batch's deadline: an instant, or `afterStartMs` after its created_at
// (database clock). A deadline already past ends the batch at the scheduler's next pass or a
// run's next beat. Answers its status, undefined when there is no such batch.
export async function setDeadline(sql: Sql, batchId: string, d: DeadlineArg): Promise<BatchStatus | undefined> {
  const at = d !== null && 'at' in d ? d.at : null;
  const ms = d !== null && 'afterStartMs' in d ? d.afterStartMs : null;
  return statusAfter(
    sql,
    batchId,
    sql`b as (
      update leasehold_batches
      set deadline_at = case when ${ms}::float8 is not null
          then created_at + make_interval(secs => ${ms}::float8 / 1000.0) else ${at}::timestamptz end
      where id = ${batchId} and status = 'open'
      returning status
    )`,
  );
}

// Open batches whose deadline has passed (database clock), soonest first, at most `limit`: the
// first entries of the partial index leasehold_batches_deadline, never a scan of the batches.
// Reads only.
export async function pastDeadline(sql: Sql, limit: number): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`${pastDeadlineStatement(sql, { limit })}`;
  return rows.map((r) => r.id);
}

/** {@link pastDeadline} as a fragment (a test reads its plan). */
export function pastDeadlineStatement(sql: Sql, { limit }: { limit: number }) {
  return sql`select id from leasehold_batches
    where status = 'open' and deadline_at is not null and deadline_at <= now()
    order by deadline_at limit ${limit}`;
}
