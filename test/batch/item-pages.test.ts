// Items keep their versions on their page (docs/design.md, "The database in production";
// migration 035): a claim of an item is a non-HOT update, and with half of each items page left
// free its new version lands on the item's own page instead of another page (which first cost a
// WAL-logged lock of the old version, and grew the table). Measured as where the versions are,
// not time: the same claims over the same number of items, as migrated and on pages packed full
// (fillfactor 100, the table before the migration, set in this file's own schema).
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { encodeMoves, step } from '../../src/batch/sql/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();
const ITEMS = 2_000;

/** Each item of `batchId` with the page its visible version is on. */
async function pages(batchId: string): Promise<Map<string, number>> {
  const rows = await db.sql<{ key: string; page: number }[]>`
    select key, (ctid::text::point)[0]::int as page from leasehold_items where batch_id = ${batchId}`;
  return new Map(rows.map((r) => [r.key, r.page]));
}

/** The share of a new batch's ITEMS items whose claim (128 at a time, as a run's) left them on their page. */
async function claimedInPlace(): Promise<number> {
  const { batch } = await createBatch(db.sql, newBatch(ITEMS));
  const before = await pages(batch.id);
  const run = randomUUID();
  await db.sql`insert into leasehold_runs (id, batch_id, process) values (${run}, ${batch.id}, ${randomUUID()})`;
  let claimed = 0;
  for (;;) {
    const r = await step(db.sql, {
      batchId: batch.id,
      run,
      moves: encodeMoves([]),
      claim: 128,
      aheadMs: 0,
      recordProgress: false,
    });
    if (r.claimed.length === 0) break;
    claimed += r.claimed.length;
  }
  expect(claimed).toBe(ITEMS);
  const after = await pages(batch.id);
  let same = 0;
  for (const [key, page] of after) if (before.get(key) === page) same++;
  return same / ITEMS;
}

describe('item pages', () => {
  it('the items table leaves half of each page free', async () => {
    const [{ options }] = await db.sql<{ options: string[] }[]>`select array_to_json(c.reloptions) as options
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = ${db.schema} and c.relname = 'leasehold_items'`;
    expect(options).toContain('fillfactor=50');
  });

  it("a claim writes an item's new version on its own page", async () => {
    const roomy = await claimedInPlace();
    await db.sql`alter table leasehold_items set (fillfactor = 100)`;
    const packed = await claimedInPlace();
    // Measured on PostgreSQL 15: 94 % (the last item or two of a page find its room used up by
    // the versions before them), against none on packed pages.
    expect(roomy).toBeGreaterThan(0.8);
    expect(packed).toBeLessThan(0.1);
  }, 120_000);
});
