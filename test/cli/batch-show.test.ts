// `batch show` and the API's `notRun` with waiting items (docs/api.md, "counts" and "notRun";
// docs/cli.md): an open batch's text says how many items wait, and a cancelled batch's waiting
// items count as not run, as the dashboard shows them. A new user found both missing: three
// sleeping items read "0 running, 0 pending", and a cancel left them out of `notRun`.
import { describe, expect, it } from 'vitest';
import { batchView } from '../../src/api/views.js';
import { cancelBatch, createBatch, getBatch, itemsPage, Runner } from '../../src/batch/index.js';
import { resultLine, showLines } from '../../src/cli/batch-show.js';
import { endLine } from '../../src/cli/follow.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();

/** A batch of `count` items keyed k000…, of a tenant of its own, with `extra` start fields. */
async function newBatch(count: number, extra: Partial<Parameters<typeof createBatch>[1]> = {}) {
  const n = Math.random().toString(36).slice(2, 10);
  const { batch } = await createBatch(db.sql, {
    tenant: `show-${n}`,
    datasource: 'd',
    job: 'test',
    params: {},
    requestKey: `show-${n}`,
    items: Array.from({ length: count }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` })),
    ...extra,
  });
  return batch;
}

/** A batch of 3 items, 2 of them waiting (as a sleep leaves them). */
async function withWaiting() {
  const batch = await newBatch(3);
  await db.sql`update leasehold_items set state = 'waiting' where batch_id = ${batch.id} and key <> 'k000'`;
  return batch.id;
}

describe('batch show with waiting items', () => {
  it("an open batch's items line says how many wait", async () => {
    const id = await withWaiting();
    const view = batchView(await getBatch(db.sql, id));
    expect(view.counts).toMatchObject({ pending: 1, waiting: 2 });
    expect(view.notRun).toBe(0);
    expect(showLines(view).find((l) => l.startsWith('items'))).toContain('2 waiting (callbacks and sleeps), 1 pending');
  });

  it("a cancelled batch's waiting items are not run, in the API and the text", async () => {
    const id = await withWaiting();
    await cancelBatch(db.sql, id);
    const view = batchView(await getBatch(db.sql, id));
    expect(view.notRun).toBe(3);
    expect(showLines(view).find((l) => l.startsWith('items'))).toContain('3 not run (cancelled)');
    // The end of --follow counts the waiting ones too.
    expect(endLine(view)).toBe(`batch ${view.id} cancelled: 0 done, 0 failed, 3 not run`);
  });

  it('a batch its failures ended keeps its unfinished items as not run, in the API and the text', async () => {
    const batch = await newBatch(20, { toleratedFailures: { count: 0 } });
    const runner = new Runner(db.sql, { parallel: 1, attempts: 1, queueDepth: 0 });
    const work = async () => {
      throw new Error('refused');
    };
    await runner.takeOver(() => ({ work, parallel: 1 }), batch.id);
    await runner.running(batch.id);
    const view = batchView(await getBatch(db.sql, batch.id));
    expect(view.status).toBe('failed');
    // Its first failure ended it: the rest were never run, and never will be.
    expect(view.counts.failed).toBe(1);
    expect(view.notRun).toBe(19);
    expect(showLines(view).find((l) => l.startsWith('items'))).toContain('1 failed, 19 not run (the batch failed)');
    // The end of --follow says them too.
    expect(endLine(view)).toMatch(new RegExp(`^batch ${view.id} failed: 0 done, 1 failed, 19 not run; `));
  });
});

describe('batch results', () => {
  /** The lines `batch results` prints for batch `id` as it stands. */
  async function resultLines(id: string) {
    const view = batchView(await getBatch(db.sql, id));
    const page = await itemsPage(db.sql, id, { limit: 100 });
    return page.items.map((i) => JSON.parse(resultLine(i as Parameters<typeof resultLine>[0], view)) as Record<string, unknown>);
  }

  it("marks a cancelled batch's pending and waiting items as not run, and keeps their stored state", async () => {
    const id = await withWaiting();
    await db.sql`update leasehold_items set state = 'done', attempts = 1, output = '{"ok":true}' where batch_id = ${id} and key = 'k001'`;
    // Open: nothing is marked.
    expect((await resultLines(id)).map((l) => l.notRun)).toEqual([undefined, undefined, undefined]);
    await cancelBatch(db.sql, id);
    expect(await resultLines(id)).toEqual([
      { key: 'k000', state: 'pending', attempts: 0, output: null, error: null, notRun: true },
      { key: 'k001', state: 'done', attempts: 1, output: { ok: true }, error: null },
      { key: 'k002', state: 'waiting', attempts: 0, output: null, error: null, notRun: true },
    ]);
  });
});
