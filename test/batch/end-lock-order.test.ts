// The lock order of an end (issue 38: a deadlock in the server's log). Every statement locks a
// run's row before its batch's row. An end used to delete the runs that joined while it ran
// after it had locked the batch row, while such a run's first step held its own row and waited
// for the batch row (the stalled-runs reset): a deadlock, which PostgreSQL broke by aborting one.
// Here that interleaving is made with real transactions held open, and the server's own deadlock
// count says whether one happened.
import { describe, expect, it } from 'vitest';
import { cancelBatch, createBatch } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { cancelBatches } from '../../src/batch/sql/cancels.js';
import { NO_LIMIT } from '../../src/batch/sql/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { deferred, waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

const deadlocks = async () =>
  (await db.sql<{ n: number }[]>`select deadlocks::int as n from pg_stat_database where datname = current_database()`)[0].n;
const pidOf = async (s: Sql) => (await s<{ pid: number }[]>`select pg_backend_pid() as pid`)[0].pid;
const blockedBy = async (pid: number, by: number) =>
  (await db.sql<{ b: boolean }[]>`select ${by}::int = any(pg_blocking_pids(${pid}::int)) as b`)[0].b;

const takeOver = (sql: Sql, batchId: string, run: string) =>
  q.takeOver(sql, { run, process: crypto.randomUUID(), staleMs: 30_000, maxRunning: NO_LIMIT, batchId });

// The ends tried: the one-batch cancel, and a bulk cancel's chunk (the batch and another open one
// in one transaction, as src/batch/actions.ts sends it).
const ends: [string, (e: Sql, batchId: string) => Promise<unknown>][] = [
  ['a cancel', (e, batchId) => cancelBatch(e, batchId)],
  [
    "a bulk cancel's chunk",
    async (e, batchId) => {
      const { batch: other } = await createBatch(db.sql, newBatch(1));
      const r = await e.begin((tx) => cancelBatches(tx as unknown as Sql, [other.id, batchId]));
      return { status: r.cancelled.includes(batchId) ? 'cancelled' : 'open' };
    },
  ],
];

describe("an end and a run's first step", () => {
  it.each(ends)(
    'never deadlock: a run that joined while %s ran is ended before the batch row is locked (3 rounds)',
    async (_, endOf) => {
      for (let round = 0; round < 3; round++) {
        const { batch } = await createBatch(db.sql, newBatch(300, { maxConcurrency: 4 }));
        const first = crypto.randomUUID();
        expect((await takeOver(db.sql, batch.id, first))?.id).toBe(batch.id);
        const before = await deadlocks();

        // H holds the first run's row, so the end's delete of the run rows waits, with its snapshot
        // already taken.
        const h = db.connect({ max: 1, applicationName: 'leasehold-test-hold' });
        const e = db.connect({ max: 1, applicationName: 'leasehold-test-end', lockTimeoutMs: 20_000 });
        const s = db.connect({ max: 1, applicationName: 'leasehold-test-step', lockTimeoutMs: 20_000 });
        const releaseH = deferred();
        const commitS = deferred();
        const stepReset = deferred();
        try {
          const heldH = deferred<number>();
          const hold = h.begin(async (tx) => {
            await tx`select 1 from leasehold_runs where id = ${first} for update`;
            heldH.resolve(await pidOf(tx as unknown as Sql));
            await releaseH.promise;
          });
          const hPid = await heldH.promise;
          const ePid = await pidOf(e);
          const end = endOf(e, batch.id);
          await waitFor('the end to wait for the held run row', () => blockedBy(ePid, hPid));

          // A second run joins and commits: the end's snapshot does not see it.
          const late = crypto.randomUUID();
          expect((await takeOver(db.sql, batch.id, late))?.id).toBe(batch.id);
          // Its first step begins: its own row locked (the step's fence), not yet the batch row.
          const fenced = deferred<number>();
          const resetDone = deferred();
          const step = s.begin(async (tx) => {
            await tx`update leasehold_runs set settled = settled where id = ${late}`;
            fenced.resolve(await pidOf(tx as unknown as Sql));
            await stepReset.promise;
            // The stalled-runs reset of the step: the batch row, after the run's own.
            await tx`update leasehold_batches set stalled_runs = 0 where id = ${batch.id}`;
            resetDone.resolve();
            await commitS.promise;
          });
          const sPid = await fenced.promise;

          // The end goes on: it deletes the first run's row, locks the batch row, finds the late run.
          releaseH.resolve();
          await hold;
          await waitFor('the end to wait for the late run row', () => blockedBy(ePid, sPid));
          // Now the step wants the batch row (the server checks for a deadlock after 1 s).
          stepReset.resolve();
          const stepWait = await Promise.race([
            resetDone.promise.then(() => 'reset'),
            step.then(
              () => 'settled',
              (err: unknown) => `failed: ${String(err)}`,
            ),
            new Promise((r) => setTimeout(r, 5_000, 'still waiting after 5 s')),
          ]);
          commitS.resolve();
          const [stepOutcome, endOutcome] = await Promise.allSettled([step, end]);
          const found = (await deadlocks()) - before;
          console.log(
            `[lock-order] round ${round}: deadlocks ${found}, step ${stepOutcome.status}, end ${endOutcome.status}, step's batch update: ${String(stepWait)}`,
          );
          expect(found).toBe(0);
          expect(stepWait).toBe('reset');
          expect(stepOutcome.status).toBe('fulfilled');
          expect(endOutcome).toMatchObject({ status: 'fulfilled', value: { status: 'cancelled' } });
          // The batch is cancelled and has no run left.
          const [row] = await db.sql<{ status: string; runs: number }[]>`select status,
          (select count(*)::int from leasehold_runs where batch_id = ${batch.id}) as runs
          from leasehold_batches where id = ${batch.id}`;
          expect(row).toEqual({ status: 'cancelled', runs: 0 });
        } finally {
          for (const d of [releaseH, commitS, stepReset]) d.resolve();
          await Promise.all([h.end({ timeout: 1 }), e.end({ timeout: 1 }), s.end({ timeout: 1 })]);
        }
      }
    },
    60_000,
  );
});
