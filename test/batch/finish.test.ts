import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Runner, getBatch, type BatchStatus, type ItemWork, type RunResult } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { batchChanges, installAudit, itemChanges, itemRows, liveRuns, newBatch, runOf } from './helpers.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';

const STALE_MS = 250;

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

/** Assert the batch left `open` exactly once, to `status`, and was never written after. */
async function expectFinishedOnce(batchId: string, status: BatchStatus, finisher: string): Promise<void> {
  const changes = await batchChanges(db.sql, batchId);
  const finishes = changes.filter((c) => c.old_status === 'open' && c.status !== 'open');
  expect(finishes).toHaveLength(1);
  expect(finishes[0]).toMatchObject({ status, old_finished_at: null, live_runs: 0 });
  // The finish ended the finisher's own lease (it still held it) and every other run's.
  expect(finishes[0].runs_ended).toContain(finisher);
  expect(await liveRuns(db.sql, batchId)).toEqual([]);
  expect(finishes[0].finished_at).toBeInstanceOf(Date);
  // Nothing touched the batch row once it was finished; finished_at was set that one time.
  expect(changes.filter((c) => c.old_status !== 'open')).toEqual([]);
  expect(changes.filter((c) => c.finished_at !== null)).toHaveLength(1);
  const b = await getBatch(db.sql, batchId);
  expect(b).toMatchObject({ status, finishedAt: finishes[0].finished_at, ownerProcess: null, beatAt: null });
  expect(b.counts.pending + b.counts.running).toBe(0);
}

describe('finishing a batch', () => {
  it('finishes exactly once, succeeded when every item is done', async () => {
    const runner = new Runner(db.sql, { parallel: 4 });
    const { batch } = await runner.start(newBatch(20), {}, async ({ key }) => key);
    const result = await runOf(runner, batch.id);
    expect(result).toMatchObject({ outcome: 'succeeded', finishedItems: 20 });
    await expectFinishedOnce(batch.id, 'succeeded', result.runId);
  });

  it('finishes exactly once, failed when any item failed', async () => {
    const runner = new Runner(db.sql, { parallel: 4, attempts: 2, backoffMs: 1 });
    const { batch } = await runner.start(newBatch(20), {}, async ({ key }) => {
      if (key === 'k013') throw new Error('no');
      return key;
    });
    const result = await runOf(runner, batch.id);
    expect(result).toMatchObject({ outcome: 'failed', finishedItems: 20 });
    await expectFinishedOnce(batch.id, 'failed', result.runId);
    expect((await getBatch(db.sql, batch.id)).counts).toEqual({ pending: 0, running: 0, waiting: 0, done: 19, failed: 1 });
  });

  it('finishes exactly once with the right outcome when its last move races a takeover', async () => {
    const ROUNDS = 16;
    for (let round = 0; round < ROUNDS; round++) {
      const expected: BatchStatus = round % 2 === 0 ? 'succeeded' : 'failed';
      // Two rounds of each fixed order, then the real race.
      const mode = round < 2 ? 'A first' : round < 4 ? 'B first' : 'race';
      const lastGate = deferred();
      const work: ItemWork = async ({ key }) => {
        if (key === 'last') await lastGate.promise;
        if (key === 'bad') throw new Error('bad item');
        return key;
      };
      // A never beats (its clock never moves), so its batch turns stale while 'last' runs.
      const a = new Runner(db.connect({ max: 2 }), {
        clock: new ManualClock(),
        beatMs: 50,
        staleMs: STALE_MS,
        parallel: 4,
        backoffMs: 0,
      });
      const b = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: STALE_MS, parallel: 4, backoffMs: 0 });
      const items = [{ key: 'a' }, { key: 'b' }, { key: 'last' }];
      if (expected === 'failed') items.push({ key: 'bad' });
      const { batch } = await a.start(newBatch(items.length, { items }), {}, { work, attempts: 3 });
      const runA = runOf(a, batch.id);
      await waitFor('only last left', async () => {
        const rows = await itemRows(db.sql, batch.id);
        return rows.every((r) => (r.key === 'last' ? r.state === 'running' : r.state === 'done' || r.state === 'failed'));
      });

      let tookOver = false;
      let runB: Promise<RunResult> | undefined;
      const tryTakeOver = async () => {
        tookOver = !!(await b.takeOver(() => ({ work, attempts: 3 }), batch.id));
        // Taken now, before the run can end and leave the runner's list.
        if (tookOver) runB = runOf(b, batch.id);
        return tookOver;
      };
      if (mode === 'A first') {
        lastGate.resolve();
        await runA;
        await sleep(STALE_MS);
        await tryTakeOver();
      } else if (mode === 'B first') {
        await waitFor('takeover', tryTakeOver, { everyMs: 5 });
      } else {
        // Land 'last' around the moment the batch turns stale (database clock) while B tries to
        // take it over as fast as it can: A's move and finish win some rounds, B's takeover others.
        const [{ ms }] = await db.sql<{ ms: number }[]>`select
            (extract(epoch from beat_at + ${STALE_MS} * interval '1 ms' - clock_timestamp()) * 1000)::float8 as ms
          from leasehold_runs where batch_id = ${batch.id}`;
        const offset = -15 + (30 * (round - 4)) / (ROUNDS - 5);
        setTimeout(() => lastGate.resolve(), Math.max(0, ms + offset));
        await sleep(Math.max(0, ms - 40));
        while (!(await tryTakeOver())) {
          const [{ status }] = await db.sql<{ status: BatchStatus }[]>`select status from leasehold_batches
            where id = ${batch.id}`;
          if (status !== 'open') break;
        }
      }
      lastGate.resolve();

      const results: RunResult[] = [await runA];
      if (runB) results.push(await runB);
      const finishers = results.filter((r) => r.outcome === 'succeeded' || r.outcome === 'failed');
      expect(finishers).toHaveLength(1);
      expect(finishers[0].outcome).toBe(expected);
      expect(results.filter((r) => r !== finishers[0]).map((r) => r.outcome)).toEqual(tookOver ? ['lost'] : []);
      if (tookOver) expect(results[0].outcome).toBe('lost');
      if (mode === 'A first') expect(finishers[0]).toBe(results[0]);
      if (mode === 'B first') expect(finishers[0]).toBe(results[1]);

      await expectFinishedOnce(batch.id, expected, finishers[0].runId);
      const rows = await itemRows(db.sql, batch.id);
      expect(rows.find((r) => r.key === 'last')).toMatchObject({ state: 'done' });
      const changes = await itemChanges(db.sql, batch.id);
      for (const r of rows) {
        expect(changes.filter((c) => c.key === r.key && (c.state === 'done' || c.state === 'failed'))).toHaveLength(1);
      }
      await b.close();
    }
  });
});
