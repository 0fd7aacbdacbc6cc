// The dispatch mark of one batch (leasehold_batches.dispatched_at), set or cleared; the
// scheduler's claim of the batches that need workers is ./dispatch-claims.ts. They change no
// item, run or status (docs/design.md, "Fan-out").
import type { Sql } from '../../store/index.js';

// Clears the dispatch mark of a batch a worker was sent for but did not join (another tenant was
// served worse, or its tenant is at its limit), so the scheduler may dispatch it again at once.
export async function undispatch(sql: Sql, batchId: string): Promise<void> {
  await sql`update leasehold_batches set dispatched_at = null
    where id = ${batchId} and status = 'open' and live_runs < target`;
}

// Marks one batch as dispatched now (the API sends a new batch to workers at once).
export async function markDispatched(sql: Sql, batchId: string): Promise<void> {
  await sql`update leasehold_batches set dispatched_at = now() where id = ${batchId}`;
}
