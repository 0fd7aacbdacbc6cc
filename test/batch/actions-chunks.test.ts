// A bulk cancel ends a chunk of batches in one transaction (src/batch/sql/cancels.ts; docs/design.md,
// "Bulk actions"): raced by runs taking its batches over, by one-batch cancels and by other
// workers of the action, every batch still ends once, with one Batch Finished event, no run row
// left and its tenant's counts exact.
import { describe, expect, it } from 'vitest';
import { Runner, cancelBatch, createBatch, getAction, startAction, workAction, type ItemWork } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

const pool = usePools(db, 2);

let seq = 0;
const own = (what: string) => `${what}-${process.pid}-${++seq}`;

const inIds = (sql: Sql, ids: string[]) =>
  sql`(select x::uuid from jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb) as x)`;

describe('bulk cancel by chunks', () => {
  it('raced by takeovers, one-batch cancels and other workers, every batch ends once with one event and exact tenant counts', async () => {
    for (let round = 0; round < 3; round++) {
      const tenant = own('chunked');
      const ids: string[] = [];
      for (let i = 0; i < 150; i++) {
        const { batch } = await createBatch(db.sql, newBatch(i % 10 === 0 ? 20 : 1, { tenant }), { maxOpen: 100_000 });
        ids.push(batch.id);
      }
      const { action } = await startAction(db.sql, { requestKey: own('k'), action: 'cancel', filter: { tenant } });
      expect(action.matched).toBe(150);

      // Runs take over every tenth batch (20 items) while the action works; one-batch
      // cancels race it on others; 3 workers of the action work chunks of 25 at once.
      // Their items wait until the action is over, so no run finishes its batch before it.
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      const slow: ItemWork = async () => (await gate, 'ok');
      const runners = Array.from({ length: 3 }, () => new Runner(pool(3), { beatMs: 50, staleMs: 5_000, parallel: 2 }));
      const takeovers = ids
        .filter((_, i) => i % 10 === 0)
        .map((id, i) => runners[i % 3].takeOver(() => ({ work: slow }), id).catch(() => undefined));
      const api = pool(2);
      const singles = ids
        .filter((_, i) => i % 10 === 5)
        .map((id) =>
          cancelBatch(api, id).then(
            () => 'cancelled',
            () => 'refused',
          ),
        );
      const workers = Array.from({ length: 3 }, async () => {
        const p = pool(2);
        while (!(await workAction(p, action.id, { chunk: 25, busyRetryMs: 50 })).finished) await sleep(50);
      });
      await Promise.all([...takeovers, ...singles, ...workers]);
      open();
      // The runs of cancelled batches stop at their next statement or beat.
      await Promise.all(runners.flatMap((r) => r.batches().flatMap((id) => r.running(id) ?? [])));

      const info = await getAction(db.sql, action.id);
      expect(info.done + info.skipped).toBe(150);
      // A batch the action skipped was ended by its one-batch cancel, never left open or busy.
      for (const r of info.skippedReasons) expect(r.reason).toBe('already cancelled');
      const [{ notCancelled }] = await db.sql<{ notCancelled: number }[]>`select count(*)::int as "notCancelled"
        from leasehold_batches where id in ${inIds(db.sql, ids)} and status <> 'cancelled'`;
      expect(notCancelled).toBe(0);
      // One Batch Finished event per batch, saying cancelled, its counts those of its items.
      const events = await db.sql<{ batch_id: string; n: number; status: string; total: number; items: number }[]>`
        select e.batch_id, count(*) over (partition by e.batch_id)::int as n, e.detail ->> 'status' as status,
          (e.detail -> 'counts' ->> 'total')::int as total,
          ((e.detail -> 'counts' ->> 'pending')::int + (e.detail -> 'counts' ->> 'running')::int
            + (e.detail -> 'counts' ->> 'done')::int + (e.detail -> 'counts' ->> 'failed')::int) as items
        from leasehold_batch_events e where e.batch_id in ${inIds(db.sql, ids)}`;
      expect(events.length).toBe(150);
      for (const e of events) expect(e).toMatchObject({ n: 1, status: 'cancelled', items: e.total });
      const [{ runs }] = await db.sql<{ runs: number }[]>`select count(*)::int as runs from leasehold_runs
        where batch_id in ${inIds(db.sql, ids)}`;
      expect(runs).toBe(0);
      const [counts] = await db.sql<{ open: number; running: number; wanting: number }[]>`select open, running, wanting
        from leasehold_tenants where tenant = ${tenant}`;
      expect(counts).toEqual({ open: 0, running: 0, wanting: 0 });
    }
  }, 240_000);
});
