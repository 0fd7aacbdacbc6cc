import { describe, expect, it } from 'vitest';
import { Runner, createBatch, getBatch } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

describe('stopping a run whose work ignores its signal', () => {
  it('hands off after drainMs; the next run counts the attempt and finishes the item', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'd',
      job: 'stubborn',
      params: {},
      requestKey: 'drain',
      items: [{ key: 'stubborn' }, { key: 'fine' }],
    });
    let release!: () => void;
    const stuck = new Promise<void>((r) => (release = r));
    const first = new Runner(db.sql, { beatMs: 200, staleMs: 2000, drainMs: 300, parallel: 2 });
    await first.takeOver(() => ({ work: async (item) => (item.key === 'stubborn' ? stuck.then(() => 'late') : 'ok') }), batch.id);
    // Wait until `fine` is done and `stubborn` hangs.
    for (let i = 0; i < 100 && (await getBatch(db.sql, batch.id)).counts.done < 1; i++) await sleep(20);
    const t0 = Date.now();
    const result = await first.stop(batch.id);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(result?.outcome).toBe('handed-off');
    const mid = await db.sql`select state, attempts from leasehold_items where batch_id = ${batch.id} and key = 'stubborn'`;
    expect(mid[0]).toEqual({ state: 'running', attempts: 1 });

    const second = new Runner(db.sql, { beatMs: 200, staleMs: 2000 });
    await second.takeOver(() => ({ work: async () => 'second' }), batch.id);
    expect((await second.running(batch.id))!.outcome).toBe('succeeded');
    release();
    const [item] =
      await db.sql`select state, attempts, output from leasehold_items where batch_id = ${batch.id} and key = 'stubborn'`;
    expect(item).toEqual({ state: 'done', attempts: 2, output: 'second' });
  });
});
