// Whether a batch has waiting items: the one fragment of the waits' statements (sql/waits.ts) the
// ends read too, in a file of its own so a worker loads the waits' statements only when a batch
// waits (docs/design.md, "Cold starts and code splitting").
import type { Sql } from '../../store/index.js';

/**
 * Whether any item of the batch is waiting: the batch's wait rows (its primary key's range), each
 * joined to its item on the whole key, stopping at the first that waits. Shared by the park, the
 * finish and the run's wait state.
 */
export function anyWaiting(sql: Sql, batchId: string | ReturnType<Sql>) {
  return sql`exists (select 1 from leasehold_waits w
      cross join lateral (
        select 1 from leasehold_items x where x.batch_id = w.batch_id and x.key = w.key and x.state = 'waiting' limit 1
      ) i
      where w.batch_id = ${batchId})`;
}
