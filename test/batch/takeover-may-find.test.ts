// Whether a takeover that took nothing should try again (docs/design.md, "Tenant fairness"): it
// may have skipped a batch only because another takeover held its row. A batch the runner skips
// itself (its own run's, or one whose job it does not know) is no reason to: a runner whose only
// waiting batch was such a one asked again and again for 2 s at every poll, about 40 statements
// a second from an idle runner.
import { describe, expect, it } from 'vitest';
import { Runner, createBatch } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

/**
 * A batch of one item that hangs in a run of a runner beating once a minute; `die()` puts the
 * run's beat an hour back, as a process that stopped beating leaves it.
 */
async function runningBatch(tenant: string) {
  const runner = new Runner(db.sql, { beatMs: 60_000, staleMs: 120_000, drainMs: 10 });
  const { batch } = await runner.start(newBatch(1, { tenant }), {}, { work: () => never() });
  await waitFor(
    'the item running',
    async () => (await db.sql`select 1 from leasehold_items where batch_id = ${batch.id} and state = 'running'`).length === 1,
  );
  const die = async () => {
    await db.sql`update leasehold_runs set beat_at = now() - interval '1 hour' where batch_id = ${batch.id}`;
  };
  return { runner, batch, die };
}

describe('takeoverMayFind', () => {
  it('finds a waiting batch, but not one the runner skips; a second batch of the tenant still counts', async () => {
    const first = (await createBatch(db.sql, newBatch(1, { tenant: 'skipper' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4 })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id] })).toBe(false);

    const second = (await createBatch(db.sql, newBatch(1, { tenant: 'skipper' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id] })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id, second.id] })).toBe(false);
  });

  it('with a batch named, answers for that batch whatever the skip list holds', async () => {
    const named = (await createBatch(db.sql, newBatch(1, { tenant: 'named' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { batchId: named.id, maxRunning: 4, skip: [named.id] })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { batchId: named.id, maxRunning: 0 })).toBe(false);
  });

  it('with staleMs, a stale run of the batch (at its target) is worth another try', async () => {
    const { runner, batch, die } = await runningBatch('stale-named');
    expect(await q.takeoverMayFind(db.sql, { batchId: batch.id, maxRunning: 4, staleMs: 60_000 })).toBe(false);
    await die();
    // At its target (one live run): only the stale run makes it worth a try.
    expect(await q.takeoverMayFind(db.sql, { batchId: batch.id, maxRunning: 4 })).toBe(false);
    expect(await q.takeoverMayFind(db.sql, { batchId: batch.id, maxRunning: 4, staleMs: 400 })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, staleMs: 400 })).toBe(true);
    await runner.close();
  });

  it('a takeover of a stale batch whose row another statement holds a moment takes it once the row is free', async () => {
    // As a callback's wake holds the batch row (test/batch/waits.test.ts, "a completion while
    // another run of the batch is taken over"): the takeover skipped it, found nothing below its
    // target and gave up.
    const { runner: first, batch, die } = await runningBatch('stale-held');
    await die();
    const second = new Runner(db.sql, { beatMs: 100, staleMs: 400 });
    const taken = await db.sql.begin(async (tx) => {
      await tx`select 1 from leasehold_batches where id = ${batch.id} for update`;
      const takeover = second.takeOver(() => ({ work: async () => 'done' }), batch.id);
      // Held past the takeover's first statement (which skips the row), well within its 2 s of tries.
      await new Promise((resolve) => setTimeout(resolve, 300));
      // An object, not an array: postgres.js awaits an array's members before it commits.
      return { takeover };
    });
    expect(await taken.takeover).toMatchObject({ id: batch.id });
    expect((await runOf(second, batch.id)).outcome).toBe('succeeded');
    await second.close();
    await first.close();
  });
});
