// Failure tolerance (docs/design.md, "Batches": "End"): `toleratedFailures` as `{ count }` or
// `{ percent }`; a batch ends `failed` at once when more items failed than it allows, else
// `succeeded` with its failed items listed; without one, today's rule (any failure fails the
// batch once every item ran).
import { beforeAll, describe, expect, it } from 'vitest';
import {
  BatchFinishedError,
  InvalidBatchError,
  PermanentItemError,
  Runner,
  cancelBatch,
  createBatch,
  getBatch,
  itemsPage,
  redriveBatch,
  type Executor,
  type RunResult,
  type RunnerEvent,
  type ToleratedFailures,
} from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { batchChanges, installAudit, itemCounts, itemRows, newBatch, runOf } from './helpers.js';
import { deferred, waitFor } from '../support/waits.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

let tenants = 0;
/** A tenant of its own, so no test's open batches count against another's maxOpen. */
const ownTenant = () => `tol-${process.pid}-${++tenants}`;

// Runners share one pool: the test server's connections are shared with other test files.
const runner = (options: ConstructorParameters<typeof Runner>[1] = {}) =>
  new Runner(db.sql, { beatMs: 50, staleMs: 5_000, ...options });

/** Work failing the given keys for good at once (after `delayMs`), counting executions. */
function failing(keys: Iterable<string> | ((key: string) => boolean), delayMs = 0) {
  const fails =
    typeof keys === 'function'
      ? keys
      : (
          (set) => (k: string) =>
            set.has(k)
        )(new Set(keys));
  const runs = new Map<string, number>();
  const executor: Executor = {
    attempts: 1,
    async work({ key }) {
      runs.set(key, (runs.get(key) ?? 0) + 1);
      if (delayMs) await sleep(Math.random() * delayMs);
      if (fails(key)) throw new PermanentItemError(`${key} broke`);
      return `${key} ok`;
    },
  };
  return { executor, runs };
}

/** The batch's status changes away from open, from the audit (exactly one for a finished batch). */
async function ends(id: string) {
  return (await batchChanges(db.sql, id)).filter((c) => c.old_status === 'open' && c.status !== 'open');
}

async function start(n: number, toleratedFailures: ToleratedFailures | null | undefined, executor: Executor, parallel = 1) {
  const r = runner({ parallel });
  const { batch } = await r.start(newBatch(n, { tenant: ownTenant(), toleratedFailures }), { maxOpen: 100 }, executor);
  return { batch, runner: r, result: await runOf(r, batch.id) };
}

describe('failure tolerance', () => {
  it('without one, every item runs and any failure fails the batch at its end (the default)', async () => {
    const { executor, runs } = failing(['k000', 'k001']);
    const { batch, result } = await start(10, undefined, executor);
    expect(batch).toMatchObject({ toleratedFailures: null, allowedFailures: null });
    expect(result.outcome).toBe('failed');
    expect(runs.size).toBe(10);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({
      status: 'failed',
      reason: null,
      counts: { pending: 0, running: 0, done: 8, failed: 2 },
    });
  });

  it('ends succeeded with its failed items listed while they stay within the count', async () => {
    const { executor, runs } = failing(['k001', 'k007']);
    const { batch, result } = await start(10, { count: 2 }, executor);
    expect(batch).toMatchObject({ toleratedFailures: { count: 2 }, allowedFailures: 2 });
    expect(result.outcome).toBe('succeeded');
    expect(runs.size).toBe(10);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({
      status: 'succeeded',
      reason: null,
      counts: { pending: 0, running: 0, done: 8, failed: 2 },
    });
    const listed = await itemsPage(db.sql, batch.id, { state: 'failed' });
    expect(listed.items.map((i) => [i.key, i.error])).toEqual([
      ['k001', 'k001 broke'],
      ['k007', 'k007 broke'],
    ]);
  });

  it('ends failed at once when more items failed than the count allows: pending items are not started', async () => {
    // One at a time: k000..k002 fail, and the third failure ends the batch.
    const { executor, runs } = failing(['k000', 'k001', 'k002']);
    const { batch, result } = await start(30, { count: 2 }, executor);
    expect(result.outcome).toBe('failed');
    const b = await getBatch(db.sql, batch.id);
    expect(b).toMatchObject({
      status: 'failed',
      reason: 'more items failed than tolerated: 3 failed, 2 tolerated (count 2)',
      ownerProcess: null,
      beatAt: null,
    });
    expect(b.counts).toEqual({ pending: 27, running: 0, waiting: 0, done: 0, failed: 3 });
    expect([...runs.keys()]).toEqual(['k000', 'k001', 'k002']);
    expect(await ends(batch.id)).toHaveLength(1);
  });

  it('count 0 ends the batch at its first failure; an attempt that is retried is no failure', async () => {
    let tries = 0;
    const flaky: Executor = {
      attempts: 3,
      backoffMs: 1,
      async work({ key }) {
        if (key === 'k000' && ++tries < 3) throw new Error('flaky');
        return key;
      },
    };
    const retried = await start(4, { count: 0 }, flaky);
    expect(retried.result.outcome).toBe('succeeded');
    expect(tries).toBe(3);

    const { executor, runs } = failing(['k003']);
    const { batch, result } = await start(8, { count: 0 }, executor);
    expect(result.outcome).toBe('failed');
    const b = await getBatch(db.sql, batch.id);
    expect(b.counts).toEqual({ pending: 4, done: 3, failed: 1, running: 0, waiting: 0 });
    expect(runs.size).toBe(4);
    expect(b.reason).toBe('more items failed than tolerated: 1 failed, 0 tolerated (count 0)');
  });

  it('a percent allows floor(percent × total / 100) failed items', async () => {
    // 12.5 % of 20 is 2.5: two failures are tolerated, a third is not.
    const two = failing(['k003', 'k010']);
    const ok = await start(20, { percent: 12.5 }, two.executor);
    expect(ok.batch).toMatchObject({ toleratedFailures: { percent: 12.5 }, allowedFailures: 2 });
    expect(ok.result.outcome).toBe('succeeded');
    expect((await getBatch(db.sql, ok.batch.id)).counts).toMatchObject({ done: 18, failed: 2 });

    const three = failing(['k003', 'k010', 'k011']);
    const bad = await start(20, { percent: 12.5 }, three.executor);
    expect(bad.result.outcome).toBe('failed');
    const b = await getBatch(db.sql, bad.batch.id);
    expect(b.counts).toEqual({ pending: 8, running: 0, waiting: 0, done: 9, failed: 3 });
    expect(b.reason).toBe('more items failed than tolerated: 3 failed, 2 tolerated (12.5 % of 20 items)');

    // 100 % tolerates every failure; 0 % none.
    const all = await start(5, { percent: 100 }, failing(() => true).executor);
    expect(all.result.outcome).toBe('succeeded');
    expect((await getBatch(db.sql, all.batch.id)).counts.failed).toBe(5);
    const none = await start(5, { percent: 0 }, failing(['k002']).executor);
    expect(none.result.outcome).toBe('failed');
  });

  it('running items get their abort signal and go back to pending, their attempt given back', async () => {
    const aborted = new Set<string>();
    const started = new Set<string>();
    const executor: Executor = {
      attempts: 3,
      work: ({ key, signal }) =>
        new Promise((resolve, reject) => {
          started.add(key);
          if (key === 'k000') {
            // Fail once the others are running.
            void waitFor('others running', () => started.size >= 4).then(() => reject(new PermanentItemError('broke')));
            return;
          }
          signal.addEventListener('abort', () => {
            aborted.add(key);
            reject(new Error('aborted'));
          });
        }),
    };
    const { batch, result } = await start(10, { count: 0 }, executor, 4);
    expect(result.outcome).toBe('failed');
    // The three that ran beside k000 (which three is the claim's order among items due at the same
    // moment, not fixed) got their signal.
    expect(aborted.size).toBe(3);
    expect([...aborted].sort()).toEqual([...started].filter((k) => k !== 'k000').sort());
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.filter((r) => r.state === 'failed').map((r) => r.key)).toEqual(['k000']);
    // Executing and queued (claimed ahead) items alike: pending, as if never claimed.
    for (const r of rows.filter((r) => r.key !== 'k000')) expect(r).toMatchObject({ state: 'pending', attempts: 0 });
    // Their late settling wrote nothing.
    await sleep(50);
    expect((await getBatch(db.sql, batch.id)).counts).toEqual({ pending: 9, running: 0, waiting: 0, done: 0, failed: 1 });
  });

  it('refuses a tolerance out of range and stores nothing', async () => {
    const bad: unknown[] = [
      { count: -1 },
      { count: 1.5 },
      { count: 2 ** 31 },
      { count: '2' },
      { percent: -0.1 },
      { percent: 100.5 },
      { percent: Number.NaN },
      { count: 1, percent: 5 },
      {},
      { other: 1 },
      [],
      5,
    ];
    for (const t of bad) {
      const b = newBatch(2, { tenant: ownTenant(), toleratedFailures: t as ToleratedFailures });
      await expect(createBatch(db.sql, b)).rejects.toBeInstanceOf(InvalidBatchError);
      await expect(createBatch(db.sql, b)).rejects.toThrow(/^toleratedFailures/);
      const [{ n }] = await db.sql<
        { n: number }[]
      >`select count(*)::int as n from leasehold_batches where request_key = ${b.requestKey}`;
      expect(n).toBe(0);
    }
    // The edges are allowed.
    for (const t of [{ count: 0 }, { count: 2 ** 31 - 1 }, { percent: 0 }, { percent: 100 }, { percent: 33.3 }]) {
      const { batch } = await createBatch(db.sql, newBatch(3, { tenant: ownTenant(), toleratedFailures: t }));
      expect(batch.toleratedFailures).toEqual(t);
    }
    const { batch } = await createBatch(db.sql, newBatch(3, { tenant: ownTenant(), toleratedFailures: { percent: 33.3 } }));
    expect(batch.allowedFailures).toBe(0);
  });

  it('a takeover ends a batch whose stored failures already exceed its tolerance, running nothing', async () => {
    // As if a run stored the failures, then died (or handed off) before it could end the batch.
    const { batch } = await createBatch(db.sql, newBatch(6, { tenant: ownTenant(), toleratedFailures: { count: 1 } }));
    await db.sql`update leasehold_items set state = 'failed', attempts = 1, error = 'x'
      where batch_id = ${batch.id} and key in ('k000', 'k001')`;
    const { executor, runs } = failing([]);
    const r = runner();
    expect(await r.takeOver(() => executor, batch.id)).toBeDefined();
    expect((await runOf(r, batch.id)).outcome).toBe('failed');
    expect(runs.size).toBe(0);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', counts: { pending: 4, failed: 2 } });

    // An item a dead run left running with its attempts used up fails at the takeover and may
    // cross the tolerance too.
    const { batch: b2 } = await createBatch(db.sql, newBatch(6, { tenant: ownTenant(), toleratedFailures: { count: 0 } }));
    await db.sql`update leasehold_items set state = 'running', attempts = 1 where batch_id = ${b2.id} and key = 'k004'`;
    const r2 = runner();
    expect(await r2.takeOver(() => executor, b2.id)).toBeDefined();
    expect((await runOf(r2, b2.id)).outcome).toBe('failed');
    expect(runs.size).toBe(0);
    const after = await getBatch(db.sql, b2.id);
    expect(after).toMatchObject({ status: 'failed', counts: { pending: 5, failed: 1 } });
    expect(after.reason).toMatch(/^more items failed than tolerated: 1 failed, 0 tolerated/);
  });

  it('failures landing in concurrent flushes cross the threshold once: one end, never past it by more than a flush', async () => {
    for (let round = 0; round < 4; round++) {
      const parallel = 16;
      const allowed = 40;
      // Every item fails, at random times, so settled failures pile up while a flush is in flight.
      const { executor } = failing(() => true, 15);
      const { batch, result } = await start(300, { count: allowed }, executor, parallel);
      expect(result.outcome).toBe('failed');
      const b = await getBatch(db.sql, batch.id);
      expect(b.status).toBe('failed');
      expect(b.counts.running).toBe(0);
      expect(b.counts.failed).toBeGreaterThan(allowed);
      // The flush that crossed carried at most the items that were executing.
      expect(b.counts.failed).toBeLessThanOrEqual(allowed + parallel);
      expect(b.counts.pending).toBe(300 - b.counts.failed);
      expect(b.reason).toBe(
        `more items failed than tolerated: ${b.counts.failed} failed, ${allowed} tolerated (count ${allowed})`,
      );
      expect(await ends(batch.id)).toHaveLength(1);
    }
  });

  it('runs handing the batch over while failures land: exactly one run ends it, and no item runs after', async () => {
    for (let round = 0; round < 3; round++) {
      const allowed = 30;
      const executed: { key: string; at: number }[] = [];
      const executor: Executor = {
        attempts: 1,
        parallel: 4,
        async work({ key }) {
          executed.push({ key, at: Date.now() });
          await sleep(2 + Math.random() * 10);
          if (Number(key.slice(1)) % 2 === 0) throw new PermanentItemError('even');
          return key;
        },
      };
      const { batch } = await createBatch(db.sql, newBatch(200, { tenant: ownTenant(), toleratedFailures: { count: allowed } }), {
        maxOpen: 100,
      });
      // Three runners on their own pools watch for batches; one after another is stopped (a
      // handoff) while items fail, so the batch moves between runs.
      const results: RunResult[] = [];
      const ended = (e: RunnerEvent) => {
        if (e.type === 'run-ended' && e.result.batchId === batch.id) results.push(e.result);
      };
      const runners = [runner({ onEvent: ended }), runner({ onEvent: ended }), runner({ onEvent: ended })];
      for (const r of runners) r.watch((x) => (x.id === batch.id ? executor : undefined), 5);
      // Hand the batch over three times, each once its owner has stored a few more failures.
      for (let i = 1; i <= 3; i++) {
        const owner = await waitFor('an owner that stored failures', async () => {
          const c = await itemCounts(db.sql, batch.id);
          return c.failed >= i * 6 ? runners.find((r) => r.batches().includes(batch.id)) : undefined;
        });
        await owner.stop(batch.id);
      }
      const end = await waitFor('batch end', async () => {
        const b = await getBatch(db.sql, batch.id);
        return b.status !== 'open' ? b : undefined;
      });
      for (const r of runners) await r.close();
      expect(end.status).toBe('failed');
      expect(end.counts.failed).toBeGreaterThan(allowed);
      expect(end.counts.running).toBe(0);
      expect(end.counts.done + end.counts.failed + end.counts.pending).toBe(200);
      expect(end.reason).toMatch(/^more items failed than tolerated/);
      expect(await ends(batch.id)).toHaveLength(1);
      // One run ended it; the others handed off or found it ended (lost).
      expect(results.filter((r) => r.outcome === 'failed')).toHaveLength(1);
      expect(results.length, JSON.stringify(results.map((r) => [r.outcome, r.finishedItems]))).toBeGreaterThan(1);
      for (const r of results) expect(['failed', 'handed-off', 'lost']).toContain(r.outcome);
      // Nothing started after the end: every execution came before it.
      const endedAt = end.finishedAt!.getTime();
      expect(executed.filter((e) => e.at > endedAt + 50)).toEqual([]);
    }
  });

  it('a cancel racing the end: exactly one of them ends the batch, and each caller learns which', async () => {
    for (let round = 0; round < 12; round++) {
      const gate = deferred();
      const executor: Executor = {
        attempts: 1,
        parallel: 2,
        async work({ key }) {
          await gate.promise;
          if (key === 'k000') throw new PermanentItemError('broke');
          return key;
        },
      };
      const r = runner();
      const { batch } = await r.start(
        newBatch(4, { tenant: ownTenant(), toleratedFailures: { count: 0 } }),
        { maxOpen: 100 },
        executor,
      );
      const done = runOf(r, batch.id);
      await waitFor('items running', async () => (await itemCounts(db.sql, batch.id)).running > 0);
      gate.resolve();
      if (round % 3 === 1) await sleep(Math.random() * 5);
      const cancel = await cancelBatch(db.sql, batch.id).then(
        (b) => b.status,
        (e: unknown) => (e instanceof BatchFinishedError ? 'refused' : Promise.reject(e)),
      );
      const result = await done;
      const b = await getBatch(db.sql, batch.id);
      expect(await ends(batch.id)).toHaveLength(1);
      if (cancel === 'cancelled') {
        expect(b.status).toBe('cancelled');
        expect(b.reason).toBeNull();
        expect(result.outcome).not.toBe('failed');
      } else {
        expect(cancel).toBe('refused');
        expect(b.status).toBe('failed');
        expect(result.outcome).toBe('failed');
        expect(b.reason).toMatch(/^more items failed than tolerated: 1 failed, 0 tolerated/);
      }
    }
  });

  it("a stale run's items learn of an end by another run's takeover as of a cancel: its move lands nothing, its work is aborted", async () => {
    const gate = deferred();
    const aborted = new Set<string>();
    const executor: Executor = {
      attempts: 1,
      parallel: 4,
      work: ({ key, signal }) =>
        new Promise((resolve, reject) => {
          if (key === 'k000') return void gate.promise.then(() => resolve('late'));
          signal.addEventListener('abort', () => {
            aborted.add(key);
            reject(new Error('aborted'));
          });
        }),
    };
    // A beats rarely and holds its beats valid long; B sees the batch stale almost at once.
    const a = runner({ beatMs: 10_000, staleMs: 20_000 });
    const { batch } = await a.start(
      newBatch(4, { tenant: ownTenant(), toleratedFailures: { count: 0 } }),
      { maxOpen: 100 },
      executor,
    );
    const aDone = runOf(a, batch.id);
    await waitFor('all running', async () => (await itemCounts(db.sql, batch.id)).running === 4);
    await sleep(150);
    const b = runner({ staleMs: 100 });
    expect(await b.takeOver(() => executor, batch.id)).toBeDefined();
    // B counts the attempts A's items used (1 of 1): four failures, none tolerated.
    expect((await runOf(b, batch.id)).outcome).toBe('failed');
    const ended = await getBatch(db.sql, batch.id);
    expect(ended).toMatchObject({ status: 'failed', counts: { failed: 4, running: 0 } });
    expect(ended.reason).toBe('more items failed than tolerated: 4 failed, 0 tolerated (count 0)');
    expect(aborted.size).toBe(0);
    // A's first move comes back short: A lost the batch and aborts the rest of its work.
    gate.resolve();
    expect((await aDone).outcome).toBe('lost');
    expect([...aborted].sort()).toEqual(['k001', 'k002', 'k003']);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', counts: { failed: 4, done: 0 } });
    expect(await ends(batch.id)).toHaveLength(1);
  });

  it('a batch failed by its tolerance can be redriven: its failed and unstarted items run, and it may succeed', async () => {
    let broken = true;
    const runs = new Map<string, number>();
    const executor: Executor = {
      attempts: 1,
      async work({ key }) {
        runs.set(key, (runs.get(key) ?? 0) + 1);
        if (broken && (key === 'k001' || key === 'k002')) throw new PermanentItemError('down');
        return key;
      },
    };
    const { batch, result } = await start(8, { count: 1 }, executor);
    expect(result.outcome).toBe('failed');
    expect((await getBatch(db.sql, batch.id)).counts).toEqual({ pending: 5, running: 0, waiting: 0, done: 1, failed: 2 });

    broken = false;
    const redriven = await redriveBatch(db.sql, batch.id, { maxOpen: 100 });
    expect(redriven.redrive.items).toBe(2);
    expect(redriven.batch).toMatchObject({
      status: 'open',
      reason: null,
      toleratedFailures: { count: 1 },
      counts: { pending: 7, done: 1 },
    });
    const r = runner();
    expect(await r.takeOver(() => executor, batch.id)).toBeDefined();
    expect((await runOf(r, batch.id)).outcome).toBe('succeeded');
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', reason: null, counts: { done: 8, failed: 0 } });
    expect(Object.fromEntries(runs)).toEqual({ k000: 1, k001: 2, k002: 2, k003: 1, k004: 1, k005: 1, k006: 1, k007: 1 });
  });
});
