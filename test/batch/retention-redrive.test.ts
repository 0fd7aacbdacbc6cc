// A redrive never reopens a batch retention has begun to delete (docs/design.md, "Retention"):
// its deleted failed items would never run again and its finish would count them as done.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { BatchExpiredError, createBatch, deleteExpiredBatches, getBatch, redriveBatch } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();

describe('redrive and retention', () => {
  it('refuses a batch whose items retention has begun to delete, and changes nothing', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: randomUUID(),
      job: 'noop',
      params: {},
      requestKey: randomUUID(),
      items: Array.from({ length: 2_000 }, (_, i) => ({ key: String(i).padStart(5, '0') })),
    });
    await db.sql`update leasehold_items set state = case when key < '00500' then 'failed' else 'done' end, attempts = 1
      where batch_id = ${batch.id}`;
    await db.sql`update leasehold_batches set status = 'failed', finished_at = now() - interval '40 days' where id = ${batch.id}`;
    // A pass that ends on its row cap: half the items gone, the batch row left for the next pass.
    const pass = await deleteExpiredBatches(db.sql, { retentionDays: 30, chunkRows: 500, maxRowsPerPass: 1_000, pauseRatio: 0 });
    expect(pass).toMatchObject({ items: 1_000, batches: 0, more: true });
    await expect(redriveBatch(db.sql, batch.id)).rejects.toBeInstanceOf(BatchExpiredError);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', redrives: 0 });
    const [n] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items where batch_id = ${batch.id}`;
    expect(n.n).toBe(1_000);
  });
});
