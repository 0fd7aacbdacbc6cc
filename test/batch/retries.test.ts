import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Runner, backoffIntervalMs, getBatch, retryDelayMs, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { installAudit, itemChanges, itemRows, newBatch, runOf, tally } from './helpers.js';
import { never } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { histogram, histogramLine, mulberry32 } from '../support/random.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

/** Work that fails `key`'s first `fails` attempts (Infinity: always) and passes the others. */
function failing(fails: Record<string, number>, calls: string[]): ItemWork {
  return async ({ key, attempt }) => {
    calls.push(key);
    if (attempt <= (fails[key] ?? 0)) throw new Error(`${key} failed attempt ${attempt}`);
    return { key, attempt };
  };
}

describe('retries', () => {
  it('ends an item that fails twice then passes done after 3 attempts, and an always failing one failed', async () => {
    const calls: string[] = [];
    const runner = new Runner(db.sql, { attempts: 3, backoffMs: 10, parallel: 4 });
    const b = newBatch(4, {
      items: [{ key: 'flaky' }, { key: 'bad' }, { key: 'ok1' }, { key: 'ok2' }],
    });
    const { batch } = await runner.start(b, {}, failing({ flaky: 2, bad: Infinity }, calls));
    const result = await runOf(runner, batch.id);

    expect(result).toMatchObject({ outcome: 'failed', finishedItems: 4 });
    const items = Object.fromEntries((await itemRows(db.sql, batch.id)).map((i) => [i.key, i]));
    expect(items.flaky).toMatchObject({ state: 'done', attempts: 3, error: null, output: { key: 'flaky', attempt: 3 } });
    expect(items.bad).toMatchObject({ state: 'failed', attempts: 3, error: 'bad failed attempt 3', output: null });
    expect(items.ok1).toMatchObject({ state: 'done', attempts: 1 });
    expect(items.ok2).toMatchObject({ state: 'done', attempts: 1 });
    expect(Object.fromEntries(tally(calls))).toEqual({ flaky: 3, bad: 3, ok1: 1, ok2: 1 });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({
      status: 'failed',
      counts: { pending: 0, running: 0, done: 3, failed: 1 },
    });
  });

  it('succeeds a batch whose items all pass in the end, and takes attempts from the job over the runner', async () => {
    const calls: string[] = [];
    const runner = new Runner(db.sql, { attempts: 1, backoffMs: 5 });
    const b = newBatch(2, { items: [{ key: 'a' }, { key: 'b' }] });
    const { batch } = await runner.start(b, {}, { work: failing({ a: 4 }, calls), attempts: 5 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 2 });
    expect((await itemRows(db.sql, batch.id)).map((i) => [i.key, i.state, i.attempts])).toEqual([
      ['a', 'done', 5],
      ['b', 'done', 1],
    ]);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
  });

  it('waits a random time within backoff × 2^(attempt−1) before each retry', async () => {
    const backoffMs = 100;
    const runner = new Runner(db.sql, { attempts: 3, backoffMs, parallel: 6 });
    const b = newBatch(6);
    const startedAt = new Map<string, number>();
    const fail = failing(Object.fromEntries(b.items.map((i) => [i.key, Infinity])), []);
    const { batch } = await runner.start(b, {}, async (item) => {
      startedAt.set(`${item.key}/${item.attempt}`, Date.now());
      return fail(item);
    });
    expect((await runOf(runner, batch.id)).outcome).toBe('failed');

    const changes = await itemChanges(db.sql, batch.id);
    const retries = changes.filter((c) => c.old_state === 'running' && c.state === 'pending');
    expect(retries).toHaveLength(12);
    for (const [attempt, base] of [
      [1, backoffMs],
      [2, 2 * backoffMs],
    ]) {
      const delays = retries.filter((c) => c.attempts === attempt).map((c) => c.delay_ms);
      expect(delays).toHaveLength(6);
      for (const d of delays) {
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(base);
      }
      // Jitter: six draws of Math.random give six different delays.
      expect(new Set(delays).size).toBeGreaterThan(1);
    }
    // No retry started before its time had come (database clock; same machine). A run may claim
    // it shortly before, to start it on time.
    for (const r of retries) {
      const next = changes.find((c) => c.key === r.key && c.seq > r.seq && c.state === 'running');
      expect(next).toBeDefined();
      expect(startedAt.get(`${r.key}/${r.attempts + 1}`)).toBeGreaterThanOrEqual(r.run_after.getTime());
    }
  });

  it('draws jitter from the random option: the delay is that fraction of the backoff interval', async () => {
    expect(retryDelayMs(100, 1, () => 0)).toBe(0);
    expect(retryDelayMs(100, 3, () => 0.8)).toBe(320);
    expect(backoffIntervalMs(100, 3)).toBe(400);
    for (const [random, factor] of [
      [0.8, 0.8],
      [0.25, 0.25],
    ]) {
      const runner = new Runner(db.sql, { attempts: 3, backoffMs: 40, random: () => random });
      const { batch } = await runner.start(newBatch(1, { items: [{ key: 'x' }] }), {}, failing({ x: Infinity }, []));
      await runOf(runner, batch.id);
      const delays = (await itemChanges(db.sql, batch.id))
        .filter((c) => c.old_state === 'running' && c.state === 'pending')
        .map((c) => c.delay_ms);
      expect(delays).toHaveLength(2);
      expect(delays[0]).toBeCloseTo(40 * factor, 0);
      expect(delays[1]).toBeCloseTo(80 * factor, 0);
    }
  });

  it('spreads the retries of 1,000 items that failed at once over the whole backoff interval, not its start', async () => {
    // A downstream blip: every item's first attempt fails, all within a moment; the second passes.
    // Seeded draws, so the stored delays are the same on every run.
    const N = 1_000;
    const backoffMs = 4_000;
    const failedAt = new Map<string, number>();
    const retriedAt = new Map<string, number>();
    const runner = new Runner(db.sql, { parallel: 100, attempts: 2, backoffMs, random: mulberry32(19) });
    const { batch } = await runner.start(newBatch(N), {}, async ({ key, attempt }) => {
      if (attempt === 1) {
        failedAt.set(key, Date.now());
        throw new Error('downstream unavailable');
      }
      retriedAt.set(key, Date.now());
      return 'ok';
    });
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');

    // The wave as the database stored it: each retry's delay (run_after − updated_at of the move).
    const delays = (await itemChanges(db.sql, batch.id))
      .filter((c) => c.old_state === 'running' && c.state === 'pending')
      .map((c) => c.delay_ms);
    expect(delays).toHaveLength(N);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(backoffMs);
    }
    const waveMs = Math.max(...failedAt.values()) - Math.min(...failedAt.values());
    // Each quarter of the interval holds about a quarter of the wave (expected 250 each; the old
    // rule, backoff plus up to 25 %, put all 1,000 past the interval's end).
    const quarters = histogram(delays, backoffMs, 4);
    for (const q of quarters) {
      expect(q).toBeGreaterThanOrEqual(200);
      expect(q).toBeLessThanOrEqual(300);
    }
    const tenths = histogram(delays, backoffMs, 10);
    expect(Math.min(...tenths)).toBeGreaterThanOrEqual(60);
    // As the downstream saw them: each item's wait from its failure to its retry's arrival (its
    // delay, plus the move's round trip and the start's lateness), spread the same way.
    const waits = [...retriedAt].map(([key, t]) => t - failedAt.get(key)!);
    expect(waits).toHaveLength(N);
    const waited = histogram(waits, backoffMs, 4);
    // Real time on a shared machine adds lateness to each wait; the spread must survive it.
    for (const q of waited) expect(q).toBeGreaterThanOrEqual(100);
    // And the wave's arrivals after its first failure, in tenths of the interval (the last tenth
    // holds those past it: the wave's own span).
    const first = Math.min(...failedAt.values());
    const arrivals = histogram(
      [...retriedAt.values()].map((t) => t - first),
      backoffMs,
      10,
    );
    console.log(
      `retry wave: ${N} items failed within ${waveMs} ms; their due times over the ${backoffMs} ms backoff interval, ` +
        `in tenths: ${histogramLine(tenths)} (quarters ${quarters.join(' ')}); waits until the retry arrived, in quarters: ` +
        `${waited.join(' ')}; arrivals after the first failure, in tenths: ${histogramLine(arrivals)}`,
    );
  });

  it('counts the attempt an item was running when its run died', async () => {
    // attempts 2. 'first' dies in attempt 1: the next run gives it attempt 2.
    // 'second' failed attempt 1, then dies in attempt 2: attempts are used up, it ends failed
    // without running again. 'fine' passes at once.
    const attemptsOf: Record<string, number[]> = { first: [], second: [], fine: [] };
    const sqlA = db.connect({ max: 2 });
    const a = new Runner(sqlA, { clock: new ManualClock(), beatMs: 100, staleMs: 300, backoffMs: 0, parallel: 3 });
    const workA: ItemWork = async ({ key, attempt }) => {
      attemptsOf[key].push(attempt);
      if (key === 'fine') return 'A';
      if (key === 'second' && attempt === 1) throw new Error('first try failed');
      return never();
    };
    const b = newBatch(3, { items: [{ key: 'first' }, { key: 'second' }, { key: 'fine' }] });
    const { batch } = await a.start(b, {}, { work: workA, attempts: 2 });
    await waitFor('A to be stuck', async () => {
      const rows = await itemRows(db.sql, batch.id);
      const s = Object.fromEntries(rows.map((r) => [r.key, `${r.state}/${r.attempts}`]));
      return s.first === 'running/1' && s.second === 'running/2' && s.fine === 'done/1';
    });
    await sqlA.end({ timeout: 0 });

    const ranByB: { key: string; attempt: number }[] = [];
    const runner = new Runner(db.sql, { beatMs: 100, staleMs: 300 });
    const executor = {
      attempts: 2,
      work: async ({ key, attempt }: { key: string; attempt: number }) => {
        ranByB.push({ key, attempt });
        return 'B';
      },
    };
    await waitFor('takeover', () => runner.takeOver(() => executor, batch.id), { everyMs: 20 });
    const result = await runOf(runner, batch.id);

    expect(result.outcome).toBe('failed');
    expect(ranByB).toEqual([{ key: 'first', attempt: 2 }]);
    expect(attemptsOf).toEqual({ first: [1], second: [1, 2], fine: [1] });
    const items = Object.fromEntries((await itemRows(db.sql, batch.id)).map((i) => [i.key, i]));
    expect(items.first).toMatchObject({ state: 'done', attempts: 2, output: 'B', run_id: result.runId });
    expect(items.second).toMatchObject({ state: 'failed', attempts: 2, run_id: result.runId });
    expect(items.second.error).toMatch(/died/);
    expect(items.fine).toMatchObject({ state: 'done', attempts: 1, output: 'A' });
  });
});
