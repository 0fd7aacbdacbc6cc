import { describe, expect, it } from 'vitest';
import { ManualClock, Runner, createBatch, getBatch, type Executor, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { itemCounts, itemRows, newBatch, runOf } from './helpers.js';
import { never, sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();

describe('takeover', () => {
  it('never takes a batch from a run that keeps beating', async () => {
    const gate = deferred();
    const a = new Runner(db.connect({ max: 3 }), { beatMs: 40, staleMs: 1_000, parallel: 2 });
    const { batch } = await a.start(newBatch(3), {}, async () => gate.promise);
    const runA = runOf(a, batch.id);
    // Four others with a stale limit of 600 ms (15 of A's beats, room for a loaded machine) try
    // for 1.5 s: A's beats keep the batch fresh.
    const others = Array.from({ length: 4 }, () => new Runner(db.connect({ max: 1 }), { beatMs: 50, staleMs: 600 }));
    const until = Date.now() + 1_500;
    const taken = await Promise.all(
      others.map(async (o) => {
        let n = 0;
        while (Date.now() < until) {
          if (await o.takeOver(() => ({ work: async () => 'other' }), batch.id)) n++;
          await sleep(10);
        }
        return n;
      }),
    );
    expect(taken).toEqual([0, 0, 0, 0]);
    gate.resolve();
    expect((await runA).outcome).toBe('succeeded');
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', runs: 1 });
  });

  it('lets exactly one of many concurrent runners take over an unowned or stale batch', async () => {
    for (let round = 0; round < 4; round++) {
      let batchId: string;
      if (round % 2 === 0) {
        batchId = (await createBatch(db.sql, newBatch(4))).batch.id;
      } else {
        // A run that never beats again and whose work never returns.
        const dead = new Runner(db.connect({ max: 1 }), { clock: new ManualClock(), beatMs: 50, staleMs: 200 });
        batchId = (await dead.start(newBatch(4), {}, () => never())).batch.id;
        await waitFor('stale', async () => {
          const [r] = await db.sql<{ stale: boolean }[]>`select beat_at < now() - interval '1 second' as stale
            from leasehold_runs where batch_id = ${batchId}`;
          return r.stale;
        });
      }
      // Stale after 1 s: the winner's run beats every 50 ms, so under load (CI, 2 cores) it is not
      // stale yet when a slower racer looks, and a second takeover would be a real double owner.
      const runners = Array.from({ length: 8 }, () => new Runner(db.connect({ max: 1 }), { beatMs: 50, staleMs: 1_000 }));
      const work: ItemWork = async ({ key }) => key;
      const runs = await Promise.all(
        runners.map((r) => r.takeOver(() => ({ work }), batchId).then((b) => b && runOf(r, batchId))),
      );
      const won = runs.filter((r) => r !== undefined);
      expect(won).toHaveLength(1);
      expect(won[0]!.outcome).toBe('succeeded');
      expect(await getBatch(db.sql, batchId)).toMatchObject({ status: 'succeeded', runs: round % 2 === 0 ? 1 : 2 });
    }
  });

  it('keeps taking over runnable batches when an older batch has a job this runner does not know', async () => {
    const retired = await createBatch(db.sql, newBatch(2, { job: 'retired', datasource: 'watch' }));
    const current = await createBatch(db.sql, newBatch(3, { job: 'test', datasource: 'watch' }));
    const executor: Executor = { work: async ({ key }) => key };
    await runUntilEnd(db.sql, current.batch.id, (b) => (b.job === 'test' ? executor : undefined), {
      runner: { beatMs: 30, staleMs: 300 },
      timeoutMs: 3_000,
      everyMs: 10,
    });
    expect(await getBatch(db.sql, current.batch.id)).toMatchObject({ status: 'succeeded' });
    // The unknown one is left open and unowned for a process that knows its job.
    expect(await getBatch(db.sql, retired.batch.id)).toMatchObject({ status: 'open', ownerProcess: null, beatAt: null });
    expect(await itemCounts(db.sql, retired.batch.id)).toEqual({ pending: 2, running: 0, done: 0, failed: 0 });
    expect((await itemRows(db.sql, retired.batch.id)).every((i) => i.attempts === 0)).toBe(true);
  });
});
