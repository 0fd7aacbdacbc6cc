import { describe, expect, it } from 'vitest';
import { Runner, getBatch, type ItemWork, type RunnerEvent } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { itemCounts, itemRows, newBatch, runOf, tally } from './helpers.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();

describe('store errors', () => {
  it('retries a failing move moveTries times, then stops the run and its items, leaving the batch for takeover', async () => {
    const gate = deferred();
    const signals: AbortSignal[] = [];
    const completed: { by: string; key: string }[] = [];
    let started = 0;
    const workA: ItemWork = async ({ key, signal }) => {
      signals.push(signal);
      if (++started === 1) await gate.promise;
      else await new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('stopped'))));
      completed.push({ by: 'A', key });
      return 'A';
    };
    const events: RunnerEvent[] = [];
    const sqlA = db.connect({ max: 2 });
    const a = new Runner(sqlA, {
      beatMs: 50,
      staleMs: 300,
      parallel: 3,
      moveTries: 3,
      moveBackoffMs: 5,
      onEvent: (e) => events.push(e),
    });
    const { batch } = await a.start(newBatch(8), {}, workA);
    const run = runOf(a, batch.id);
    // Three in flight and three claimed ahead into the run's queue.
    await waitFor('three in flight', async () => (await itemCounts(db.sql, batch.id)).running === 6 && started === 3);
    // The store goes away for this process; the first item then finishes and must be written.
    await sqlA.end();
    gate.resolve();
    const result = await run;
    expect(result.outcome).toBe('store-error');
    expect(result.error?.message).toMatch(/store failed 3 times/);
    const tries = events.flatMap((e) => (e.type === 'store-error' && e.runId === result.runId ? [e.tries] : []));
    expect(tries).toEqual(expect.arrayContaining([1, 2, 3]));
    // The run is over, so the items it was still running are told to stop.
    expect(signals.every((s) => s.aborted)).toBe(true);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'open', ownerProcess: a.owner() });

    const b = new Runner(db.sql, { beatMs: 50, staleMs: 300 });
    const workB: ItemWork = async ({ key }) => {
      completed.push({ by: 'B', key });
      return 'B';
    };
    await waitFor('takeover', () => b.takeOver(() => ({ work: workB }), batch.id), { everyMs: 20 });
    expect((await runOf(b, batch.id)).outcome).toBe('succeeded');
    const items = await itemRows(db.sql, batch.id);
    expect(items.every((i) => i.state === 'done' && i.output === 'B')).toBe(true);
    // The six items A held (in flight or queued) count that attempt; the one A finished but could
    // not store runs again.
    expect(items.filter((i) => i.attempts === 2)).toHaveLength(6);
    expect([...tally(completed.filter((c) => c.by === 'B').map((c) => c.key)).values()].every((n) => n === 1)).toBe(true);
    expect(completed.filter((c) => c.by === 'B')).toHaveLength(8);
  });
});
