// Fleet-wide rate limits per key (docs/design.md, "Rate limits"; issue 22 item 1): 4 runners (each
// its own pool, as processes are) fan one batch out over 4 runs with `parallel` 8; items of key
// `slow` are limited to 20/s and items of key `fast` to 400/s. Every start is timed here; the
// checks are the limit's bound in every one-second window, the slow key's throughput, that the
// fast key is not held back, and that waiting for a token uses no attempt.
import { describe, expect, it } from 'vitest';
import { Runner, createBatch, getBatch, setRateLimit, type Executor } from '../../src/batch/index.js';
import { RetryAfterError } from '../../src/batch/errors.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { itemRows, newBatch } from './helpers.js';
import { mostInWindow } from '../support/random.js';

const db = useTestDatabase();

const pool = usePools(db, 3);

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
    await runUntilEnd(db.sql, batch.id, () => executor, {
      runners: 4,
      pool: () => pool(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 },
      timeoutMs: 60_000,
      everyMs: 10,
    });
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
      // other key's waits do not hold it back), with room for a loaded machine (7/s seen under
      // a CI-like load on PostgreSQL 15).
      expect(rate).toBeGreaterThanOrEqual(4);
    }
  }, 90_000);

  it("a start's own rate limits a job that declares none, as one key, and the batch shows it", async () => {
    const starts: number[] = [];
    const executor: Executor = { parallel: 8, work: async () => (starts.push(Date.now()), 'ok') };
    const job = `free-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, newBatch(30, { job, maxConcurrency: 2, ratePerSecond: 10 }), { maxOpen: 10 });
    expect(batch.ratePerSecond).toBe(10);
    await runUntilEnd(db.sql, batch.id, () => executor, {
      runners: 2,
      pool: () => pool(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 },
      timeoutMs: 30_000,
      everyMs: 10,
    });
    expect(starts).toHaveLength(30);
    // 10/s, burst 1, and 10 × 0.05 of lapsing tokens: at most 11 in any second.
    expect(mostInWindow(starts, 1_000)).toBeLessThanOrEqual(11);
    for (const ratePerSecond of [0, 1e-300, 0.0009]) {
      await expect(createBatch(db.sql, newBatch(1, { job, ratePerSecond }))).rejects.toThrow(
        /rateLimit.perSecond must be a number from 0.001 to 1000000/,
      );
    }
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

  it('gives each key its own rate with a perSecond function: a slow key at 5/s does not hold back a fast one at 500/s', async () => {
    const starts: Record<string, number[]> = { slow: [], fast: [] };
    const executor: Executor = {
      parallel: 8,
      rateLimit: { key: (item) => (item.input as { k: string }).k, perSecond: (k) => (k === 'slow' ? 5 : 500) },
      work: async ({ input }) => {
        starts[(input as { k: string }).k]!.push(Date.now());
        return 'ok';
      },
    };
    // 30 slow items (6 s at 5/s) among 150 fast ones (0.3 s at 500/s), interleaved.
    const items = Array.from({ length: 180 }, (_, i) => ({
      key: `i${String(i).padStart(4, '0')}`,
      input: { k: i % 6 === 0 ? 'slow' : 'fast' },
    }));
    const job = `per-key-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, { ...newBatch(0, { job, maxConcurrency: 2 }), items }, { maxOpen: 10 });
    await runUntilEnd(db.sql, batch.id, () => executor, {
      runners: 2,
      pool: () => pool(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 },
      timeoutMs: 60_000,
      everyMs: 10,
    });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    const slow = [...starts.slow!].sort((x, y) => x - y);
    const fast = [...starts.fast!].sort((x, y) => x - y);
    expect([slow.length, fast.length]).toEqual([30, 150]);
    // The slow key's bound: 5 + burst 1 + 5 × 0.05 of lapsing tokens in any second.
    expect(mostInWindow(slow, 1_000)).toBeLessThanOrEqual(6);
    // The fast key is not held to the slow one's rate: all of it started before the slow key's
    // half (3 s at 5/s), where one rate for both would have taken 36 s.
    expect(fast.at(-1)!).toBeLessThan(slow[15]!);
    expect((await itemRows(db.sql, batch.id)).filter((r) => r.attempts !== 1)).toEqual([]);
  }, 90_000);

  it("pauses only the item's key across the fleet on a RetryAfterError: that key starts nothing for the wait, the other goes on, no attempt used", async () => {
    const starts: Record<string, number[]> = { a: [], b: [] };
    let pausedAt = 0;
    const executor: Executor = {
      parallel: 8,
      rateLimit: { key: (item) => (item.input as { k: string }).k, perSecond: 40 },
      work: async ({ key, input }) => {
        const k = (input as { k: string }).k;
        starts[k]!.push(Date.now());
        if (key === 'a0010' && pausedAt === 0) {
          pausedAt = Date.now();
          throw new RetryAfterError(2_000);
        }
        return k;
      },
    };
    // 60 items of key a and 120 of key b, each 40/s: b runs for about 3 s.
    const items = [
      ...Array.from({ length: 60 }, (_, i) => ({ key: `a${String(i).padStart(4, '0')}`, input: { k: 'a' } })),
      ...Array.from({ length: 120 }, (_, i) => ({ key: `b${String(i).padStart(4, '0')}`, input: { k: 'b' } })),
    ].sort((x, y) => (x.key.slice(1) < y.key.slice(1) ? -1 : x.key.slice(1) > y.key.slice(1) ? 1 : 0));
    const job = `paused-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, { ...newBatch(0, { job, maxConcurrency: 2 }), items }, { maxOpen: 10 });
    await runUntilEnd(db.sql, batch.id, () => executor, {
      runners: 2,
      pool: () => pool(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 8 },
      timeoutMs: 60_000,
      everyMs: 10,
    });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    expect(pausedAt).toBeGreaterThan(0);
    // Past the first 300 ms (starts already on their way in either run, and tokens the other run
    // took just before the pause reached the store), key a starts nothing until the 2 s are up.
    const during = (k: string) => starts[k]!.filter((t) => t > pausedAt + 300 && t < pausedAt + 1_950);
    expect(during('a')).toEqual([]);
    // Key b went on meanwhile (40/s for 1.65 s is 66; a loaded machine gets room).
    expect(during('b').length).toBeGreaterThanOrEqual(15);
    // The wait used no attempt: every item ended done at 1 attempt, a0010 after its second start.
    expect(starts.a!.length).toBe(61);
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.filter((r) => r.attempts !== 1)).toEqual([]);
    const [bucket] = await db.sql<
      { paused_until: Date | null }[]
    >`select paused_until from leasehold_rate_buckets where job = ${job} and key = 'a'`;
    expect(bucket!.paused_until).toBeInstanceOf(Date);
    const [other] = await db.sql<
      { paused_until: Date | null }[]
    >`select paused_until from leasehold_rate_buckets where job = ${job} and key = 'b'`;
    expect(other!.paused_until).toBeNull();
  }, 90_000);

  it('takes a rate set while the batch runs: a batch without a limit is held to it from the next beat on', async () => {
    const starts: number[] = [];
    // Items started before the PATCH wait for it, so only the runs' slots (4 each) start
    // unlimited: unheld, a loaded machine started 78 of the 100 before the new rate arrived.
    let release!: () => void;
    const patched = new Promise<void>((resolve) => (release = resolve));
    const executor: Executor = {
      parallel: 4,
      work: async () => (starts.push(Date.now()), await patched, await sleep(20), 'ok'),
    };
    const job = `patched-${Math.random().toString(36).slice(2, 8)}`;
    const { batch } = await createBatch(db.sql, newBatch(100, { job, maxConcurrency: 2 }), { maxOpen: 10 });
    const runners = Array.from({ length: 2 }, () => new Runner(pool(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 }));
    for (const r of runners) r.watch(() => executor, 20);
    let patchedAt = 0;
    try {
      await waitFor('a run to fill its slots unlimited', () => starts.length >= 4, { timeoutMs: 20_000 });
      expect((await setRateLimit(db.sql, batch.id, 10)).ratePerSecond).toBe(10);
      patchedAt = Date.now();
      release();
      await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
        timeoutMs: 60_000,
      });
    } finally {
      release();
      await Promise.all(runners.map((r) => r.close()));
    }
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', ratePerSecond: 10 });
    expect(starts).toHaveLength(100);
    // From a second after the change (the beats that bring it, items already queued), at most
    // 10 + burst 1 + 10 × 0.05 in any second.
    const after = starts.filter((t) => t > patchedAt + 1_000);
    expect(after.length).toBeGreaterThanOrEqual(40);
    expect(mostInWindow(after, 1_000)).toBeLessThanOrEqual(11);
  }, 90_000);

  it('brings forward the items given back at the old rate when a PATCH raises it, leaving retries and Retry-After waits alone', async () => {
    const job = `raised-${Math.random().toString(36).slice(2, 8)}`;
    const executor: Executor = { parallel: 4, rateLimit: { perSecond: 1 }, work: async () => 'ok' };
    const { batch } = await createBatch(db.sql, newBatch(40, { job, ratePerSecond: 0.2 }), { maxOpen: 10 });
    const runnerOf = () => new Runner(pool(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 });
    const latest = async () =>
      (
        await db.sql<{ s: number | null }[]>`select extract(epoch from max(run_after) - now())::float8 as s
          from leasehold_items where batch_id = ${batch.id} and state = 'pending' and error is null`
      )[0]!.s ?? 0;
    // At 0.2/s the run keeps one item and gives the rest back, spaced 5 s apart. It stops before
    // the PATCH, so no item is given back at the old rate after it (a running run learns the new
    // rate at its next take or beat).
    const first = runnerOf();
    first.watch(() => executor, 20);
    try {
      await waitFor('items given back past 10 s out', async () => (await latest()) > 10, { timeoutMs: 20_000 });
    } finally {
      await first.close();
    }
    // A retry's backoff (it has an error) keeps its time.
    const [kept] = await db.sql<
      { key: string }[]
    >`update leasehold_items set error = 'boom', run_after = now() + interval '1 hour'
      where batch_id = ${batch.id} and key = (select key from leasehold_items where batch_id = ${batch.id} and state = 'pending'
      order by run_after desc limit 1) returning key`;
    const before = await latest();
    expect(before).toBeGreaterThan(5);
    expect((await setRateLimit(db.sql, batch.id, 200)).ratePerSecond).toBe(200);
    // Scaled by 0.2 / 200: what was due in 5 s or more is now due within a fraction of a second.
    expect(await latest()).toBeLessThan(before / 100);
    const [retry] = await db.sql<{ s: number }[]>`select extract(epoch from run_after - now())::float8 as s
      from leasehold_items where batch_id = ${batch.id} and key = ${kept!.key}`;
    expect(retry!.s).toBeGreaterThan(3_000);
    await db.sql`update leasehold_items set error = null, run_after = now() where batch_id = ${batch.id} and key = ${kept!.key}`;
    await runUntilEnd(db.sql, batch.id, () => executor, {
      pool: () => pool(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 },
      timeoutMs: 30_000,
      everyMs: 10,
    });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', ratePerSecond: 200 });
    expect(new Set(await itemRows(db.sql, batch.id).then((rows) => rows.map((r) => r.attempts)))).toEqual(new Set([1]));
  }, 60_000);
});
