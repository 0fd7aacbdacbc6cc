// Items keep their batch through two statement-level triggers, not a foreign key (migration 027;
// docs/design.md, "The database in production"): an insert naming a batch that does not exist
// fails and stores nothing, deleting (or truncating) batches deletes their items and no one
// else's, and an
// insert that holds its batch row (as a start and a source page do) never leaves an item behind
// a batch deleted at the same moment.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase({ max: 8 });

async function batchOf(sql: Sql, items: number): Promise<string> {
  const { batch } = await createBatch(sql, {
    tenant: 'items-batch',
    datasource: randomUUID(),
    job: 'noop',
    params: {},
    requestKey: randomUUID(),
    items: Array.from({ length: items }, (_, i) => ({ key: `k${i}`, input: { i } })),
  });
  return batch.id;
}

async function itemsOf(sql: Sql, id: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_items where batch_id = ${id}`;
  return r.n;
}

describe('items and their batch', () => {
  it('has no foreign key on items, and the triggers in its place', async () => {
    const fks = await db.sql`select conname from pg_constraint
      where conrelid = 'leasehold_items'::regclass and contype = 'f'`;
    expect(fks).toEqual([]);
    const triggers = await db.sql<{ name: string }[]>`select tgname as name from pg_trigger
      where tgrelid in ('leasehold_items'::regclass, 'leasehold_batches'::regclass)
        and tgname like 'leasehold_%' order by 1`;
    expect(triggers.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        'leasehold_batches_delete_items',
        'leasehold_batches_truncate_items',
        'leasehold_items_check_batch',
      ]),
    );
  });

  it('refuses an insert naming a batch that does not exist (foreign_key_violation, the batch named), also beside an existing batch, and stores nothing', async () => {
    const real = await batchOf(db.sql, 1);
    const missing = randomUUID();
    const err = await db.sql`insert into leasehold_items (batch_id, key) values (${missing}, 'a')`.catch((e: unknown) => e);
    expect(err).toMatchObject({ code: '23503' });
    expect(String((err as Error).message)).toContain(missing);
    const mixed = await db.sql`insert into leasehold_items (batch_id, key)
      values (${real}, 'new-1'), (${real}, 'new-2'), (${missing}, 'b')`.catch((e: unknown) => e);
    expect(mixed).toMatchObject({ code: '23503' });
    expect(await itemsOf(db.sql, real)).toBe(1);
    expect(await itemsOf(db.sql, missing)).toBe(0);
    // A statement that inserts nothing checks nothing.
    await db.sql`insert into leasehold_items (batch_id, key) select ${missing}, 'c' where false`;
  });

  it('deletes the items of the batches deleted, in one statement or one by one, and keeps every other batch’s', async () => {
    const [a, b, c] = [await batchOf(db.sql, 300), await batchOf(db.sql, 200), await batchOf(db.sql, 100)];
    await db.sql`delete from leasehold_batches where id in (${a}, ${b})`;
    expect([await itemsOf(db.sql, a), await itemsOf(db.sql, b), await itemsOf(db.sql, c)]).toEqual([0, 0, 100]);
    await db.sql`delete from leasehold_batches where id = ${c}`;
    expect(await itemsOf(db.sql, c)).toBe(0);
  });

  it('deletes a batch without reading other batches’ items, also when the statistics know only two large batches', async () => {
    const big = [await batchOf(db.sql, 1), await batchOf(db.sql, 1)];
    for (const id of big) {
      await db.sql`insert into leasehold_items (batch_id, key)
        select ${id}, 'g' || k from generate_series(1, 20000) k`;
    }
    await db.sql`analyze leasehold_items`;
    const small = await batchOf(db.sql, 10);
    // The scans of the items that the delete (and its trigger) made: the backend's counts not
    // yet reported (pg_stat_xact_*, which may hold earlier statements' too) before and after it.
    const scans = (id: string) =>
      db.sql.begin(async (tx) => {
        const t = tx as unknown as Sql;
        const read = async () => {
          const [r] = await t<{ seq: number; idx: number }[]>`select seq_scan::int as seq, idx_scan::int as idx
            from pg_stat_xact_user_tables where schemaname = current_schema() and relname = 'leasehold_items'`;
          return r;
        };
        const before = await read();
        await t`delete from leasehold_batches where id = ${id}`;
        const after = await read();
        return { seq: after.seq - before.seq, idx: after.idx - before.idx };
      });
    expect(await scans(small)).toEqual({ seq: 0, idx: 1 });
    expect(await itemsOf(db.sql, small)).toBe(0);
    // A delete of no batch (as retention's delete of a batch that is no longer due) reads no item.
    expect(await scans(randomUUID())).toEqual({ seq: 0, idx: 0 });
    expect(await itemsOf(db.sql, big[0]!)).toBe(20_001);
    await db.sql`delete from leasehold_batches where id in ${db.sql(big)}`;
  });

  it('truncates the items with the batches', async () => {
    await batchOf(db.sql, 50);
    await db.sql`truncate leasehold_batches cascade`;
    const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items`;
    expect(r.n).toBe(0);
  });

  it('leaves no item of a deleted batch when pages that hold the batch row race its deletion (8 at once, 5 rounds)', async () => {
    for (let round = 0; round < 5; round++) {
      const ids = await Promise.all(Array.from({ length: 4 }, () => batchOf(db.sql, 10)));
      // A page as a source stores it (sql/sources.ts): the batch row updated in the statement
      // that inserts the items, only while it exists.
      const page = (id: string, n: number) => db.sql`with page as (
          update leasehold_batches set total = total + 100 where id = ${id} returning id
        )
        insert into leasehold_items (batch_id, key)
        select ${id}, ${`p${n}-`} || k from generate_series(1, 100) k where exists (select 1 from page)`;
      await Promise.all(
        ids.flatMap((id, i) => [
          page(id, 1),
          db.sql`select pg_sleep(${i * 0.002})`.then(() => db.sql`delete from leasehold_batches where id = ${id}`),
          page(id, 2),
        ]),
      );
      const [orphans] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items i
        where i.batch_id in ${db.sql(ids)}`;
      expect(orphans.n).toBe(0);
    }
  });
});
