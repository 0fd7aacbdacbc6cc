// The statement first, for quick attempts (docs/design.md, "The pipelined run"): a run of
// attempts under a millisecond sends its next statement before it starts the items the last one
// claimed. Two of a breaker helper's finds, each failing on the first version of it:
// - a queued item started after its run had ended (a store failure ended it while the start was
//   scheduled, 8 of 10 rounds);
// - a batch its own moves end early ran items whose results it then dropped: they started before
//   the statement's answer said the batch ended (`minSucceeded`: 72 per round at `parallel` 8;
//   `toleratedFailures`: with two runs, 39-80; one run's own failures stop its starts, and the
//   case below with one run is a guard only).
import { describe, expect, it } from 'vitest';
import { PermanentItemError, Runner, createBatch, getBatch } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never, sleep } from '../support/time.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

describe('the statement first, for quick attempts', () => {
  it('starts no item once a store failure ended the run', async () => {
    for (let round = 0; round < 5; round++) {
      const { batch } = await createBatch(db.sql, newBatch(300, { datasource: `first-${round}` }));
      const pool = db.connect({ max: 3 });
      // One try per statement: the failure of the statement in flight ends the run at once.
      const runner = new Runner(pool, { parallel: 2, beatMs: 1_000, staleMs: 5_000, moveTries: 1 });
      let ended = false;
      const late: string[] = [];
      await runner.takeOver(
        () => ({
          work: async ({ key, signal }) => {
            if (ended || signal.aborted) late.push(key);
            // k101 holds one slot for good; k100 ends the pool while the queue waits behind the
            // slots, then settles (the mean attempt stays under a millisecond).
            if (key === 'k101') return never();
            if (key === 'k100') {
              await sleep(5);
              void pool.end({ timeout: 0 });
              await sleep(2);
            }
            return null;
          },
        }),
        batch.id,
      );
      const result = await runner.running(batch.id)!;
      ended = true;
      expect(result.outcome, `round ${round}`).toBe('store-error');
      // Whatever was scheduled before the end has had its turn.
      await sleep(50);
      expect(late, `round ${round}: items started after the run ended`).toEqual([]);
      await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
    }
  }, 60_000);

  it.each([
    { name: 'minSucceeded', extra: { minSucceeded: 500 }, fails: false },
    { name: 'toleratedFailures', extra: { toleratedFailures: { count: 20 } }, fails: true },
  ])('runs no item of a batch its own moves end early ($name) that it then leaves unrun', async ({ extra, fails }) => {
    const { batch } = await createBatch(db.sql, newBatch(3_000, { datasource: `early-${fails}`, ...extra }));
    const ran = new Set<string>();
    const runner = new Runner(db.connect({ max: 3 }), { parallel: 8, attempts: 1, beatMs: 1_000, staleMs: 5_000 });
    await runner.takeOver(
      () => ({
        work: async ({ key }) => {
          ran.add(key);
          // Every 40th item fails for good: the 21st failure ends the batch past its tolerance.
          if (fails && Number(key.slice(1)) % 40 === 39) throw new PermanentItemError('refused');
          return null;
        },
      }),
      batch.id,
    );
    const result = await runner.running(batch.id)!;
    expect(result.outcome).toBe(fails ? 'failed' : 'succeeded');
    const pendingRan = await db.sql<{ key: string }[]>`select key from leasehold_items
      where batch_id = ${batch.id} and state = 'pending'`;
    expect((await getBatch(db.sql, batch.id))?.counts.pending).toBeGreaterThan(0);
    // The items the batch left unrun never ran.
    expect(pendingRan.filter((r) => ran.has(r.key)).map((r) => r.key)).toEqual([]);
  });
});
