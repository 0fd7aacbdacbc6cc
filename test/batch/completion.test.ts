// Early completion (docs/design.md, "End"; issue 39 item 5): `minSucceeded` ends a batch
// `succeeded` once that many of its items are done, across all its runs; the rest never run
// (pending stay pending, running ones are given back with their attempt and told to stop), and
// the end is written once, with its Batch Finished event.
import { describe, expect, it } from 'vitest';
import { createBatch, type Executor } from '../../src/batch/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { sleep } from '../support/time.js';
import { itemCounts, itemRows, newBatch } from './helpers.js';

const db = useTestDatabase();

const connect = usePools(db, 3);

const uid = () => Math.random().toString(36).slice(2, 8);

describe('early completion', () => {
  it('ends a batch fanned out over 4 runs once 40 items are done, the rest never run, 3 rounds', async () => {
    for (let round = 0; round < 3; round++) {
      let started = 0;
      const executor: Executor = {
        parallel: 4,
        work: async () => {
          started++;
          await sleep(10 + Math.random() * 10);
          return 'ok';
        },
      };
      const { batch } = await createBatch(db.sql, newBatch(400, { job: `early-${uid()}`, maxConcurrency: 4, minSucceeded: 40 }), {
        maxOpen: 10,
      });
      expect(batch.minSucceeded).toBe(40);
      const ended = await runUntilEnd(db.sql, batch.id, () => executor, {
        runners: 4,
        pool: () => connect(),
        runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 },
        timeoutMs: 60_000,
        everyMs: 20,
      });
      expect(ended.status).toBe('succeeded');
      expect(ended.reason).toBe('completed early: minSucceeded 40 reached');
      const counts = await itemCounts(db.sql, batch.id);
      console.log(`[completion] round ${round}: ${JSON.stringify(counts)}, started ${started}`);
      expect(counts.done).toBeGreaterThanOrEqual(40);
      expect(counts.running).toBe(0);
      expect(counts.failed).toBe(0);
      // 4 runs of 4 slots: at most what was in flight or settling when the end landed ran past 40.
      expect(counts.pending).toBeGreaterThan(300);
      // Items given back used no attempt; the rest never started.
      const rows = await itemRows(db.sql, batch.id);
      expect(rows.filter((r) => r.state === 'pending' && r.attempts !== 0)).toEqual([]);
      const [runs] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_runs where batch_id = ${batch.id}`;
      expect(runs.n).toBe(0);
      const events = await db.sql<{ status: string }[]>`select detail->>'status' as status from leasehold_batch_events
        where batch_id = ${batch.id}`;
      expect(events).toEqual([{ status: 'succeeded' }]);
    }
  }, 180_000);

  it('firstSucceeded: failing items are tolerated until the first success ends the batch', async () => {
    const executor: Executor = {
      parallel: 2,
      attempts: 1,
      work: async ({ key }) => {
        await sleep(2);
        if (key !== 'k030') throw new Error('no');
        return 'found';
      },
    };
    const { batch } = await createBatch(
      db.sql,
      newBatch(200, { job: `first-${uid()}`, maxConcurrency: 2, minSucceeded: 1, toleratedFailures: { count: 1000 } }),
      { maxOpen: 10 },
    );
    const ended = await runUntilEnd(db.sql, batch.id, () => executor, {
      runners: 2,
      pool: () => connect(),
      // A fixed queue of 2 (the bound below): a default one deepens for 2 ms attempts.
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 2, queueDepth: 2 },
      timeoutMs: 60_000,
      everyMs: 20,
    });
    expect(ended.status).toBe('succeeded');
    expect(ended.reason).toBe('completed early: minSucceeded 1 reached');
    const counts = await itemCounts(db.sql, batch.id);
    expect(counts.done).toBe(1);
    expect(counts.running).toBe(0);
    expect(counts.pending).toBeGreaterThan(100);
    // Runs claim due items oldest first (all due at once here: in key order) and start them in
    // the order claimed, so every key before k030 was claimed and started before it. When k030's
    // success ended the batch, each had failed (tolerated, its one attempt used), or was still
    // held by a run (in a slot, queued, or settled with its move not yet landed) and was given
    // back with its attempt: never done, never pending with an attempt used.
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.find((r) => r.state === 'done')?.key).toBe('k030');
    const before = rows.filter((r) => r.key < 'k030');
    expect(
      before.filter((r) => !(r.state === 'failed' && r.attempts === 1) && !(r.state === 'pending' && r.attempts === 0)),
    ).toEqual([]);
    // Given back: at most what the 2 runs held besides k030, each `parallel + queueDepth` (2 + 2)
    // claimed items and as many settled ones whose move had not landed; the rest failed.
    const givenBack = before.filter((r) => r.state === 'pending').length;
    console.log(`[completion] firstSucceeded: ${counts.failed} failed, ${givenBack} keys before k030 given back`);
    expect(givenBack).toBeLessThanOrEqual(2 * (2 + 2) * 2 - 1);
    expect(counts.failed).toBeGreaterThanOrEqual(30 - givenBack);
  }, 60_000);

  it('a batch with fewer items than minSucceeded ends as usual, when its items are done', async () => {
    const { batch } = await createBatch(db.sql, newBatch(5, { job: `few-${uid()}`, minSucceeded: 10 }), { maxOpen: 10 });
    const ended = await runUntilEnd(db.sql, batch.id, () => ({ parallel: 2, work: async () => 'ok' }), {
      pool: () => connect(),
      runner: { maxRuns: 1, beatMs: 100, staleMs: 5_000 },
      timeoutMs: 30_000,
    });
    expect(ended).toMatchObject({ status: 'succeeded', reason: null, counts: { done: 5 } });
  }, 60_000);

  it('refuses a minSucceeded that is not a whole number from 1', async () => {
    for (const minSucceeded of [0, 1.5, -1, 10_000_001]) {
      await expect(createBatch(db.sql, newBatch(1, { minSucceeded }))).rejects.toThrow(
        /completion.minSucceeded must be a whole number/,
      );
    }
  });
});
