import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { NO_LIMIT } from '../../src/batch/sql/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();

describe('a run leaving for want of work', () => {
  it("learns its batch was lost, not that it is the last run, when another run's finish deleted its row meanwhile", async () => {
    const { batch } = await createBatch(db.sql, newBatch(300, { maxConcurrency: 2 }));
    const runs = [crypto.randomUUID(), crypto.randomUUID()];
    for (const run of runs) {
      const taken = await q.takeOver(db.sql, {
        run,
        process: crypto.randomUUID(),
        staleMs: 30_000,
        maxRunning: NO_LIMIT,
        batchId: batch.id,
      });
      expect(taken?.id).toBe(batch.id);
    }
    // The other run's finish, held open in a real transaction: every run row of the batch deleted
    // first, then the batch ended (as finishBatch does).
    const other = db.connect({ max: 1 });
    const commit = deferred();
    const deleted = deferred();
    const finish = other.begin(async (tx) => {
      await tx`delete from leasehold_runs where batch_id = ${batch.id}`;
      await tx`update leasehold_batches set status = 'succeeded', live_runs = 0, finished_at = now() where id = ${batch.id}`;
      deleted.resolve();
      await commit.promise;
    });
    await deleted.promise;
    const leaving = q.handOffRun(db.sql, {
      batchId: batch.id,
      run: runs[0],
      moves: q.encodeMoves([]),
      hold: '[]',
      recordProgress: false,
      leave: true,
    });
    // The server's own evidence: the leave waits on the finish's locks.
    await waitFor('the leave to wait on a lock', async () => {
      const [r] = await db.sql<{ n: number }[]>`select count(*) as n from pg_stat_activity
        where wait_event_type = 'Lock' and query like '%left_batch%'`;
      return r.n > 0;
    });
    commit.resolve();
    await finish;
    await other.end();
    expect(await leaving).toMatchObject({ handed: false, kept: false });
  });
});
