// Retention of usage rows (docs/design.md, "Usage and cost" and "Retention"): rows recorded longer
// ago than their own retention (LEASEHOLD_USAGE_RETENTION_DAYS) are deleted tenant by tenant in
// bounded chunks, skipping rows other transactions hold; recent rows are kept; the retention of
// batches never deletes a usage row, and a deleted batch's rows keep counting for its tenant.
import postgres from 'postgres';
import { beforeEach, describe, expect, it } from 'vitest';
import { deleteExpiredBatches, deleteExpiredUsage, getTenantUsage } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { loadHistory } from '../support/history.js';

const db = useTestDatabase();

beforeEach(async () => {
  await db.sql`truncate leasehold_run_usage, leasehold_batches, leasehold_deferred_starts cascade`;
});

/**
 * `n` usage rows of `tenant` (batch `batchId`, or a new one each) recorded `days` days ago and up
 * to an hour before, 1,000 ms of worker time each.
 */
async function usage(tenant: string, n: number, days: number, batchId?: string): Promise<void> {
  await db.sql`insert into leasehold_run_usage (run_id, batch_id, tenant, process, recorded_at, worker_ms, memory_mb, architecture, items)
    select gen_random_uuid(), coalesce(${batchId ?? null}::uuid, gen_random_uuid()), ${tenant}, gen_random_uuid(),
      now() - make_interval(days => ${days}) - make_interval(secs => g % 3600), 1000, 1024, 'arm64', 1
    from generate_series(1, ${n}) g`;
}

async function rows(): Promise<Record<string, number>> {
  const r = await db.sql<{ tenant: string; n: number }[]>`select tenant, count(*)::int as n from leasehold_run_usage
    group by tenant order by tenant`;
  return Object.fromEntries(r.map((x) => [x.tenant, x.n]));
}

describe('retention of usage rows', () => {
  it('deletes the rows of every tenant recorded longer ago than the usage retention, and keeps the rest', async () => {
    await usage('acme', 250, 401);
    await usage('acme', 30, 399);
    await usage('beta', 120, 500);
    await usage('gamma', 40, 10); // nothing expired
    await usage('zeta', 7, 1_000);

    const r = await deleteExpiredUsage(db.sql, { usageRetentionDays: 400, chunkRows: 100, pauseRatio: 0 });
    expect(r).toEqual({ rows: 250 + 120 + 7, more: false });
    expect(await rows()).toEqual({ acme: 30, gamma: 40 });
    // Nothing more is expired: a second pass deletes nothing.
    expect(await deleteExpiredUsage(db.sql, { usageRetentionDays: 400 })).toEqual({ rows: 0, more: false });
  });

  it('the default keeps 400 days, and 0 keeps everything', async () => {
    await usage('acme', 5, 398);
    await usage('acme', 3, 402);
    expect(await deleteExpiredUsage(db.sql, { usageRetentionDays: 0 })).toEqual({ rows: 0, more: false });
    expect(await rows()).toEqual({ acme: 8 });
    expect(await deleteExpiredUsage(db.sql)).toEqual({ rows: 3, more: false });
    expect(await rows()).toEqual({ acme: 5 });
  });

  it('more tenants than one look-up takes are all walked', async () => {
    // 64 tenants per look-up: 150 tenants take three.
    for (let t = 0; t < 150; t++) await usage(`t-${String(t).padStart(3, '0')}`, 2, t % 2 === 0 ? 500 : 5);
    const r = await deleteExpiredUsage(db.sql, { usageRetentionDays: 400, pauseRatio: 0 });
    expect(r).toEqual({ rows: 150, more: false });
    const left = await rows();
    expect(Object.keys(left)).toHaveLength(75);
    expect(Object.keys(left).every((t) => Number(t.slice(2)) % 2 === 1)).toBe(true);
  });

  it('a pass stops at its row cap or time budget and the next passes go on, until nothing expired is left', async () => {
    await usage('acme', 1_300, 450);
    await usage('beta', 900, 450);
    const passes = [];
    for (let i = 0; i < 10; i++) {
      const r = await deleteExpiredUsage(db.sql, {
        usageRetentionDays: 400,
        chunkRows: 300,
        maxRowsPerPass: 1_000,
        pauseRatio: 0,
      });
      passes.push(r);
      // Never beyond the cap: it stops before a statement that would go past it.
      expect(r.rows).toBeLessThanOrEqual(1_000);
      if (!r.more) break;
    }
    expect(passes.map((p) => p.rows)).toEqual([1_000, 1_000, 200]);
    expect(await rows()).toEqual({});

    await usage('acme', 10, 450);
    expect(await deleteExpiredUsage(db.sql, { usageRetentionDays: 400, budgetMs: 0 })).toEqual({ rows: 0, more: true });
    expect(await rows()).toEqual({ acme: 10 });
  });

  it('overlapping passes delete every expired row once and nothing else', async () => {
    const pools = Array.from({ length: 4 }, () => db.connect({ max: 1 }));
    for (let round = 0; round < 3; round++) {
      await db.sql`truncate leasehold_run_usage`;
      for (const t of ['a', 'b', 'c', 'd', 'e']) {
        await usage(t, 700, 420);
        await usage(t, 20, 30);
      }
      const results = await Promise.all(
        pools.map((p) => deleteExpiredUsage(p, { usageRetentionDays: 400, chunkRows: 150, pauseRatio: 0 })),
      );
      // A row one pass skipped (another held it) is deleted by that one or by a later pass.
      const again = await deleteExpiredUsage(db.sql, { usageRetentionDays: 400 });
      expect(results.reduce((n, r) => n + r.rows, 0) + again.rows).toBe(5 * 700);
      expect(await rows()).toEqual({ a: 20, b: 20, c: 20, d: 20, e: 20 });
    }
  });

  it('a pass waits for no lock: a row another transaction holds is skipped, and deleted by a later pass', async () => {
    await usage('acme', 300, 420);
    const [held] = await db.sql<{ run_id: string }[]>`select run_id from leasehold_run_usage order by recorded_at limit 1`;
    const holder = postgres(db.schemaUrl, { max: 1, onnotice: () => {} }) as unknown as Sql;
    const worker = db.connect({ max: 1 });
    try {
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => (locked = r));
      // As a run's own report replacing a takeover's estimate holds its row.
      const tx = holder.begin(async (t) => {
        await (t as unknown as Sql)`update leasehold_run_usage set worker_ms = worker_ms + 1 where run_id = ${held.run_id}`;
        locked();
        await released;
      });
      await isLocked;
      // Any wait would hit this timeout and throw.
      const r = await worker.begin(async (t) => {
        await (t as unknown as Sql)`set local lock_timeout = '200ms'`;
        return deleteExpiredUsage(t as unknown as Sql, { usageRetentionDays: 400, chunkRows: 100, pauseRatio: 0 });
      });
      expect(r).toEqual({ rows: 299, more: false });
      expect(await db.sql`select 1 from leasehold_run_usage where run_id = ${held.run_id}`).toHaveLength(1);
      release();
      await tx;
      expect(await deleteExpiredUsage(worker, { usageRetentionDays: 400 })).toEqual({ rows: 1, more: false });
      expect(await rows()).toEqual({});
    } finally {
      await holder.end({ timeout: 5 });
    }
  });

  it("the retention of batches deletes no usage row: a deleted batch's rows keep counting for its tenant", async () => {
    await loadHistory(db.sql, { batches: 2, items: 20, units: 0, outbox: 0, olderDays: 40, spreadDays: 1 });
    const old = await db.sql<{ id: string; tenant: string }[]>`select id, tenant from leasehold_batches order by id`;
    expect(old).toHaveLength(2);
    // Their runs were recorded 35 days ago (within the usage retention, past the batches').
    for (const b of old) await usage('acme', 3, 35, b.id);
    const range = { from: new Date(Date.now() - 60 * 86_400_000), to: new Date(Date.now() + 60_000) };
    const before = await getTenantUsage(db.sql, 'acme', range);
    expect(before).toMatchObject({ runs: 6, workerMs: 6_000, items: 6 });

    expect(await deleteExpiredBatches(db.sql, { retentionDays: 30 })).toMatchObject({ batches: 2, items: 20 });
    expect(await db.sql`select 1 from leasehold_batches`).toHaveLength(0);
    // No foreign key held the delete up, and the rows stay.
    expect(await rows()).toEqual({ acme: 6 });
    expect(await getTenantUsage(db.sql, 'acme', range)).toEqual(before);
    // The usage retention leaves them until their own time.
    expect(await deleteExpiredUsage(db.sql, { usageRetentionDays: 400 })).toEqual({ rows: 0, more: false });
    expect(await deleteExpiredUsage(db.sql, { usageRetentionDays: 30 })).toEqual({ rows: 6, more: false });
  });
});
