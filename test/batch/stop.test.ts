import { beforeAll, describe, expect, it } from 'vitest';
import { BatchFinishedError, ManualClock, Runner, cancelBatch, getBatch, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { installAudit, replacements, runEnd, itemChanges, itemCounts, itemRows, newBatch, runOf, tally } from './helpers.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

/**
 * Sequence number of the audit record where run `runId`'s lease ended (its row deleted), by a
 * statement that left the batch `status`; no takeover replaced it.
 */
async function releaseSeq(batchId: string, runId: string, status: string): Promise<number> {
  const end = await runEnd(db.sql, batchId, runId);
  expect(end.batch).toBeDefined();
  expect(end.batch!.status).toBe(status);
  expect(await replacements(db.sql, batchId)).toEqual([]);
  return end.seq;
}

/** Rejects when `signal` aborts, like work that honours cancellation. */
function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(new Error('interrupted'));
    signal.addEventListener('abort', () => reject(new Error('interrupted')), { once: true });
  });
}

describe('cancel', () => {
  it("stops a cancelled batch's run (lost); none of its later moves changes an item", async () => {
    // Round 0 learns of the cancel through its beat; round 1 never beats and learns through its moves.
    for (const beats of [true, false]) {
      const gate = deferred();
      const signals: AbortSignal[] = [];
      let started = 0;
      const work: ItemWork = async ({ key, signal }) => {
        if (++started > 4) {
          signals.push(signal);
          await gate.promise; // ignores the signal: its result comes after the cancel
        }
        return key;
      };
      const runner = new Runner(db.connect({ max: 3 }), {
        beatMs: 50,
        staleMs: 1_000,
        parallel: 3,
        ...(beats ? {} : { clock: new ManualClock() }),
      });
      const { batch } = await runner.start(newBatch(10), {}, work);
      const run = runOf(runner, batch.id);
      // Three in flight, and the last three claimed ahead into the run's queue.
      await waitFor('items in flight', async () => {
        const c = await itemCounts(db.sql, batch.id);
        return c.done === 4 && c.running === 6 && signals.length === 3;
      });

      const cancelled = await cancelBatch(db.sql, batch.id);
      expect(cancelled).toMatchObject({ status: 'cancelled', ownerProcess: null });
      expect(cancelled.finishedAt).toBeInstanceOf(Date);
      const atCancel = await itemRows(db.sql, batch.id);
      if (beats) {
        // The next beat finds the batch gone and tells the items to stop.
        await waitFor('items told to stop', () => signals.length === 3 && signals.every((s) => s.aborted));
      }
      gate.resolve();
      const result = await run;
      expect(result.outcome).toBe('lost');
      expect(result.finishedItems).toBe(4);

      expect(await itemRows(db.sql, batch.id)).toEqual(atCancel);
      const cancelSeq = await releaseSeq(batch.id, result.runId, 'cancelled');
      expect((await itemChanges(db.sql, batch.id)).filter((c) => c.seq > cancelSeq)).toEqual([]);
      // Cancel is for good: not again, and no runner takes it over.
      await expect(cancelBatch(db.sql, batch.id)).rejects.toBeInstanceOf(BatchFinishedError);
      const other = new Runner(db.sql, { beatMs: 10, staleMs: 20 });
      await sleep(30);
      expect(await other.takeOver(() => ({ work }), batch.id)).toBeUndefined();
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'cancelled', runs: 1 });
    }
  });

  it('changes no item after a cancel that lands at any moment of a busy run', async () => {
    for (let round = 0; round < 6; round++) {
      const runner = new Runner(db.connect({ max: 3 }), { beatMs: 20, staleMs: 1_000, parallel: 4 });
      const { batch } = await runner.start(newBatch(200), {}, async ({ key }) => {
        await sleep(Math.random() * 4);
        return key;
      });
      const run = runOf(runner, batch.id);
      await sleep(5 + round * 5);
      await cancelBatch(db.sql, batch.id);
      const result = await run;
      expect(result.outcome).toBe('lost');
      const cancelSeq = await releaseSeq(batch.id, result.runId, 'cancelled');
      const changes = await itemChanges(db.sql, batch.id);
      expect(changes.filter((c) => c.seq > cancelSeq)).toEqual([]);
      // Items keep the state they had; the run stored exactly what it reported.
      const after = await itemRows(db.sql, batch.id);
      expect(after.filter((i) => i.state === 'done')).toHaveLength(result.finishedItems);
      expect(after.filter((i) => i.state === 'done').length).toBeLessThan(200);
      await sleep(50);
      expect(await itemRows(db.sql, batch.id)).toEqual(after);
    }
  });
});

describe('handoff (runner.stop)', () => {
  it('counts interrupted in-flight attempts, leaves the batch unowned, and another runner finishes it', async () => {
    // Variants: in-flight work honours the stop signal; ignores it and finishes; stop via close().
    for (const variant of ['interrupted', 'finishes', 'close'] as const) {
      const completed: { by: 'A' | 'B'; key: string }[] = [];
      let started = 0;
      const executing: string[] = [];
      const workA: ItemWork = async ({ key, signal }) => {
        if (++started > 4) {
          executing.push(key);
          if (variant === 'finishes') {
            while (!signal.aborted) await sleep(5);
            await sleep(20);
          } else {
            await aborted(signal);
          }
        }
        completed.push({ by: 'A', key });
        return 'A';
      };
      const workB: ItemWork = async ({ key }) => {
        completed.push({ by: 'B', key });
        return 'B';
      };
      // Long stale limit: only the handoff can make the batch available this soon.
      const a = new Runner(db.connect({ max: 3 }), { beatMs: 50, staleMs: 60_000, parallel: 3 });
      const b = new Runner(db.connect({ max: 3 }), { beatMs: 50, staleMs: 60_000, parallel: 3 });
      const { batch } = await a.start(newBatch(10), {}, workA);
      // Three in flight, and the last three claimed ahead into A's queue, never started.
      await waitFor('items in flight', async () => {
        const c = await itemCounts(db.sql, batch.id);
        return c.done === 4 && c.running === 6 && executing.length === 3;
      });
      const held = (await itemRows(db.sql, batch.id)).filter((i) => i.state === 'running').map((i) => i.key);
      const inFlight = held.filter((k) => executing.includes(k));
      const queued = held.filter((k) => !executing.includes(k));
      expect(inFlight).toHaveLength(3);
      expect(queued).toHaveLength(3);

      const result = variant === 'close' ? (await a.close())[0] : await a.stop(batch.id);
      expect(result).toMatchObject({ batchId: batch.id, outcome: 'handed-off' });
      expect(a.running(batch.id)).toBeUndefined();
      const handed = await getBatch(db.sql, batch.id);
      expect(handed).toMatchObject({ status: 'open', ownerProcess: null, beatAt: null, finishedAt: null });
      const [{ handed_off_at }] = await db.sql<{ handed_off_at: Date | null }[]>`select handed_off_at
        from leasehold_batches where id = ${batch.id}`;
      expect(handed_off_at).toBeInstanceOf(Date);
      const rows = await itemRows(db.sql, batch.id);
      for (const key of inFlight) {
        const item = rows.find((r) => r.key === key)!;
        if (variant === 'finishes') expect(item).toMatchObject({ state: 'done', attempts: 1, output: 'A' });
        else expect(item).toMatchObject({ state: 'pending', attempts: 1, error: 'interrupted' });
      }
      // The queued items went back to pending in the handoff statement, their attempts unchanged.
      for (const key of queued) {
        expect(rows.find((r) => r.key === key)).toMatchObject({
          state: 'pending',
          attempts: 0,
          error: null,
          run_id: result!.runId,
        });
      }
      expect(executing).toHaveLength(3);
      expect(result!.finishedItems).toBe(variant === 'finishes' ? 7 : 4);
      const handoffSeq = await releaseSeq(batch.id, result!.runId, 'open');

      expect(await b.takeOver(() => ({ work: workB }), batch.id)).toBeDefined();
      const resultB = await runOf(b, batch.id);
      expect(resultB.outcome).toBe('succeeded');

      const final = await itemRows(db.sql, batch.id);
      expect(final.map((i) => [i.state, i.attempts])).toEqual(
        final.map((i) => ['done', variant !== 'finishes' && inFlight.includes(i.key) ? 2 : 1]),
      );
      // Nothing lost, nothing done twice, each stored result is the one run that completed it.
      const perKey = tally(completed.map((c) => c.key));
      expect([...perKey.keys()].sort()).toEqual(final.map((i) => i.key));
      expect([...perKey.values()].every((n) => n === 1)).toBe(true);
      for (const item of final) expect(item.output).toBe(completed.find((c) => c.key === item.key)!.by);
      // A wrote nothing after its handoff statement (which moved its settled and queued items in
      // the same transaction as the handoff: same database time).
      expect(
        (await itemChanges(db.sql, batch.id)).filter(
          (c) => c.seq > handoffSeq && c.run_id === result!.runId && c.updated_at.getTime() !== handed_off_at!.getTime(),
        ),
      ).toEqual([]);
      await b.close();
    }
  });
});
