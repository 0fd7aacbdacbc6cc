// Usage and cost per batch and per tenant (docs/design.md, "Usage and cost"; issue 39 item 6):
// each run stores its share of its process's time, its item attempts and its S3 requests once, at
// its end; a run that dies is counted by the takeover that replaces it, from its start to its last
// beat; a tenant's usage sums its runs recorded within a time range.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBatch, getBatch, getBatchUsage, getTenantUsage, pricesFor, Runner, type Executor } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { recordRunUsage } from '../../src/batch/sql/usage.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();
const uid = () => Math.random().toString(36).slice(2, 8);

let s3: LocalS3;
beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('usage-in');
  await s3.put('usage-in', 'lines.jsonl', Array.from({ length: 300 }, (_, i) => JSON.stringify({ n: i })).join('\n') + '\n');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

const slowWork: Executor = {
  parallel: 4,
  work: async () => {
    await sleep(20);
    return 'ok';
  },
};

describe('usage per batch', () => {
  it('close() waits for a run that has ended until its usage is stored and its end reported', async () => {
    const { batch } = await createBatch(db.sql, newBatch(20, { tenant: `usage-${uid()}`, job: `u-${uid()}` }), { maxOpen: 10 });
    const ended: string[] = [];
    const runner = new Runner(db.sql, {
      maxRuns: 1,
      beatMs: 200,
      staleMs: 5_000,
      storeTimeoutMs: 30_000,
      onEvent: (e) => {
        if (e.type === 'run-ended') ended.push(e.result.outcome);
      },
    });
    // A run's usage insert waits while the test holds an advisory lock: a trigger of this test's
    // schema takes it (shared) before each usage row is written; every other statement goes on.
    await db.sql`create or replace function usage_gate() returns trigger language plpgsql as $$
      begin perform pg_advisory_xact_lock_shared(hashtext('leasehold-test-usage-gate')); return new; end $$`;
    await db.sql`create trigger usage_gate before insert on leasehold_run_usage for each row execute function usage_gate()`;
    const holder = await db.sql.reserve();
    await holder`select pg_advisory_lock(hashtext('leasehold-test-usage-gate'))`;
    let held = true;
    const unlock = async () => {
      if (!held) return;
      held = false;
      await holder`select pg_advisory_unlock(hashtext('leasehold-test-usage-gate'))`;
    };
    try {
      await runner.takeOver(() => ({ parallel: 4, work: async () => 'ok' }), batch.id);
      await waitFor('the batch ends', async () => (await getBatch(db.sql, batch.id)).status !== 'open', { everyMs: 20 });
      // The run's work is over; it now waits to store its usage.
      await sleep(300);
      let closed = false;
      const closing = runner.close().then(() => {
        closed = true;
      });
      await sleep(300);
      expect(closed).toBe(false);
      expect(ended).toEqual([]);
      await unlock();
      await closing;
    } finally {
      await unlock();
      holder.release();
      await db.sql`drop trigger usage_gate on leasehold_run_usage`;
    }
    expect(ended).toEqual(['succeeded']);
    expect(await getBatchUsage(db.sql, batch.id, pricesFor('us-east-1'))).toMatchObject({ runs: 1, items: 20 });
  });

  it("two batches run at once by one runner are charged the runner's time once between them, within 5 %", async () => {
    const tenant = `usage-${uid()}`;
    const a = await createBatch(db.sql, newBatch(240, { tenant, job: `u-${uid()}` }), { maxOpen: 10 });
    const b = await createBatch(db.sql, newBatch(120, { tenant, job: `u-${uid()}`, datasource: 'other' }), { maxOpen: 10 });
    const runner = new Runner(db.sql, { maxRuns: 2, beatMs: 200, staleMs: 5_000, memoryMb: 2_048 });
    const t0 = performance.now();
    await runner.takeOver(() => slowWork, a.batch.id);
    await runner.takeOver(() => slowWork, b.batch.id);
    await Promise.all([runner.running(a.batch.id), runner.running(b.batch.id)]);
    const measured = performance.now() - t0;
    await runner.close();
    expect((await getBatch(db.sql, a.batch.id)).status).toBe('succeeded');
    const prices = pricesFor('us-east-1');
    const [ua, ub] = await Promise.all([getBatchUsage(db.sql, a.batch.id, prices), getBatchUsage(db.sql, b.batch.id, prices)]);
    const recorded = ua.workerMs + ub.workerMs;
    console.log(
      `[usage] recorded ${recorded} ms vs measured ${measured.toFixed(0)} ms; a ${ua.workerMs} ms, b ${ub.workerMs} ms`,
    );
    expect(Math.abs(recorded - measured) / measured).toBeLessThan(0.05);
    // While both ran each was charged half: the longer batch is charged more than the shorter.
    expect(ua.workerMs).toBeGreaterThan(ub.workerMs);
    expect(ua).toMatchObject({ runs: 1, diedRuns: 0, invocations: 1, items: 240, s3Requests: { get: 0, put: 0, list: 0 } });
    expect(ub.items).toBe(120);
    // 2,048 MB: two GB per second of worker time.
    expect(ua.gbSeconds).toBeCloseTo((2 * ua.workerMs) / 1000, 2);
    const t = prices.table;
    const cost = ua.gbSeconds * t.lambdaGbSecond[process.arch === 'arm64' ? 'arm64' : 'x86_64'] + 1 * t.lambdaRequest.x86_64;
    expect(ua.estimatedCost.total).toBeCloseTo(cost, 7);
    expect(ua.estimatedCost).toMatchObject({ currency: 'USD', region: 'us-east-1', overridden: false, s3: 0 });
  }, 60_000);

  it("with chargeIdle, a process's idle time before a run and after its last one is charged to them; without, to nobody", async () => {
    const idleMs = 400;
    const charged = async (chargeIdle: boolean) => {
      const tenant = `idle-${uid()}`;
      const { batch } = await createBatch(db.sql, newBatch(10, { tenant, job: `i-${uid()}` }), { maxOpen: 10 });
      const runner = new Runner(db.sql, { beatMs: 200, staleMs: 5_000, chargeIdle });
      // Idle before the run (as a worker polls for work), then the run, then idle again before
      // the process ends (as a worker waits for more work before it returns).
      await sleep(idleMs);
      const t0 = performance.now();
      await runner.takeOver(() => slowWork, batch.id);
      await runner.running(batch.id);
      const runMs = performance.now() - t0;
      await waitFor('its usage stored', async () => (await getBatchUsage(db.sql, batch.id)).runs === 1);
      const atEnd = (await getBatchUsage(db.sql, batch.id)).workerMs;
      await sleep(idleMs);
      await runner.close();
      return { runMs, atEnd, afterClose: (await getBatchUsage(db.sql, batch.id)).workerMs };
    };
    const on = await charged(true);
    // The idle time before it, at its end (the run's own time is more than 0); the idle time
    // after it (the sleep between its end and close) added at close. 5 ms for a timer's rounding.
    expect(on.atEnd).toBeGreaterThan(idleMs - 5);
    expect(on.afterClose).toBeGreaterThanOrEqual(on.atEnd + idleMs - 5);
    const off = await charged(false);
    // From its takeover to its end only: within the time measured around the run.
    expect(off.atEnd).toBeLessThanOrEqual(off.runMs);
    expect(off.afterClose).toBe(off.atEnd);
  });

  it('counts a run that died without reporting from its start to its last beat, when a takeover replaces it', async () => {
    const tenant = `died-${uid()}`;
    const { batch } = await createBatch(db.sql, newBatch(20, { tenant, job: `d-${uid()}` }), { maxOpen: 10 });
    // A run that took the batch and died: its row stays, its beat stops (put 5 s after its start, 40 s ago).
    const dead = crypto.randomUUID();
    const deadProcess = crypto.randomUUID();
    await q.takeOver(db.sql, { run: dead, process: deadProcess, staleMs: 30_000, maxRunning: q.NO_LIMIT, batchId: batch.id });
    await db.sql`update leasehold_runs set started_at = now() - interval '45 s', beat_at = now() - interval '40 s' where id = ${dead}`;
    const ended = await runUntilEnd(db.sql, batch.id, () => slowWork, {
      runner: { beatMs: 200, staleMs: 30_000, memoryMb: 512 },
    });
    expect(ended.status).toBe('succeeded');
    const [row] = await db.sql<{ worker_ms: number; memory_mb: number; died: boolean; process: string }[]>`
      select worker_ms, memory_mb, died, process from leasehold_run_usage where run_id = ${dead}`;
    expect(row).toMatchObject({ died: true, memory_mb: 512, process: deadProcess });
    expect(row!.worker_ms).toBeCloseTo(5_000, -1);
    const u = await getBatchUsage(db.sql, batch.id);
    expect(u).toMatchObject({ runs: 2, diedRuns: 1, invocations: 2, items: 20 });
    expect(u.workerMs).toBeGreaterThanOrEqual(5_000);
    // Should the run report after all, its own figures replace the estimate; a second report changes nothing.
    const own = {
      runId: dead,
      batchId: batch.id,
      tenant,
      process: deadProcess,
      memoryMb: 512,
      architecture: 'x86_64' as const,
      items: 3,
      s3Get: 0,
      s3Put: 0,
      s3List: 0,
    };
    await recordRunUsage(db.sql, { ...own, workerMs: 7_000 });
    await recordRunUsage(db.sql, { ...own, workerMs: 9_000 });
    const [after] = await db.sql<
      { worker_ms: number; died: boolean }[]
    >`select worker_ms, died from leasehold_run_usage where run_id = ${dead}`;
    expect(after).toEqual({ worker_ms: 7_000, died: false });
  }, 60_000);

  it("counts the S3 requests of a source batch's reader and results writer", async () => {
    const { batch } = await startSourceBatch(db.sql, s3.client, {
      tenant: `s3-${uid()}`,
      datasource: 'ds',
      job: 'echo',
      params: {},
      requestKey: `s3-${uid()}`,
      source: { s3: { bucket: 'usage-in', key: 'lines.jsonl', format: 'jsonl' } },
      results: { s3: { bucket: 'usage-in', prefix: 'out/' } },
    });
    const ended = await runUntilEnd(db.sql, batch.id, () => ({ work: async () => 'ok' }), {
      runner: { parallel: 8, beatMs: 200, staleMs: 5_000, s3: () => s3.client, sourceRangeBytes: 1_024 },
      until: (b) => b.status !== 'open' && b.resultsManifest !== null,
    });
    expect(ended.status).toBe('succeeded');
    const u = await getBatchUsage(db.sql, batch.id);
    console.log(`[usage] source batch S3 requests ${JSON.stringify(u.s3Requests)}, S3 cost $${u.estimatedCost.s3}`);
    // A 1 KiB range over a file of ~3 KiB: several GETs; the results: at least a part and the manifest.
    expect(u.s3Requests.get).toBeGreaterThanOrEqual(3);
    expect(u.s3Requests.put).toBeGreaterThanOrEqual(2);
    expect(u.items).toBe(300);
    expect(u.estimatedCost.s3).toBeGreaterThan(0);
  }, 60_000);
});

describe('usage per tenant', () => {
  it('sums the runs recorded within [from, to), and a range before them holds nothing', async () => {
    const tenant = `tenant-${uid()}`;
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const { batch } = await createBatch(db.sql, newBatch(10, { tenant, job: `t-${uid()}`, datasource: `ds${i}` }), {
        maxOpen: 10,
      });
      ids.push(batch.id);
      await runUntilEnd(db.sql, batch.id, () => slowWork, { runner: { beatMs: 200, staleMs: 5_000 } });
    }
    await waitFor('both runs recorded', async () => (await getTenantUsage(db.sql, tenant)).runs === 2, { timeoutMs: 5_000 });
    // One run recorded two hours ago.
    await db.sql`update leasehold_run_usage set recorded_at = now() - interval '2 hours' where batch_id = ${ids[0]!}`;
    const [older, newer] = await Promise.all(ids.map((id) => getBatchUsage(db.sql, id)));
    const all = await getTenantUsage(db.sql, tenant);
    expect(all).toMatchObject({ runs: 2, items: 20 });
    // Each figure is rounded to the ms: the sum of two rounded ones may differ by one.
    expect(Math.abs(all.workerMs - (older!.workerMs + newer!.workerMs))).toBeLessThanOrEqual(1);
    expect(all.to.getTime() - all.from.getTime()).toBe(30 * 86_400_000);
    const lastHour = await getTenantUsage(db.sql, tenant, { from: new Date(Date.now() - 3_600_000) });
    expect(lastHour).toMatchObject({ runs: 1, items: 10, workerMs: newer!.workerMs, gbSeconds: newer!.gbSeconds });
    const before = await getTenantUsage(db.sql, tenant, { to: new Date(Date.now() - 3 * 3_600_000) });
    expect(before).toMatchObject({ runs: 0, workerMs: 0, gbSeconds: 0, estimatedCost: { total: 0 } });
  }, 60_000);
});
