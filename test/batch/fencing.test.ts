import { beforeAll, describe, expect, it } from 'vitest';
import { BatchLostError, ManualClock, Runner, getBatch, type ItemWork, type RunResult } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { installAudit, itemChanges, itemCounts, itemRows, liveRuns, newBatch, replacements, runOf, tally } from './helpers.js';
import { never, sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';

/** Stale limit of the runner that takes over; short so each round waits little. */
const STALE_MS = 400;
const ROUNDS = 3;
/**
 * Items each runner here executes at once; it claims as many again ahead (a queue depth set, so
 * fixed: the default one deepens once the quick items' attempts measure a millisecond or more,
 * as they may on a loaded machine).
 */
const PARALLEL = 3;
/** Items a run holds as running in the store when its slots and its queue are full. */
const HELD = 2 * PARALLEL;

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

/** One execution of an item's work that returned (its result may or may not have been stored). */
interface Completion {
  by: 'A' | 'B';
  key: string;
  attempt: number;
}

/**
 * A runner whose beats never come: its clock wakes no sleeper (time only moves when the test
 * says so), while its items run normally.
 */
function stalledRunner(sql = db.connect({ max: 3 }), clock = new ManualClock()): Runner {
  clock.freeze();
  return new Runner(sql, { clock, beatMs: 100, staleMs: STALE_MS, parallel: PARALLEL, queueDepth: PARALLEL, backoffMs: 0 });
}

/** A healthy runner on the system clock that may take over batches stale for STALE_MS. */
function healthyRunner(): Runner {
  return new Runner(db.connect({ max: 4 }), {
    beatMs: 100,
    staleMs: STALE_MS,
    parallel: PARALLEL,
    queueDepth: PARALLEL,
    backoffMs: 0,
  });
}

/**
 * Try to take over `batchId` until it works (the batch turns stale by the database clock);
 * returns the new run's result, taken before the run can end and leave the runner's list.
 */
async function takeOverWhenStale(runner: Runner, batchId: string, work: ItemWork): Promise<{ run: Promise<RunResult> }> {
  return waitFor('takeover', async () => (await runner.takeOver(() => ({ work }), batchId)) && { run: runOf(runner, batchId) }, {
    everyMs: 20,
  });
}

describe('a stalled run (beats stop, work goes on)', () => {
  it('is taken over once stale; its later moves change nothing and it stops lost', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const completions: Completion[] = [];
      const QUICK = 5;
      let startedA = 0;
      const gateA = deferred();
      const gateB = deferred();
      // Odd rounds: the stalled items fail once released, so A's late moves are retries.
      const stalledFail = round % 2 === 1;
      const workA: ItemWork = async ({ key, attempt }) => {
        if (++startedA > QUICK) {
          await gateA.promise;
          if (stalledFail) throw new Error('late failure');
        }
        completions.push({ by: 'A', key, attempt });
        return { by: 'A' };
      };
      const workB: ItemWork = async ({ key, attempt }) => {
        await gateB.promise;
        completions.push({ by: 'B', key, attempt });
        return { by: 'B' };
      };

      const clockA = new ManualClock();
      const a = stalledRunner(undefined, clockA);
      const b = healthyRunner();
      const { batch } = await a.start(newBatch(12), {}, workA);
      const runA = runOf(a, batch.id);
      // A finished QUICK items and is stuck in three more, with three claimed ahead; it never beats.
      await waitFor('A stalled', async () => {
        const c = await itemCounts(db.sql, batch.id);
        return c.done === QUICK && c.running === HELD && startedA === QUICK + PARALLEL;
      });
      const [fresh] = await db.sql<{ fresh: boolean }[]>`select now() - beat_at < ${STALE_MS / 2} * interval '1 ms' as fresh
        from leasehold_runs where batch_id = ${batch.id}`;
      if (fresh.fresh) expect(await b.takeOver(() => ({ work: workB }), batch.id)).toBeUndefined();

      const { run: runB } = await takeOverWhenStale(b, batch.id, workB);
      // B recovered the items A held as running (in flight or queued) and now holds as many itself.
      await waitFor('B running', async () => {
        const [r] = await db.sql<{ n: number }[]>`select count(*) as n from leasehold_items i
          join leasehold_runs r on r.batch_id = i.batch_id and r.id = i.run_id
          where i.batch_id = ${batch.id} and i.state = 'running'`;
        return r.n === HELD;
      });
      // One takeover, which replaced A's run (deleted its row) with B's.
      const takeovers = await replacements(db.sql, batch.id);
      expect(takeovers).toHaveLength(1);
      const [takeover] = takeovers;
      const before = await itemRows(db.sql, batch.id);

      // A's stalled work now returns, once A's own clock also says its last beat is older than the
      // stale limit (its beats never came): nothing more may start there, and each of its moves
      // must change nothing.
      clockA.advance(STALE_MS);
      gateA.resolve();
      const resultA: RunResult = await runA;
      expect(resultA.outcome).toBe('lost');
      expect(resultA.error).toBeInstanceOf(BatchLostError);
      expect(resultA.finishedItems).toBe(QUICK);
      expect(await itemRows(db.sql, batch.id)).toEqual(before);

      gateB.resolve();
      const resultB = await runB;
      expect(resultB.outcome).toBe('succeeded');
      expect(takeover.from).toBe(resultA.runId);
      expect(takeover.to).toBe(resultB.runId);

      const items = await itemRows(db.sql, batch.id);
      expect(items.map((i) => i.state)).toEqual(Array(12).fill('done'));
      const label = new Map([
        [resultA.runId, 'A'],
        [resultB.runId, 'B'],
      ]);
      const changes = await itemChanges(db.sql, batch.id);
      for (const item of items) {
        const by = label.get(item.run_id!);
        // The run that wrote the final state executed the item to completion, and its output is stored.
        expect(by).toBeDefined();
        expect(item.output).toEqual({ by });
        expect(completions.some((c) => c.by === by && c.key === item.key && c.attempt === item.attempts)).toBe(true);
        // Written to done exactly once.
        expect(changes.filter((c) => c.key === item.key && c.state === 'done')).toHaveLength(1);
      }
      // A wrote nothing after the takeover (its queued items neither moved nor lost), B wrote the
      // three A was stuck in plus the rest.
      expect(changes.filter((c) => c.seq > takeover.seq && c.run_id === resultA.runId)).toEqual([]);
      expect(items.filter((i) => i.run_id === resultA.runId)).toHaveLength(QUICK);
      expect(items.filter((i) => i.run_id === resultB.runId)).toHaveLength(12 - QUICK);
      // A's three late executions finished in its work but were not stored.
      expect(completions.filter((c) => c.by === 'A')).toHaveLength(stalledFail ? QUICK : QUICK + 3);
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', runs: 2 });
      await b.close();
    }
  });
});

describe('a run killed mid-batch', () => {
  it('is taken over after stale and the rest finishes, no item done twice, none lost', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const completions: Completion[] = [];
      const K = 4 + round;
      let startedA = 0;
      const workA: ItemWork = async ({ key, attempt }) => {
        // The process dies while running its later items: their work never returns.
        if (++startedA > K) return never();
        completions.push({ by: 'A', key, attempt });
        return { by: 'A' };
      };
      const workB: ItemWork = async ({ key, attempt }) => {
        await sleep(Math.random() * 5);
        completions.push({ by: 'B', key, attempt });
        return { by: 'B' };
      };

      const sqlA = db.connect({ max: 3 });
      const a = stalledRunner(sqlA);
      const total = 15;
      const { batch } = await a.start(newBatch(total), {}, workA);
      const runAId = (await getRunOwner(batch.id))!;
      await waitFor('A dying', async () => {
        const c = await itemCounts(db.sql, batch.id);
        return c.done === K && c.running === HELD;
      });
      // Kill: its connections drop, it never releases or beats again.
      await sqlA.end({ timeout: 0 });

      const b = healthyRunner();
      const resultB = await (await takeOverWhenStale(b, batch.id, workB)).run;
      expect(resultB.outcome).toBe('succeeded');
      expect(resultB.finishedItems).toBe(total - K);

      const items = await itemRows(db.sql, batch.id);
      expect(items.every((i) => i.state === 'done')).toBe(true);
      // Every key completed exactly once across both runs, and that completion is what is stored.
      const perKey = tally(completions.map((c) => c.key));
      expect([...perKey.keys()].sort()).toEqual(items.map((i) => i.key));
      expect([...perKey.values()].every((n) => n === 1)).toBe(true);
      for (const item of items) {
        const c = completions.find((x) => x.key === item.key)!;
        expect(item.run_id).toBe(c.by === 'A' ? runAId : resultB.runId);
        expect(item.output).toEqual({ by: c.by });
      }
      // The items A held when it died count one attempt each (at most one): the three it was
      // running and the three it had claimed ahead. B ran them as attempt 2.
      const died = items.filter((i) => i.attempts === 2);
      expect(died).toHaveLength(HELD);
      expect(died.every((i) => i.run_id === resultB.runId)).toBe(true);
      expect(items.filter((i) => i.attempts === 1)).toHaveLength(total - HELD);
      await b.close();
    }
  });
});

/** The batch's one live run (these batches have one at a time). */
async function getRunOwner(batchId: string): Promise<string | null> {
  const runs = await liveRuns(db.sql, batchId);
  expect(runs.length).toBeLessThanOrEqual(1);
  return runs[0] ?? null;
}
