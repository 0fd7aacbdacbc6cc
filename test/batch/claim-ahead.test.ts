// The claim-ahead queue's depth (docs/design.md, "The pipelined run"): by default a run claims
// `parallel` items ahead, deepened for short attempts to what its slots start within 100 ms and
// two round trips at its mean attempt, at most 4 × `parallel`; a depth that was set stays as set. What a dead run held
// comes back through the takeover, each item at the cost of one attempt.
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Runner, createBatch, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never, sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { installAudit, itemCounts, itemRows, liveRuns, newBatch, runOf } from './helpers.js';

const db = useTestDatabase();
const PARALLEL = 4;
const STALE_MS = 400;

beforeAll(async () => {
  await installAudit(db.sql);
});

/** Keep the event loop busy for `ms` of real time: an attempt that lasts that long, never less. */
function spin(ms: number): void {
  const t = performance.now();
  while (performance.now() - t < ms);
}

/**
 * Work whose first `quick` attempts last `quickMs` (real time, so the run's mean attempt is about
 * that) and whose later attempts never end: the run's slots stay full and its queue stays as
 * deep as its last claims made it.
 */
function firstQuickThenStuck(quick: number, quickWork: () => Promise<void> | void): { work: ItemWork; started: () => number } {
  let started = 0;
  return {
    started: () => started,
    work: async () => {
      if (++started > quick) return never();
      await quickWork();
      return null;
    },
  };
}

/** Items the batch's store holds as running, read until two reads 200 ms apart agree. */
async function settledRunning(batchId: string): Promise<number> {
  let last = -1;
  for (;;) {
    const { running } = await itemCounts(db.sql, batchId);
    if (running === last) return running;
    last = running;
    await sleep(200);
  }
}

describe("a run's claim-ahead queue", () => {
  it('deepens for short attempts to at most 4 × parallel, and a takeover after a kill brings every item it held back', async () => {
    const total = 60;
    // Attempts of about 3 ms: the slots start 4 × 100 / 3 items in 100 ms, more than the cap.
    const a = firstQuickThenStuck(PARALLEL, () => spin(3));
    const sqlA = db.connect({ max: 3 });
    // Its beats never come (a frozen clock), so its run turns stale STALE_MS after its takeover.
    const clock = new ManualClock();
    clock.freeze();
    const runnerA = new Runner(sqlA, { clock, parallel: PARALLEL, beatMs: 100, staleMs: STALE_MS });
    const { batch } = await runnerA.start(newBatch(total), {}, a.work);
    // Before an attempt settled the queue holds `parallel` (2 × parallel held); once the quick
    // ones settled, the move that stored them claimed the deeper queue's room.
    await waitFor('the quick attempts settled', async () => (await itemCounts(db.sql, batch.id)).done === PARALLEL);
    const held = await settledRunning(batch.id);
    expect(held).toBeGreaterThan(2 * PARALLEL);
    expect(held).toBeLessThanOrEqual(PARALLEL + 4 * PARALLEL);
    expect(a.started()).toBe(2 * PARALLEL);
    const heldKeys = (await itemRows(db.sql, batch.id)).filter((i) => i.state === 'running').map((i) => i.key);

    // Killed: its connections drop, it never beats, moves or gives anything back again.
    await sqlA.end({ timeout: 0 });
    const b = new Runner(db.connect({ max: 3 }), { parallel: PARALLEL, beatMs: 100, staleMs: STALE_MS });
    const work: ItemWork = async () => null;
    await waitFor('takeover', () => b.takeOver(() => ({ work }), batch.id), { everyMs: 20 });
    const result = await runOf(b, batch.id);
    expect(result.outcome).toBe('succeeded');

    const items = await itemRows(db.sql, batch.id);
    expect(items.filter((i) => i.state !== 'done')).toEqual([]);
    // Each item the dead run held (executing or queued) counted one attempt and ran again; no
    // other item used more than one.
    expect(items.filter((i) => i.attempts === 2).map((i) => i.key)).toEqual(heldKeys);
    expect(items.filter((i) => i.attempts === 1)).toHaveLength(total - heldKeys.length);
    expect(await liveRuns(db.sql, batch.id)).toEqual([]);
    await b.close();
  });

  it('holds twice the cap for attempts under a millisecond: a run of no-op items holds up to 10 × parallel', async () => {
    const { batch } = await createBatch(db.sql, newBatch(120));
    // No-op attempts: quick, so the run holds twice the cap (5 × parallel): the items the last
    // statement claimed, which start while the next one travels, and room for its claim. Sixty
    // of them, so the run's mean attempt (a moving average over 16) is under a millisecond even
    // when its first attempts were slow (cold code, a loaded machine: 4 of them were not, once
    // in CI here).
    const quick = 60;
    const a = firstQuickThenStuck(quick, () => undefined);
    const runner = new Runner(db.connect({ max: 3 }), { parallel: PARALLEL, beatMs: 100, staleMs: 60_000 });
    await runner.takeOver(() => ({ work: a.work }), batch.id);
    await waitFor('the no-op attempts settled', async () => (await itemCounts(db.sql, batch.id)).done === quick);
    const held = await settledRunning(batch.id);
    expect(held).toBeGreaterThan(PARALLEL + 4 * PARALLEL);
    expect(held).toBeLessThanOrEqual(2 * (PARALLEL + 4 * PARALLEL));
    await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
  });

  it('keeps parallel ahead for attempts of a second: it holds no item its slots would not start soon', async () => {
    const { batch } = await createBatch(db.sql, newBatch(40));
    // Attempts of 1 s: the slots start 4 × (100 + 2 × round trip) / 1,000 items in the horizon,
    // fewer than `parallel` while round trips stay under 450 ms.
    const a = firstQuickThenStuck(PARALLEL, () => sleep(1_000));
    const runner = new Runner(db.connect({ max: 3 }), { parallel: PARALLEL, beatMs: 100, staleMs: 60_000 });
    await runner.takeOver(() => ({ work: a.work }), batch.id);
    await waitFor('the first attempts settled', async () => (await itemCounts(db.sql, batch.id)).done === PARALLEL);
    expect(await settledRunning(batch.id)).toBe(2 * PARALLEL);
    expect(a.started()).toBe(2 * PARALLEL);
    await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
  });

  it('holds a queue depth that was set whatever the attempts last', async () => {
    const { batch } = await createBatch(db.sql, newBatch(40));
    const a = firstQuickThenStuck(PARALLEL, () => spin(3));
    const runner = new Runner(db.connect({ max: 3 }), { parallel: PARALLEL, queueDepth: 2, beatMs: 100, staleMs: 60_000 });
    await runner.takeOver(() => ({ work: a.work }), batch.id);
    await waitFor('the quick attempts settled', async () => (await itemCounts(db.sql, batch.id)).done === PARALLEL);
    expect(await settledRunning(batch.id)).toBe(PARALLEL + 2);
    await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
  });
});
