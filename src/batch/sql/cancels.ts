// The set-based cancel of a bulk action (docs/design.md, "Bulk actions"): a chunk of batches
// cancelled in one transaction of four statements, not one transaction of four statements per
// batch. It keeps every rule of the one-batch cancel (ends.ts): run rows deleted first (each
// delete waits for the move in flight on it), then the batch rows, only while open, so once; runs
// that joined meanwhile make it roll back and start again; one Batch Finished event per batch it
// ended, in the same transaction. The lock order is the one-batch cancel's (run rows, then batch
// rows, then the tenants' rows in the counting trigger, which fires at the end of the update).
import type { Sql } from '../../store/index.js';
import type { BatchStatus } from '../types.js';
import { endInTransaction, LateRunsJoined } from './ends.js';
import { writeCancelEvents } from './event-writes.js';

// The ids of a JSON array as a set (arrays are passed as JSON: no array types under a pooler).
function idSet(sql: Sql, ids: readonly string[]) {
  return sql`(select x::uuid from jsonb_array_elements_text(${sql.json(ids as string[])}) as x)`;
}

/**
 * Cancel the open batches among `ids` (at most a chunk, 100) in the caller's transaction (a
 * savepoint of it, tried again as {@link endInTransaction} does when runs joined meanwhile):
 * 1. every run row of the batches deleted (each delete waits for the move in flight on it);
 * 2. the Batch Finished events of those still open written (a later snapshot: a move the
 *    deletes waited for is counted), before any batch row is locked;
 * 3. the batch rows ended `cancelled` while open, as the one-batch cancel does, and the events of
 *    batches this statement did not end (another end won meanwhile) deleted again; the counting
 *    trigger then locks the tenants' rows, held only until the commit that follows;
 * 4. runs that joined while it ran (a takeover that held a batch row) read from a later
 *    snapshot: any makes it roll back and start again, so its first statement deletes their rows
 *    before it locks a batch row; its last try deletes them behind the batch rows.
 * Answers the batches it cancelled and the status of the others (`undefined`: no such batch).
 * A lock it may not wait for (the caller's lock_timeout) throws as the statement does.
 */
export async function cancelBatches(
  sql: Sql,
  ids: readonly string[],
): Promise<{ cancelled: string[]; others: Map<string, BatchStatus | undefined> }> {
  const cancelled = await endInTransaction(sql, async (t, lastTry) => {
    await t`${deleteChunkRunsStatement(t, ids)}`;
    const events = await writeCancelEvents(t, ids);
    if (events.length === 0) return [];
    const ended = await t<{ id: string }[]>`${endChunkStatement(t, events)}`;
    const done = ended.map((r) => r.id);
    if (done.length === 0) return done;
    if (lastTry) await t`${deleteChunkRunsStatement(t, done)}`;
    else {
      const [r] = await t<{ late: boolean }[]>`${lateRunsStatement(t, done)}`;
      if (r.late) throw new LateRunsJoined();
    }
    return done;
  });
  const others = new Map<string, BatchStatus | undefined>();
  const ended = new Set(cancelled);
  const rest = ids.filter((id) => !ended.has(id));
  for (const id of rest) others.set(id, undefined);
  if (rest.length > 0) {
    const rows = await sql<{ id: string; status: BatchStatus }[]>`${chunkStatusesStatement(sql, rest)}`;
    for (const r of rows) others.set(r.id, r.status);
  }
  return { cancelled, others };
}

/**
 * The delete of every run row of the batches `ids` (step 1 of {@link cancelBatches}, and step 4
 * of its last try) as a fragment (the plan test reads its plan). Each delete waits for the move
 * in flight on its row.
 */
export function deleteChunkRunsStatement(sql: Sql, ids: readonly string[]) {
  return sql`delete from leasehold_runs where batch_id in ${idSet(sql, ids)}`;
}

/**
 * Step 3 of {@link cancelBatches} as a fragment (the plan test reads its plan): the batches of
 * the Batch Finished events `events` (ids) ended `cancelled` while open, and the events of those
 * it did not end deleted. Answers the ids of the batches it ended (`{ id }` rows).
 */
export function endChunkStatement(sql: Sql, events: readonly string[]) {
  return sql`with c as (
      update leasehold_batches b
      set status = 'cancelled', finished_at = now(), live_runs = 0, reading = false
      where b.id in (select batch_id from leasehold_batch_events where id in ${idSet(sql, events)}) and b.status = 'open'
      returning b.id
    ), stray as (
      delete from leasehold_batch_events e
      where e.id in ${idSet(sql, events)} and e.batch_id not in (select id from c)
    )
    select id from c`;
}

/**
 * Step 4 of {@link cancelBatches} on every try but its last, as a fragment (the plan test reads
 * its plan): whether any run row of the batches `ids` exists (`{ late }`, one row).
 */
export function lateRunsStatement(sql: Sql, ids: readonly string[]) {
  return sql`select exists (select 1 from leasehold_runs where batch_id in ${idSet(sql, ids)}) as late`;
}

/**
 * The status of the batches `ids` that {@link cancelBatches} did not cancel, as a fragment (the
 * plan test reads its plan): `{ id, status }` rows, none for an id of no batch. Reads their rows.
 */
export function chunkStatusesStatement(sql: Sql, ids: readonly string[]) {
  return sql`select id, status from leasehold_batches where id in ${idSet(sql, ids)}`;
}
