// Fleet-wide rate limits per key (docs/design.md, "Rate limits"; issue 22 item 1): 4 runners (each
// its own pool, as processes are) fan one batch out over 4 runs with `parallel` 8; items of key
// `slow` are limited to 20/s and items of key `fast` to 400/s. Every start is timed here; the
// checks are the limit's bound in every one-second window, the slow key's throughput, that the
// fast key is not held back, and that waiting for a token uses no attempt.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Runner, createBatch, getBatch, type Executor } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { itemRows, newBatch } from './helpers.js';
import { mostInWindow } from '../support/random.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await testDatabase();
});
afterAll(() => db.close());

const opened: Sql[] = [];
const pool = (max = 3): Sql => {
  const p = db.connect({ max });
  opened.push(p);
  return p;
};
afterEach(() => Promise.all(opened.splice(0).map((p) => p.end({ timeout: 5 }))));

describe('a fleet-wide rate limit per key', () => {
  it('holds 20/s per key across 4 runs in every 1 s window, for each of two keys at once, neither starved, using no attempt', async () => {
    const starts: Record<string, number[]> = { a: [], b: [] };
    const executor: Executor = {
      parallel: 8,
      rateLimit: { key: (item) => (item.input as { k: string }).k, perSecond: 20 },
      work: async ({ input }) => {
        const k = (input as { k: string }).k;
        starts[k]!.push(Date.now());
        await sleep(5);
        return k;
      },
    };
    // 100 items of each key (5 s at 20/s), interleaved: claims bring both.
    const items = Array.from({ length: 200 }, (_, i) => ({
      key: `i${String(i).padStart(4, '0')}`,
      input: { k: i % 2 === 0 ? 'a' : 'b' },
    }));
    const job = `rated-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, { ...newBatch(0, { job, maxConcurrency: 4 }), items }, { maxOpen: 10 });
    const runners = Array.from({ length: 4 }, () => new Runner(pool(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 }));
    for (const r of runners) r.watch(() => executor, 20);
    try {
      await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
        timeoutMs: 60_000,
      });
    } finally {
      await Promise.all(runners.map((r) => r.close()));
    }
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    // No item used an attempt waiting for a token: each ran once.
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.filter((r) => r.attempts !== 1)).toEqual([]);
    for (const k of ['a', 'b']) {
      const t = [...starts[k]!].sort((x, y) => x - y);
      expect(t).toHaveLength(100);
      // The bound: perSecond + burst (1 at 20/s) in any 1 s window, plus what tokens taken in the
      // 50 ms before a window (TOKEN_TTL_MS) may start in it (20 × 0.05 = 1).
      const most = mostInWindow(t, 1_000);
      const rate = ((t.length - 1) / (t.at(-1)! - t[0]!)) * 1_000;
      console.log(`[rate] key ${k} at 20/s: max ${most} per 1 s window, ${rate.toFixed(1)}/s`);
      expect(most).toBeLessThanOrEqual(22);
      // Throughput is the benchmark's to measure; here only that the key is not starved (the
      // other key's waits do not hold it back), with room for a loaded machine.
      expect(rate).toBeGreaterThanOrEqual(10);
    }
  }, 90_000);

  it("a start's own rate limits a job that declares none, as one key, and the batch shows it", async () => {
    const starts: number[] = [];
    const executor: Executor = { parallel: 8, work: async () => (starts.push(Date.now()), 'ok') };
    const job = `free-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, newBatch(30, { job, maxConcurrency: 2, ratePerSecond: 10 }), { maxOpen: 10 });
    expect(batch.ratePerSecond).toBe(10);
    const runners = Array.from({ length: 2 }, () => new Runner(pool(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 }));
    for (const r of runners) r.watch(() => executor, 20);
    try {
      await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
        timeoutMs: 30_000,
      });
    } finally {
      await Promise.all(runners.map((r) => r.close()));
    }
    expect(starts).toHaveLength(30);
    // 10/s, burst 1, and 10 × 0.05 of lapsing tokens: at most 11 in any second.
    expect(mostInWindow(starts, 1_000)).toBeLessThanOrEqual(11);
    await expect(createBatch(db.sql, newBatch(1, { job, ratePerSecond: 0 }))).rejects.toThrow(
      /rateLimit.perSecond must be above 0/,
    );
  }, 60_000);

  it('holds across handoffs and takeovers: runners leaving and joining mid-batch, 3 rounds', async () => {
    for (let round = 0; round < 3; round++) {
      const starts: number[] = [];
      const executor: Executor = {
        parallel: 8,
        rateLimit: { perSecond: 20 },
        work: async () => (starts.push(Date.now()), await sleep(5), 'ok'),
      };
      const job = `moving-${round}-${Math.random().toString(36).slice(2, 8)}`;
      const { batch } = await createBatch(db.sql, newBatch(60, { job, maxConcurrency: 4 }), { maxOpen: 10 });
      const runner = () => new Runner(pool(), { maxRuns: 1, beatMs: 100, staleMs: 1_000, parallel: 8 });
      const first = Array.from({ length: 4 }, runner);
      for (const r of first) r.watch(() => executor, 20);
      await waitFor('some items to start', () => starts.length >= 15, { timeoutMs: 20_000 });
      // Two runners leave (their runs hand off, queued items and held tokens given up), two new
      // ones join and take the batch's runs over.
      await Promise.all(first.slice(0, 2).map((r) => r.close()));
      const later = Array.from({ length: 2 }, runner);
      for (const r of later) r.watch(() => executor, 20);
      try {
        await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
          timeoutMs: 30_000,
        });
      } finally {
        await Promise.all([...first.slice(2), ...later].map((r) => r.close()));
      }
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
      expect(starts).toHaveLength(60);
      expect(mostInWindow(starts, 1_000), `round ${round}`).toBeLessThanOrEqual(22);
      const rows = await itemRows(db.sql, batch.id);
      expect(rows.filter((r) => r.attempts !== 1)).toEqual([]);
    }
  }, 120_000);
});
