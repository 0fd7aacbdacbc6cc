// Pause, resume and the deadline of one batch (docs/design.md, "Pause, deadline and startBy";
// issue 39), with 8 runs of one batch at once, each a Runner of its own.
import { describe, expect, it } from 'vitest';
import {
  Runner,
  claimDispatch,
  createBatch,
  endPastDeadlines,
  getBatch,
  pauseBatch,
  resumeBatch,
  setBatchDeadline,
  type ItemWork,
  type RunResult,
} from '../../src/batch/index.js';
import { pastDeadlineStatement } from '../../src/batch/sql/index.js';
import { batchEvents } from '../../src/batch/sql/events.js';
import type { Sql } from '../../src/store/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor } from '../support/waits.js';
import { itemCounts, itemRows, liveRuns, newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

const pool = usePools(db, 2);

let tenants = 0;
const ownTenant = () => `pause-${process.pid}-${++tenants}`;

const BEAT_MS = 50;

/** Each runner joins the batch (one run each, one at a time); resolves to their runs. */
async function joinAll(runners: Runner[], batchId: string, work: ItemWork): Promise<Promise<RunResult>[]> {
  const runs: Promise<RunResult>[] = [];
  for (const r of runners) {
    await waitFor('join', async () => (await r.takeOver(() => ({ work }), batchId)) !== undefined, { everyMs: 10 });
    runs.push(runOf(r, batchId));
  }
  return runs;
}

/** The items' state and attempts, and the latest write to any of them. */
async function itemsSnapshot(batchId: string) {
  const [r] = await db.sql<{ changed: Date | null; sum: string }[]>`select max(updated_at) as changed,
      string_agg(key || ':' || state || ':' || attempts, ',' order by key) as sum
    from leasehold_items where batch_id = ${batchId}`;
  return r;
}

describe('pause and resume', () => {
  it('8 runs of a paused batch hand off within a beat using no attempt; nothing claims its items until it resumes, and then it finishes', async () => {
    const handoffMs: number[] = [];
    for (let round = 0; round < 3; round++) {
      const { batch } = await createBatch(db.sql, newBatch(1_600, { tenant: ownTenant(), maxConcurrency: 8 }), { maxOpen: 100 });
      expect(batch.target).toBe(8);
      let slow = true;
      const work: ItemWork = async () => {
        await sleep(slow ? 10 : Math.random());
        return 'ok';
      };
      const runners = Array.from({ length: 8 }, () => new Runner(pool(), { beatMs: BEAT_MS, staleMs: 5_000, parallel: 2 }));
      const runs = await joinAll(runners, batch.id, work);
      expect(await liveRuns(db.sql, batch.id)).toHaveLength(8);

      const pausedAt = performance.now();
      const paused = await pauseBatch(db.sql, batch.id);
      expect(paused).toMatchObject({ status: 'open', target: 0 });
      expect(paused.pausedAt).toBeInstanceOf(Date);
      // Pausing again changes nothing.
      expect((await pauseBatch(db.sql, batch.id)).pausedAt).toEqual(paused.pausedAt);
      const outcomes = await Promise.all(runs);
      handoffMs.push(Math.round(performance.now() - pausedAt));
      expect(outcomes.map((r) => r.outcome)).toEqual(Array(8).fill('drained'));
      expect(await liveRuns(db.sql, batch.id)).toEqual([]);

      // No attempt used: nothing is running, every pending item is at 0 attempts, every done one at 1.
      const items = await itemRows(db.sql, batch.id);
      expect(items.filter((i) => i.state === 'running')).toEqual([]);
      expect(items.filter((i) => i.state === 'pending').every((i) => i.attempts === 0)).toBe(true);
      expect(items.filter((i) => i.state === 'done').every((i) => i.attempts === 1)).toBe(true);
      const pending = items.filter((i) => i.state === 'pending').length;
      expect(pending).toBeGreaterThan(0);

      // Nothing claims its items while paused: no takeover joins it, the scheduler's dispatch and
      // its tenant pass it by, and its items stay as they were over several beats.
      const before = await itemsSnapshot(batch.id);
      for (const r of runners) expect(await r.takeOver(() => ({ work }), batch.id)).toBeUndefined();
      expect(await runners[0].takeOver(() => ({ work }))).toBeUndefined();
      expect(await claimDispatch(db.sql, { staleMs: 5_000, cooldownMs: 0 })).not.toContain(batch.id);
      const [tenant] = await db.sql<{ wanting: number; running: number }[]>`select wanting, running from leasehold_tenants
        where tenant = ${batch.tenant}`;
      expect(tenant).toEqual({ wanting: 0, running: 0 });
      await sleep(BEAT_MS * 6);
      expect(await itemsSnapshot(batch.id)).toEqual(before);
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'open', liveRuns: 0 });

      // Resume: its target is back and the runs join again; the batch finishes, each item run once.
      slow = false;
      const resumed = await resumeBatch(db.sql, batch.id);
      expect(resumed).toMatchObject({ status: 'open', target: 8, pausedAt: null });
      const again = await joinAll(runners, batch.id, work);
      const ends = await Promise.all(again);
      expect(ends.filter((r) => r.outcome === 'succeeded')).toHaveLength(1);
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
      const done = await itemRows(db.sql, batch.id);
      expect(done.every((i) => i.state === 'done' && i.attempts === 1)).toBe(true);
      await pool.endAll();
    }
    console.log(`pause: 8 runs handed off in ${handoffMs.join(', ')} ms (beat ${BEAT_MS} ms); attempts used 0`);
  });

  it('a stale run of a paused batch is not taken over until it resumes', async () => {
    const { batch } = await createBatch(db.sql, newBatch(10, { tenant: ownTenant() }), { maxOpen: 100 });
    // The first run is stuck in its first item and beats only after 4 s: stale to a taker whose
    // stale limit is 100 ms (the taker's limit decides).
    const r1 = new Runner(pool(), { beatMs: 4_000, staleMs: 5_000, parallel: 1 });
    let release!: () => void;
    const stuck = new Promise<void>((resolve) => (release = resolve));
    await r1.takeOver(() => ({ work: async () => (await stuck, 'ok') }), batch.id);
    await pauseBatch(db.sql, batch.id);
    await sleep(250);
    const r2 = new Runner(pool(), { beatMs: 50, staleMs: 100, parallel: 1 });
    expect(await r2.takeOver(() => ({ work: async () => 'ok' }), batch.id)).toBeUndefined();
    expect(await claimDispatch(db.sql, { staleMs: 100, cooldownMs: 0 })).not.toContain(batch.id);
    await resumeBatch(db.sql, batch.id);
    expect(await r2.takeOver(() => ({ work: async () => 'ok' }), batch.id)).toMatchObject({
      id: batch.id,
      replaced: expect.any(String),
    });
    release();
    await runOf(r2, batch.id);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    await r1.stop(batch.id);
  });

  it('a finished batch cannot be paused or resumed', async () => {
    const { batch } = await createBatch(db.sql, newBatch(1, { tenant: ownTenant() }), { maxOpen: 100 });
    const r = new Runner(pool(), { beatMs: 50, staleMs: 5_000 });
    await r.takeOver(() => ({ work: async () => 'ok' }), batch.id);
    expect(await runOf(r, batch.id)).toMatchObject({ outcome: 'succeeded' });
    await expect(pauseBatch(db.sql, batch.id)).rejects.toMatchObject({ code: 'batch_finished' });
    await expect(resumeBatch(db.sql, batch.id)).rejects.toMatchObject({ code: 'batch_finished' });
    await expect(pauseBatch(db.sql, '00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({ code: 'batch_not_found' });
  });
});

describe('deadline', () => {
  it('a batch of 4 runs past its deadline ends failed with reason deadline: pending items not run, running ones stopped, its event written', async () => {
    for (let round = 0; round < 3; round++) {
      const { batch } = await createBatch(db.sql, newBatch(400, { tenant: ownTenant(), maxConcurrency: 4, deadlineMs: 60_000 }), {
        maxOpen: 100,
      });
      expect(batch.deadline!.getTime() - batch.createdAt.getTime()).toBe(60_000);
      // Items wait until all 4 runs joined, and the deadline is brought close only then: set at
      // 400 ms from the start, four joins under load took longer, the batch ended before the
      // last run joined, and the test waited for a join that could not come (seen in CI).
      const joined = deferred<void>();
      const aborted: string[] = [];
      const work: ItemWork = async ({ key, signal }) => {
        await joined.promise;
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 30);
          signal.addEventListener('abort', () => (clearTimeout(t), aborted.push(key), resolve()), { once: true });
        });
        return 'ok';
      };
      const runners = Array.from({ length: 4 }, () => new Runner(pool(), { beatMs: BEAT_MS, staleMs: 5_000, parallel: 2 }));
      const runs = await joinAll(runners, batch.id, work);
      await setBatchDeadline(db.sql, batch.id, { deadline: new Date(Date.now() + 300) });
      joined.resolve();
      const outcomes = await Promise.all(runs);
      // The first run's beat past the deadline ended it; every run stopped as after a cancel.
      expect(outcomes.every((r) => r.outcome === 'lost')).toBe(true);
      const ended = await getBatch(db.sql, batch.id);
      expect(ended).toMatchObject({ status: 'failed', reason: 'deadline', liveRuns: 0 });
      const counts = await itemCounts(db.sql, batch.id);
      expect(counts.running).toBe(0);
      expect(counts.pending).toBeGreaterThan(0);
      expect(counts.failed).toBe(0);
      const events = await batchEvents(db.sql, batch.id);
      expect(events).toHaveLength(1);
      expect(events[0].detail).toMatchObject({ status: 'failed', reason: 'deadline', batchId: batch.id });
      // The scheduler finds nothing more to end.
      expect(await endPastDeadlines(db.sql)).not.toContain(batch.id);
      await pool.endAll();
    }
  });

  it('the scheduler ends a batch nobody runs once its deadline (set by PATCH) passes, once, found by its index', async () => {
    const { batch } = await createBatch(db.sql, newBatch(5, { tenant: ownTenant() }), { maxOpen: 100 });
    expect(batch.deadline).toBeNull();
    const later = await setBatchDeadline(db.sql, batch.id, { deadline: new Date(Date.now() + 60_000) });
    expect(later.deadline).toBeInstanceOf(Date);
    expect(await endPastDeadlines(db.sql)).not.toContain(batch.id);
    await setBatchDeadline(db.sql, batch.id, { deadlineMs: 1 });
    // Two schedulers at once: the batch ends once.
    const [a, b] = await Promise.all([endPastDeadlines(db.sql), endPastDeadlines(pool())]);
    expect([...a, ...b].filter((id) => id === batch.id)).toHaveLength(1);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', reason: 'deadline' });
    expect(await batchEvents(db.sql, batch.id)).toHaveLength(1);
    await expect(setBatchDeadline(db.sql, batch.id, null)).rejects.toMatchObject({ code: 'batch_finished' });
    // The read of expired deadlines is an index scan of the open batches with a deadline.
    const plan = await db.sql.begin(async (tx) => {
      const t = tx as unknown as Sql;
      await t`set local enable_seqscan = off`;
      const rows = await t<{ 'QUERY PLAN': string }[]>`explain ${pastDeadlineStatement(t, { limit: 100 })}`;
      return rows.map((r) => r['QUERY PLAN']).join('\n');
    });
    expect(plan).toContain('leasehold_batches_deadline');
  });

  it('refuses both deadline and deadlineMs, and a deadlineMs out of range', async () => {
    await expect(
      createBatch(db.sql, newBatch(1, { tenant: ownTenant(), deadline: new Date(), deadlineMs: 5 }), { maxOpen: 100 }),
    ).rejects.toMatchObject({ code: 'invalid_batch' });
    await expect(
      createBatch(db.sql, newBatch(1, { tenant: ownTenant(), deadlineMs: 0 }), { maxOpen: 100 }),
    ).rejects.toMatchObject({
      code: 'invalid_batch',
    });
  });
});
