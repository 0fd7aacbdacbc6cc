// The reads of a redrive (src/batch/redrive.ts) that come before its locks (leasehold_batches).
// One transaction takes, in this order, the datasource row lock (as a start does, so maxOpen is
// decided one at a time with starts) and then the batch row lock (as a takeover, finish or cancel
// does), so a redrive and a run's statements on the batch are ordered one after the other; the
// statements that change the batch are in sql/redrives.ts.
import type { Tx } from './shared.js';

// Reads the tenant and datasource of a batch (they never change), to lock its datasource.
export async function batchPlace(tx: Tx, id: string): Promise<{ tenant: string; datasource: string } | undefined> {
  const [r] = await tx<
    { tenant: string; datasource: string }[]
  >`select tenant, datasource from leasehold_batches where id = ${id}`;
  return r;
}
