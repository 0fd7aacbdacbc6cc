// Steering an open batch while it runs (docs/design.md, "Pause, deadline and startBy"; issue 39):
// pause and resume it, give it a deadline, and end the batches whose deadline has passed. The
// statements are sql/steer.ts's and, for the deadline's end, sql/ends.ts's.
import type { Sql } from '../store/index.js';
import { checkDeadline, getBatch, isUuid } from './batches.js';
import { BatchFinishedError, BatchNotFoundError } from './request-errors.js';
import * as q from './sql/index.js';
import type { BatchInfo, BatchStatus } from './types.js';

/** A deadline as a start or a PATCH gives it: an instant, or ms from the batch's start. */
export type DeadlineInput = { deadline: Date } | { deadlineMs: number };

function open(id: string, status: BatchStatus | undefined): void {
  if (!status) throw new BatchNotFoundError(id);
  if (status !== 'open') throw new BatchFinishedError(id, status);
}

/**
 * Pause an open batch: it keeps its items; no run joins it (takeover, dispatch and fleet
 * processes pass it by: its target is 0), and its runs hand off at their next beat as surplus
 * runs do — in-flight items finish, claimed ones go back with no attempt used. Pausing a paused
 * batch changes nothing. Resolves to the batch as it is then (`pausedAt` set).
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function pauseBatch(sql: Sql, id: string): Promise<BatchInfo> {
  open(id, isUuid(id) ? await q.pauseBatch(sql, id) : undefined);
  return getBatch(sql, id);
}

/**
 * Resume a paused batch: its target is `min(maxConcurrency, ceil(total / 100))` again and its
 * dispatch mark is cleared, so the caller (the API sends `target − liveRuns` workers) or the
 * scheduler's next run sends it workers. A batch that is not paused is left as it is.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function resumeBatch(sql: Sql, id: string): Promise<BatchInfo> {
  open(id, isUuid(id) ? await q.resumeBatch(sql, id) : undefined);
  return getBatch(sql, id);
}

/**
 * Set (or with null clear) an open batch's deadline: `{ deadline }` an instant, `{ deadlineMs }`
 * ms from its start. A deadline already past ends it at the scheduler's next pass (or a run's
 * next beat).
 * @throws {InvalidBatchError} a deadline {@link checkDeadline} refuses.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function setBatchDeadline(sql: Sql, id: string, d: DeadlineInput | null): Promise<BatchInfo> {
  if (d !== null) checkDeadline(d);
  const arg: q.DeadlineArg = d === null ? null : 'deadline' in d ? { at: d.deadline } : { afterStartMs: d.deadlineMs };
  open(id, isUuid(id) ? await q.setDeadline(sql, id, arg) : undefined);
  return getBatch(sql, id);
}

/**
 * End the open batches whose deadline has passed (database clock), at most `limit` (default
 * 100), soonest first, found through the partial index of open batches with a deadline: each
 * ends `failed` with reason `deadline`, its runs told to stop (their rows deleted), its running
 * items back to pending with their attempt given back, its pending items never run, and its
 * Batch Finished event written. Resolves to the ids it ended (one another caller ended first is
 * left out).
 */
export async function endPastDeadlines(sql: Sql, limit = 100): Promise<string[]> {
  const ended: string[] = [];
  for (const id of await q.pastDeadline(sql, limit)) {
    if (await q.endPastDeadline(sql, id)) ended.push(id);
  }
  return ended;
}
