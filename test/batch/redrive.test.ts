import { describe, expect, it } from 'vitest';
import {
  BatchCancelledError,
  BatchNotFoundError,
  BatchOpenError,
  ManualClock,
  NothingToRedriveError,
  PermanentItemError,
  Runner,
  TooManyBatchesError,
  cancelBatch,
  createBatch,
  endPastDeadlines,
  getBatch,
  redriveBatch,
  type Executor,
  type RedriveResult,
} from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { itemCounts, itemRows, newBatch, runOf, tally } from './helpers.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();

/**
 * Work that fails each key of `failing` on its first execution (at once, as permanent) and
 * succeeds otherwise, counting every execution per key.
 */
function firstFails(failing: Iterable<string>) {
  const fail = new Set(failing);
  const runs = new Map<string, number>();
  const executor: Executor = {
    attempts: 2,
    backoffMs: 1,
    async work({ key }) {
      const n = (runs.get(key) ?? 0) + 1;
      runs.set(key, n);
      if (fail.has(key) && n === 1) throw new PermanentItemError(`${key} failed on its first run`);
      return `${key} ok`;
    },
  };
  return { executor, runs };
}

let tenants = 0;
/** A tenant of its own, so one test's open batches never count against another's maxOpen. */
const ownTenant = () => `redrive-${process.pid}-${++tenants}`;

/**
 * A batch of `n` items (of a tenant of its own unless given) run to its end by a fresh runner,
 * the keys of `failing` failing once.
 */
async function finishedWithFailures(n: number, failing: string[], overrides: Parameters<typeof newBatch>[1] = {}) {
  const { executor, runs } = firstFails(failing);
  const runner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000 });
  const { batch } = await runner.start(newBatch(n, { tenant: ownTenant(), ...overrides }), { maxOpen: 100 }, executor);
  expect((await runOf(runner, batch.id)).outcome).toBe('failed');
  return { batch, executor, runs };
}

/** Run a reopened batch to its end with a fresh runner. */
async function runToEnd(id: string, executor: Executor) {
  const runner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000 });
  expect(await runner.takeOver(() => executor, id)).toBeDefined();
  return runOf(runner, id);
}

/** The outcome of one call: its result, or the name of the error it threw. */
async function settle(p: Promise<RedriveResult>): Promise<RedriveResult | string> {
  try {
    return await p;
  } catch (e) {
    return (e as Error).name;
  }
}

const redrivesOf = (sql: Sql, id: string) =>
  sql<{ number: number; idempotency_key: string | null; items: number }[]>`select number, idempotency_key, items
    from leasehold_redrives where batch_id = ${id} order by number`;

describe('redrive', () => {
  it("puts a finished batch's failed items back to pending with fresh attempts, reopens it, and a run finishes them", async () => {
    const { batch, executor, runs } = await finishedWithFailures(6, ['k001', 'k004']);
    const before = await itemRows(db.sql, batch.id);
    expect(before.filter((i) => i.state === 'failed').map((i) => [i.key, i.attempts, i.error])).toEqual([
      ['k001', 1, 'k001 failed on its first run'],
      ['k004', 1, 'k004 failed on its first run'],
    ]);

    const r = await redriveBatch(db.sql, batch.id);
    expect(r.redriven).toBe(true);
    expect(r.redrive).toMatchObject({ number: 1, items: 2, idempotencyKey: null });
    expect(r.batch).toMatchObject({
      status: 'open',
      ownerProcess: null,
      finishedAt: null,
      beatAt: null,
      redrives: 1,
      runs: 1,
      counts: { pending: 2, running: 0, done: 4, failed: 0 },
    });
    const reset = (await itemRows(db.sql, batch.id)).filter((i) => i.key === 'k001' || i.key === 'k004');
    for (const i of reset) expect(i).toMatchObject({ state: 'pending', attempts: 0, error: null, output: null, run_id: null });

    expect((await runToEnd(batch.id, executor)).outcome).toBe('succeeded');
    const after = await itemRows(db.sql, batch.id);
    expect(after.map((i) => [i.key, i.state, i.attempts])).toEqual(
      ['k000', 'k001', 'k002', 'k003', 'k004', 'k005'].map((k) => [k, 'done', 1]),
    );
    // Done items were not run again; the redriven ones ran once more.
    expect(Object.fromEntries(runs)).toEqual({ k000: 1, k001: 2, k002: 1, k003: 1, k004: 2, k005: 1 });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', redrives: 1, runs: 2 });
    expect(await redrivesOf(db.sql, batch.id)).toEqual([{ number: 1, idempotency_key: null, items: 2 }]);
  });

  it('refuses an unknown, an open, a cancelled and a succeeded batch, and changes nothing', async () => {
    await expect(redriveBatch(db.sql, '00000000-0000-4000-8000-000000000000')).rejects.toBeInstanceOf(BatchNotFoundError);
    await expect(redriveBatch(db.sql, 'not-a-uuid')).rejects.toBeInstanceOf(BatchNotFoundError);

    const open = (await createBatch(db.sql, newBatch(2, { tenant: ownTenant() }))).batch;
    await expect(redriveBatch(db.sql, open.id)).rejects.toMatchObject({ name: 'BatchOpenError', code: 'batch_open' });

    // A cancelled batch, even one whose items failed before the cancel.
    const { executor } = firstFails(['k000']);
    const gate = deferred();
    const runner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000 });
    const { batch: cancelled } = await runner.start(
      newBatch(2, { tenant: ownTenant() }),
      { maxOpen: 100 },
      {
        ...executor,
        parallel: 2,
        work: async (item) => (item.key === 'k001' ? gate.promise : executor.work(item)),
      },
    );
    await waitFor('k000 failed', async () => (await itemCounts(db.sql, cancelled.id)).failed === 1);
    await cancelBatch(db.sql, cancelled.id);
    gate.resolve();
    await runOf(runner, cancelled.id);
    await expect(redriveBatch(db.sql, cancelled.id)).rejects.toBeInstanceOf(BatchCancelledError);
    expect(await getBatch(db.sql, cancelled.id)).toMatchObject({ status: 'cancelled', redrives: 0 });

    const { batch: succeeded } = await finishedWithFailures(2, ['k000']).then(async (f) => {
      await redriveBatch(db.sql, f.batch.id);
      expect((await runToEnd(f.batch.id, f.executor)).outcome).toBe('succeeded');
      return f;
    });
    await expect(redriveBatch(db.sql, succeeded.id)).rejects.toBeInstanceOf(NothingToRedriveError);
    expect(await getBatch(db.sql, succeeded.id)).toMatchObject({ status: 'succeeded', redrives: 1 });
    expect(await redrivesOf(db.sql, succeeded.id)).toHaveLength(1);
  });

  it('redrives a batch its deadline ended without a failed item: its unrun items run, the deadline is gone', async () => {
    // A new user's find: the docs said a deadline's batch keeps its items until a redrive, and the
    // redrive refused it (nothing_to_redrive) as it had no failed item.
    const { batch } = await createBatch(db.sql, newBatch(6, { tenant: ownTenant() }));
    await db.sql`update leasehold_items set state = 'done', attempts = 1, output = '"early"'
      where batch_id = ${batch.id} and key in ('k000', 'k001')`;
    await db.sql`update leasehold_batches set deadline_at = now() - interval '1 second' where id = ${batch.id}`;
    expect(await endPastDeadlines(db.sql)).toContain(batch.id);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', reason: 'deadline' });

    const r = await redriveBatch(db.sql, batch.id);
    expect(r.redrive.items).toBe(0);
    expect(r.batch).toMatchObject({ status: 'open', deadline: null, reason: null, redrives: 1 });
    const { executor, runs } = firstFails([]);
    expect((await runToEnd(batch.id, executor)).outcome).toBe('succeeded');
    expect(await itemCounts(db.sql, batch.id)).toMatchObject({ done: 6, failed: 0, pending: 0 });
    // The four left pending ran once each; the two done before the deadline did not run again.
    expect([...runs.keys()].sort()).toEqual(['k002', 'k003', 'k004', 'k005']);
    expect([...runs.values()]).toEqual([1, 1, 1, 1]);
  });

  it('refuses a batch that succeeded early by its completion: its unrun items are not redriven', async () => {
    const { batch } = await createBatch(db.sql, newBatch(6, { tenant: ownTenant(), minSucceeded: 2 }));
    const { executor } = firstFails([]);
    const runner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000 });
    expect(await runner.takeOver(() => ({ ...executor, parallel: 1 }), batch.id)).toBeDefined();
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');
    expect((await getBatch(db.sql, batch.id))?.counts.pending).toBeGreaterThan(0);
    await expect(redriveBatch(db.sql, batch.id)).rejects.toBeInstanceOf(NothingToRedriveError);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', redrives: 0 });
  });

  it('with one idempotency key redrives once: a repeat answers the first redrive and changes nothing, also after the batch finished again', async () => {
    const { batch, executor } = await finishedWithFailures(4, ['k000', 'k002']);
    const first = await redriveBatch(db.sql, batch.id, { idempotencyKey: 'retry-1' });
    expect(first).toMatchObject({ redriven: true, redrive: { number: 1, items: 2, idempotencyKey: 'retry-1' } });

    // While the batch is open again: the same answer, not a 409.
    const repeat = await redriveBatch(db.sql, batch.id, { idempotencyKey: 'retry-1' });
    expect(repeat).toMatchObject({ redriven: false, redrive: first.redrive, batch: { status: 'open', redrives: 1 } });

    // Make the redriven items fail again, finish, and repeat the key: still nothing.
    const failAgain: Executor = { ...executor, work: async () => Promise.reject(new PermanentItemError('again')) };
    expect((await runToEnd(batch.id, failAgain)).outcome).toBe('failed');
    const late = await redriveBatch(db.sql, batch.id, { idempotencyKey: 'retry-1' });
    expect(late).toMatchObject({ redriven: false, redrive: first.redrive, batch: { status: 'failed', redrives: 1 } });
    expect(await itemCounts(db.sql, batch.id)).toEqual({ pending: 0, running: 0, done: 2, failed: 2 });

    // Another key is another redrive.
    const second = await redriveBatch(db.sql, batch.id, { idempotencyKey: 'retry-2' });
    expect(second).toMatchObject({ redriven: true, redrive: { number: 2, items: 2, idempotencyKey: 'retry-2' } });
    expect(await redrivesOf(db.sql, batch.id)).toEqual([
      { number: 1, idempotency_key: 'retry-1', items: 2 },
      { number: 2, idempotency_key: 'retry-2', items: 2 },
    ]);
  });

  it('many concurrent redrives with one key redrive once, and every caller gets that redrive', async () => {
    for (let round = 0; round < 5; round++) {
      const { batch } = await finishedWithFailures(5, ['k001', 'k003']);
      const clients = Array.from({ length: 12 }, () => db.connect({ max: 1 }));
      const results = await Promise.all(
        clients.map((c) => settle(redriveBatch(c, batch.id, { idempotencyKey: `same-${round}` }))),
      );
      const ok = results.filter((r): r is RedriveResult => typeof r !== 'string');
      expect(ok, JSON.stringify(results.filter((r) => typeof r === 'string'))).toHaveLength(12);
      expect(ok.filter((r) => r.redriven)).toHaveLength(1);
      for (const r of ok) expect(r.redrive).toEqual(ok[0].redrive);
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'open', redrives: 1 });
      expect(await redrivesOf(db.sql, batch.id)).toEqual([{ number: 1, idempotency_key: `same-${round}`, items: 2 }]);
      expect(await itemCounts(db.sql, batch.id)).toEqual({ pending: 2, running: 0, done: 3, failed: 0 });
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('many concurrent redrives without a key reopen the batch once; the others are refused as open', async () => {
    for (let round = 0; round < 5; round++) {
      const { batch } = await finishedWithFailures(3, ['k000']);
      const clients = Array.from({ length: 10 }, () => db.connect({ max: 1 }));
      const results = await Promise.all(clients.map((c) => settle(redriveBatch(c, batch.id))));
      expect(tally(results.map((r) => (typeof r === 'string' ? r : 'redriven')))).toEqual(
        new Map([
          ['redriven', 1],
          ['BatchOpenError', 9],
        ]),
      );
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'open', redrives: 1 });
      expect(await redrivesOf(db.sql, batch.id)).toHaveLength(1);
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('counts against maxOpen: a datasource at maxOpen refuses it, and concurrent starts and redrives never exceed maxOpen', async () => {
    for (let round = 0; round < 5; round++) {
      const tenant = `max-open-${round}-${Date.now()}`;
      const { batch: finished } = await finishedWithFailures(2, ['k000'], { tenant, datasource: 'ds' });
      // One open batch: one slot of maxOpen 2 is left.
      await createBatch(db.sql, newBatch(1, { tenant, datasource: 'ds' }), { maxOpen: 2 });
      const clients = Array.from({ length: 8 }, () => db.connect({ max: 1 }));
      const outcomes = await Promise.all(
        clients.map(async (c, i) => {
          try {
            if (i % 2 === 0) await redriveBatch(c, finished.id, { maxOpen: 2 });
            else await createBatch(c, newBatch(1, { tenant, datasource: 'ds' }), { maxOpen: 2 });
            return i % 2 === 0 ? 'redrive' : 'start';
          } catch (e) {
            if (e instanceof TooManyBatchesError || e instanceof BatchOpenError) return e.name;
            throw e;
          }
        }),
      );
      const [{ open }] = await db.sql<{ open: number }[]>`select count(*) as open from leasehold_batches
        where tenant = ${tenant} and datasource = 'ds' and status = 'open'`;
      expect(open, JSON.stringify(outcomes)).toBe(2);
      expect(
        outcomes.filter((o) => o === 'redrive' || o === 'start'),
        JSON.stringify(outcomes),
      ).toHaveLength(1);
      await Promise.all(clients.map((c) => c.end()));
    }
    // And with no slot left, a redrive is refused as a start would be, changing nothing.
    const tenant = `full-${Date.now()}`;
    const { batch } = await finishedWithFailures(2, ['k001'], { tenant, datasource: 'ds' });
    await createBatch(db.sql, newBatch(1, { tenant, datasource: 'ds' }), { maxOpen: 1 });
    await expect(redriveBatch(db.sql, batch.id, { maxOpen: 1 })).rejects.toMatchObject({ code: 'too_many_batches' });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', redrives: 0, counts: { failed: 1, done: 1 } });
  });

  it("redrives racing a run's finish and concurrent takeovers leave one consistent state: one redrive, every item run once per cycle", async () => {
    for (let round = 0; round < 4; round++) {
      const failing = ['k002', 'k005', 'k007'];
      const { executor, runs } = firstFails(failing);
      const owner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000, parallel: 4 });
      const { batch } = await owner.start(
        newBatch(10, { tenant: ownTenant() }),
        { maxOpen: 100 },
        { ...executor, work: async (i) => (await sleep(2), executor.work(i)) },
      );
      const until = Date.now() + 20_000;
      // Redrive clients hammer from the start: refused while the batch is open, until one lands
      // right after the finish.
      const redrivers = Array.from({ length: 6 }, async () => {
        const sql = db.connect({ max: 1 });
        const got: string[] = [];
        while (Date.now() < until) {
          const r = await settle(redriveBatch(sql, batch.id, { maxOpen: 100 }));
          got.push(typeof r === 'string' ? r : 'redriven');
          if (typeof r !== 'string' || r === 'NothingToRedriveError') break;
          const b = await getBatch(sql, batch.id);
          if (b.redrives > 0) break;
        }
        await sql.end();
        return got;
      });
      // Takeover clients hammer too: the reopened batch is taken by exactly one of them at once.
      const takers = Array.from(
        { length: 4 },
        () => new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000, parallel: 4 }),
      );
      const taking = takers.map(async (t) => {
        let won = 0;
        while (Date.now() < until) {
          if (await t.takeOver(() => executor, batch.id)) {
            won++;
            await runOf(t, batch.id);
          }
          const b = await getBatch(db.sql, batch.id);
          if (b.status === 'succeeded') break;
          await sleep(1);
        }
        return won;
      });
      const got = (await Promise.all(redrivers)).flat();
      const won = await Promise.all(taking);
      const end = await getBatch(db.sql, batch.id);
      expect(end, JSON.stringify(got)).toMatchObject({
        status: 'succeeded',
        redrives: 1,
        counts: { done: 10, failed: 0, pending: 0, running: 0 },
      });
      expect(got.filter((g) => g === 'redriven')).toHaveLength(1);
      expect(
        got.every((g) => ['redriven', 'BatchOpenError', 'NothingToRedriveError'].includes(g)),
        JSON.stringify(got),
      ).toBe(true);
      // One takeover ran the redrive; no item ran twice in one cycle.
      expect(won.reduce((a, b) => a + b, 0)).toBe(1);
      expect(end.runs).toBe(2);
      for (let i = 0; i < 10; i++) {
        const key = `k${String(i).padStart(3, '0')}`;
        expect(runs.get(key), key).toBe(failing.includes(key) ? 2 : 1);
      }
      expect(await redrivesOf(db.sql, batch.id)).toEqual([{ number: 1, idempotency_key: null, items: 3 }]);
      await owner.close();
      await Promise.all(takers.map((t) => t.close()));
    }
  });

  it('a stalled run whose batch was taken over, finished and redriven changes nothing when its item returns', async () => {
    const gate = deferred<string>();
    // A: beats never come (its clock never moves), and its item k000 hangs until the gate opens.
    const a = new Runner(db.connect({ max: 2 }), { clock: new ManualClock(), beatMs: 50, staleMs: 200, parallel: 3 });
    const attempts1 = { attempts: 1, backoffMs: 1 };
    const { batch } = await a.start(
      newBatch(3, { tenant: ownTenant() }),
      { maxOpen: 100 },
      {
        ...attempts1,
        work: async ({ key }) => (key === 'k000' ? gate.promise : Promise.reject(new PermanentItemError(`${key} broke`))),
      },
    );
    await waitFor('k001, k002 failed', async () => (await itemCounts(db.sql, batch.id)).failed === 2);
    // While A owns it, the batch is open: no redrive.
    await expect(redriveBatch(db.sql, batch.id)).rejects.toBeInstanceOf(BatchOpenError);
    await waitFor('stale', async () => {
      const [r] = await db.sql<
        { stale: boolean }[]
      >`select beat_at < now() - interval '200 ms' as stale from leasehold_runs where batch_id = ${batch.id}`;
      return r.stale;
    });
    // B takes over: k000, left running by A, used its only attempt and fails; B finishes the batch.
    const b = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 200 });
    expect(await b.takeOver(() => ({ ...attempts1, work: async () => 'B' }), batch.id)).toBeDefined();
    expect((await runOf(b, batch.id)).outcome).toBe('failed');
    expect(await itemCounts(db.sql, batch.id)).toEqual({ pending: 0, running: 0, done: 0, failed: 3 });

    const r = await redriveBatch(db.sql, batch.id);
    expect(r.redrive.items).toBe(3);
    // A's item returns now: its move is fenced on A's run, which owns nothing.
    gate.resolve('A (late)');
    expect((await runOf(a, batch.id)).outcome).toBe('lost');
    expect((await itemRows(db.sql, batch.id)).map((i) => [i.key, i.state, i.attempts, i.output])).toEqual([
      ['k000', 'pending', 0, null],
      ['k001', 'pending', 0, null],
      ['k002', 'pending', 0, null],
    ]);
    // C runs the redrive to its end.
    expect((await runToEnd(batch.id, { work: async () => 'C' })).outcome).toBe('succeeded');
    expect((await itemRows(db.sql, batch.id)).map((i) => [i.key, i.state, i.attempts, i.output])).toEqual([
      ['k000', 'done', 1, 'C'],
      ['k001', 'done', 1, 'C'],
      ['k002', 'done', 1, 'C'],
    ]);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', runs: 3, redrives: 1 });
    await Promise.all([a.close(), b.close()]);
  });
});
