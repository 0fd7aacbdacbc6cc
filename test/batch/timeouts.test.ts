// Item timeouts (docs/design.md, "Item timeouts"), on a real PostgreSQL: an attempt past its
// timeout fails with `timed out after N ms` and counts, whether the work heeds its signal or not;
// a start's timeout wins over the job's; a start refuses a timeout no worker invocation can give.
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  InvalidBatchError,
  ItemTimeoutError,
  Runner,
  getBatch,
  startBatch,
  type BatchExpander,
  type ItemWork,
} from '../../src/batch/index.js';
import { JobRegistry, defineJob } from '../../src/jobs/index.js';
import { InvalidSettingError } from '../../src/errors.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never } from '../support/time.js';
import { installAudit, itemChanges, itemRows, newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

describe('item timeouts', () => {
  it('fails an attempt that never settles after its timeout, counts it, and fails the item after its attempts', async () => {
    const runner = new Runner(db.sql, { attempts: 2, backoffMs: 0, parallel: 2 });
    const started: number[] = [];
    const aborted: { at: number; reason: unknown }[] = [];
    // Work that never settles and never looks at its signal: only the timeout can end it.
    const work: ItemWork = ({ signal }) => {
      started.push(Date.now());
      signal.addEventListener('abort', () => aborted.push({ at: Date.now(), reason: signal.reason }), { once: true });
      return never();
    };
    const { batch } = await runner.start(newBatch(1), {}, { work, timeoutMs: 300 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed', finishedItems: 1 });

    const [item] = await itemRows(db.sql, batch.id);
    expect(item).toMatchObject({ state: 'failed', attempts: 2, error: 'timed out after 300 ms' });
    // Each attempt's signal was aborted with the timeout as its reason, no sooner than 300 ms in.
    expect(started).toHaveLength(2);
    expect(aborted).toHaveLength(2);
    for (const [i, a] of aborted.entries()) {
      expect(a.reason).toBeInstanceOf(ItemTimeoutError);
      expect(a.at - started[i]).toBeGreaterThanOrEqual(295);
    }
    // The first attempt went back to pending as a retry that used its attempt.
    const retries = (await itemChanges(db.sql, batch.id)).filter((c) => c.old_state === 'running' && c.state === 'pending');
    expect(retries.map((c) => c.attempts)).toEqual([1]);
    await runner.close();
  });

  it('retries a timed-out item that heeds its signal, and ends it done when the next attempt is quick', async () => {
    const runner = new Runner(db.sql, { attempts: 3, backoffMs: 0 });
    const seen: unknown[] = [];
    const work: ItemWork = ({ attempt, signal }) =>
      attempt === 1
        ? new Promise((_, reject) =>
            signal.addEventListener('abort', () => (seen.push(signal.reason), reject(new Error('gave up'))), { once: true }),
          )
        : Promise.resolve({ attempt });
    const { batch } = await runner.start(newBatch(3), {}, { work, timeoutMs: 200 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 3 });
    for (const item of await itemRows(db.sql, batch.id)) {
      expect(item).toMatchObject({ state: 'done', attempts: 2, output: { attempt: 2 }, error: null });
    }
    expect(seen).toHaveLength(3);
    for (const r of seen) expect(r).toBeInstanceOf(ItemTimeoutError);
    await runner.close();
  });

  it("takes the start's timeout over the job's", async () => {
    const runner = new Runner(db.sql, { attempts: 1 });
    const work: ItemWork = () => never();
    const { batch } = await runner.start(newBatch(1, { timeoutMs: 150 }), {}, { work, timeoutMs: 60_000 });
    expect((await getBatch(db.sql, batch.id))?.timeoutMs).toBe(150);
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed' });
    expect((await itemRows(db.sql, batch.id))[0]).toMatchObject({
      state: 'failed',
      attempts: 1,
      error: 'timed out after 150 ms',
    });
    await runner.close();
  });

  it('leaves items without a timeout alone: a slow item with none set is not cut', async () => {
    const runner = new Runner(db.sql, { attempts: 1 });
    const work: ItemWork = () => new Promise((r) => setTimeout(() => r('slow'), 400));
    const { batch } = await runner.start(newBatch(1), {}, { work });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    expect((await getBatch(db.sql, batch.id))?.timeoutMs).toBeNull();
    await runner.close();
  });
});

describe('timeouts a start refuses', () => {
  const job = (timeoutMs?: number) =>
    defineJob({
      name: 'slow',
      description: 'test',
      params: z.object({}),
      expand: async () => ({ items: [{ key: 'a' }] }),
      run: async () => null,
      timeoutMs,
    });
  const deps = (jobs: BatchExpander) => ({ sql: db.sql, jobs, config: { itemTimeoutLimitMs: 20_000 } });
  const req = { tenant: 'acme', datasource: 'refused', job: 'slow', params: {} };

  it('refuses a start whose timeoutMs is longer than a worker invocation can give an item, storing nothing', async () => {
    const jobs = new JobRegistry([job()], { allowedRoots: [], maxItems: 10 });
    const refused = startBatch(deps(jobs), { ...req, requestKey: 'too-long', timeoutMs: 20_001 });
    await expect(refused).rejects.toThrow(InvalidBatchError);
    await expect(refused).rejects.toThrow(
      "timeoutMs 20001 ms is longer than one worker invocation can give an item (20000 ms: the worker's timeout, LEASEHOLD_WORKER_TIMEOUT_MS",
    );
    const [{ n }] = await db.sql<
      { n: number }[]
    >`select count(*)::int as n from leasehold_batches where request_key = 'too-long'`;
    expect(n).toBe(0);
    // At the limit it starts, and the batch keeps its timeout.
    const { batch } = await startBatch(deps(jobs), { ...req, requestKey: 'at-limit', timeoutMs: 20_000 });
    expect(batch.timeoutMs).toBe(20_000);
  });

  it("refuses a start whose job's own timeout is too long, naming the job", async () => {
    const jobs = new JobRegistry([job(60_000)], { allowedRoots: [], maxItems: 10 });
    await expect(startBatch(deps(jobs), { ...req, requestKey: 'job-too-long' })).rejects.toThrow(
      'job "slow": timeoutMs 60000 ms is longer than one worker invocation can give an item (20000 ms:',
    );
    // A start's own, shorter timeout wins and lets it start.
    const { batch } = await startBatch(deps(jobs), { ...req, requestKey: 'own-shorter', timeoutMs: 5_000 });
    expect(batch.timeoutMs).toBe(5_000);
  });

  it('refuses a job registered with a timeout out of range', () => {
    expect(() => new JobRegistry([job(0)], { allowedRoots: [], maxItems: 10 })).toThrow(InvalidSettingError);
    expect(() => new JobRegistry([job(900_001)], { allowedRoots: [], maxItems: 10 })).toThrow(/timeoutMs/);
  });
});
