// Retention (docs/design.md, "Retention"): finished batches older than the retention period are
// deleted with their items, redrives and deferred firings, in bounded chunks, skipping rows other
// transactions hold; open and recent batches are never touched.
import postgres from 'postgres';
import { beforeEach, describe, expect, it } from 'vitest';
import { createBatch, deleteExpiredBatches } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { loadHistory } from '../support/history.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.sql`truncate leasehold_batches, leasehold_runs, leasehold_items, leasehold_redrives, leasehold_deferred_starts, leasehold_batch_events, leasehold_waits`;
});

/** Batches of `perBatch` items finished `days` days ago (and up to a day before), from history. */
async function finished(batches: number, perBatch: number, days: number): Promise<void> {
  await loadHistory(db.sql, { batches, items: batches * perBatch, units: 0, outbox: 0, olderDays: days, spreadDays: 1 });
}

async function counts(): Promise<{ batches: number; items: number; redrives: number; deferred: number }> {
  const [r] = await db.sql<{ batches: number; items: number; redrives: number; deferred: number }[]>`select
    (select count(*) from leasehold_batches)::int as batches, (select count(*) from leasehold_items)::int as items,
    (select count(*) from leasehold_redrives)::int as redrives, (select count(*) from leasehold_deferred_starts)::int as deferred`;
  return r;
}

async function deferred(key: string, days: number): Promise<void> {
  await db.sql`insert into leasehold_deferred_starts (tenant, request_key, datasource, job, params, created_at)
    values ('acme', ${key}, 'files', 'test', '{}', now() - make_interval(days => ${days}))`;
}

describe('retention of batches', () => {
  it('deletes batches finished longer ago than the retention with their items, redrives and deferred firings, and keeps the rest', async () => {
    await finished(3, 100, 40); // expired
    await finished(2, 50, 10); // recent
    const open = await createBatch(db.sql, newBatch(5));
    // An open batch started long ago is not finished: kept.
    await db.sql`update leasehold_batches set created_at = now() - interval '90 days' where id = ${open.batch.id}`;
    const [old] = await db.sql<
      { id: string }[]
    >`select id from leasehold_batches where finished_at < now() - interval '35 days' limit 1`;
    await db.sql`insert into leasehold_redrives (batch_id, number, items) values (${old.id}, 1, 3), (${old.id}, 2, 1)`;
    await deferred('old', 31);
    await deferred('new', 29);

    const r = await deleteExpiredBatches(db.sql, { retentionDays: 30, chunkRows: 40 });
    expect(r).toEqual({ batches: 3, items: 300, redrives: 2, deferred: 1, more: false });
    expect(await counts()).toEqual({ batches: 3, items: 2 * 50 + 5, redrives: 0, deferred: 1 });
    const left = await db.sql<{ status: string }[]>`select status from leasehold_batches order by status`;
    expect(left.map((b) => b.status)).toEqual(['open', 'succeeded', 'succeeded']);
    // Nothing more is expired: a second pass deletes nothing.
    expect(await deleteExpiredBatches(db.sql, { retentionDays: 30 })).toEqual({
      batches: 0,
      items: 0,
      redrives: 0,
      deferred: 0,
      more: false,
    });
  });

  it('retention 0 keeps everything', async () => {
    await finished(2, 10, 400);
    await deferred('ancient', 400);
    expect(await deleteExpiredBatches(db.sql, { retentionDays: 0 })).toEqual({
      batches: 0,
      items: 0,
      redrives: 0,
      deferred: 0,
      more: false,
    });
    expect(await counts()).toEqual({ batches: 2, items: 20, redrives: 0, deferred: 1 });
  });

  it('a pass stops at its row cap and the next passes go on where it stopped, until nothing expired is left', async () => {
    await finished(2, 1_200, 40);
    const passes = [];
    for (let i = 0; i < 10; i++) {
      const r = await deleteExpiredBatches(db.sql, { retentionDays: 30, chunkRows: 500, maxRowsPerPass: 1_000 });
      passes.push(r);
      // Never beyond the cap: it stops before a statement that would go past it.
      expect(r.items + r.batches).toBeLessThanOrEqual(1_000);
      if (!r.more) break;
    }
    expect(passes.length).toBe(3);
    expect(passes.reduce((n, r) => n + r.items, 0)).toBe(2_400);
    expect(passes.reduce((n, r) => n + r.batches, 0)).toBe(2);
    expect(await counts()).toEqual({ batches: 0, items: 0, redrives: 0, deferred: 0 });
  });

  it('a pass with no time budget left deletes nothing and says more is left', async () => {
    await finished(1, 10, 40);
    expect(await deleteExpiredBatches(db.sql, { retentionDays: 30, budgetMs: 0 })).toEqual({
      batches: 0,
      items: 0,
      redrives: 0,
      deferred: 0,
      more: true,
    });
    expect(await counts()).toMatchObject({ batches: 1, items: 10 });
  });

  it('overlapping passes delete every expired row once and nothing else', async () => {
    await finished(6, 700, 40);
    await finished(2, 30, 5);
    const pools = Array.from({ length: 4 }, () => db.connect({ max: 1 }));
    for (let round = 0; round < 3; round++) {
      await db.sql`truncate leasehold_batches cascade`;
      await finished(6, 700, 40);
      await finished(2, 30, 5);
      const results = await Promise.all(pools.map((p) => deleteExpiredBatches(p, { retentionDays: 30, chunkRows: 250 })));
      const sum = (k: 'items' | 'batches') => results.reduce((n, r) => n + r[k], 0);
      // A batch one pass skipped (another held its row) is deleted by that one or by a later pass.
      const again = await deleteExpiredBatches(db.sql, { retentionDays: 30 });
      expect(sum('items') + again.items).toBe(6 * 700);
      expect(sum('batches') + again.batches).toBe(6);
      expect(await counts()).toEqual({ batches: 2, items: 60, redrives: 0, deferred: 0 });
    }
  });

  it('a pass waits for no lock: a batch row another transaction holds is skipped, its items kept, and deleted by a later pass', async () => {
    await finished(2, 300, 40);
    const [held] = await db.sql<{ id: string }[]>`select id from leasehold_batches order by finished_at limit 1`;
    const holder = postgres(db.schemaUrl, { max: 1, onnotice: () => {} }) as unknown as Sql;
    const worker = db.connect({ max: 1 });
    try {
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => (locked = r));
      const tx = holder.begin(async (t) => {
        await (t as unknown as Sql)`select 1 from leasehold_batches where id = ${held.id} for update`;
        locked();
        await released;
      });
      await isLocked;
      // The server's own evidence: the row is locked by the holder's backend.
      const [lock] = await db.sql<
        { n: number }[]
      >`select count(*)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid
        where l.locktype = 'transactionid' and a.application_name <> 'leasehold-test' and a.state = 'idle in transaction'`;
      expect(lock.n).toBeGreaterThanOrEqual(1);
      // Any wait would hit this timeout and throw.
      const r = await worker.begin(async (t) => {
        await (t as unknown as Sql)`set local lock_timeout = '200ms'`;
        return deleteExpiredBatches(t as unknown as Sql, { retentionDays: 30, chunkRows: 100 });
      });
      expect(r).toMatchObject({ batches: 1, items: 300 });
      expect(await db.sql`select 1 from leasehold_items where batch_id = ${held.id}`).toHaveLength(300);
      release();
      await tx;
      expect(await deleteExpiredBatches(worker, { retentionDays: 30 })).toMatchObject({ batches: 1, items: 300 });
      expect(await counts()).toMatchObject({ batches: 0, items: 0 });
    } finally {
      await holder.end({ timeout: 5 });
    }
  });
});
