// Bulk actions by filter (docs/design.md, "Bulk actions"; issue 39): one request key makes one
// action, its progress can be followed with why batches were skipped, and its chunks, claimed
// with FOR UPDATE SKIP LOCKED, never make a worker wait on it nor wait on a worker.
import { describe, expect, it } from 'vitest';
import {
  Runner,
  cancelBatch,
  createBatch,
  getAction,
  getBatch,
  pauseBatch,
  startAction,
  workAction,
  type ActionKind,
  type ItemWork,
} from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

const pools = usePools(db);
const pool = (max = 2, applicationName?: string): Sql => pools(max, applicationName ? { applicationName } : {});

let seq = 0;
const own = (what: string) => `${what}-${process.pid}-${++seq}`;

/** `n` open batches of one new tenant (one item each unless told). */
async function openBatches(tenant: string, n: number, items = 1): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const { batch } = await createBatch(db.sql, newBatch(items, { tenant, datasource: `ds${i % 3}` }), { maxOpen: 100_000 });
    ids.push(batch.id);
  }
  return ids;
}

async function statuses(ids: string[]): Promise<Record<string, number>> {
  const rows = await db.sql<{ status: string; paused: boolean; n: number }[]>`select status, paused_at is not null as paused,
      count(*)::int as n from leasehold_batches
    where id in (select x::uuid from jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb) as x) group by 1, 2`;
  return Object.fromEntries(rows.map((r) => [`${r.status}${r.paused ? '/paused' : ''}`, r.n]));
}

describe('bulk actions', () => {
  it('one request key makes one action: 8 concurrent requests with it answer the same action, and a repeat after it finished changes nothing', async () => {
    for (let round = 0; round < 3; round++) {
      const tenant = own('idem');
      const ids = await openBatches(tenant, 12);
      const key = own('key');
      const request = { requestKey: key, action: 'cancel' as ActionKind, filter: { tenant } };
      const answers = await Promise.all(Array.from({ length: 8 }, () => startAction(pool(1), request)));
      expect(new Set(answers.map((a) => a.action.id)).size).toBe(1);
      expect(answers.filter((a) => a.created)).toHaveLength(1);
      expect(answers[0].action).toMatchObject({ matched: 12, done: 0, skipped: 0, remaining: 12, finishedAt: null });
      const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_actions where request_key = ${key}`;
      expect(n).toBe(1);
      await workAction(db.sql, answers[0].action.id);
      expect(await statuses(ids)).toEqual({ cancelled: 12 });

      // Batches started since are not the action's; the same key again answers the finished action.
      const later = await openBatches(tenant, 2);
      const again = await startAction(db.sql, request);
      expect(again.created).toBe(false);
      expect(again.action).toMatchObject({ id: answers[0].action.id, matched: 12, done: 12, skipped: 0, remaining: 0 });
      expect(again.action.finishedAt).toBeInstanceOf(Date);
      await workAction(db.sql, again.action.id);
      expect(await statuses(later)).toEqual({ open: 2 });
    }
  });

  it('progress can be followed chunk by chunk, and every skipped batch says why', async () => {
    const tenant = own('follow');
    const ids = await openBatches(tenant, 30);
    const started = await startAction(db.sql, { requestKey: own('k'), action: 'cancel', filter: { tenant, status: ['open'] } });
    expect(started.action).toMatchObject({ matched: 30, filter: { tenant, status: ['open'] } });
    // Between the snapshot and the chunks: 3 cancelled one by one, 2 finish by their runs.
    for (const id of ids.slice(0, 3)) await cancelBatch(db.sql, id);
    const runner = new Runner(pool(), { beatMs: 50, staleMs: 5_000, parallel: 1 });
    for (const id of ids.slice(3, 5)) {
      await runner.takeOver(() => ({ work: async () => 'ok' }), id);
      await runOf(runner, id);
    }
    const seen: { done: number; skipped: number; remaining: number }[] = [];
    for (;;) {
      const w = await workAction(db.sql, started.action.id, { chunk: 7, budgetMs: 0 });
      const a = await getAction(db.sql, started.action.id);
      seen.push({ done: a.done, skipped: a.skipped, remaining: a.remaining });
      if (w.finished) break;
      expect(seen.length).toBeLessThan(10);
    }
    // One chunk of 7 a call (the budget of 0 ms lets one chunk begin).
    expect(seen.map((s) => s.done + s.skipped)).toEqual([7, 14, 21, 28, 30]);
    expect(seen.map((s) => s.remaining)).toEqual([23, 16, 9, 2, 0]);
    const a = await getAction(db.sql, started.action.id);
    expect(a).toMatchObject({ matched: 30, done: 25, skipped: 5, remaining: 0 });
    expect(a.skippedReasons).toEqual([
      { reason: 'already cancelled', count: 3 },
      { reason: 'already succeeded', count: 2 },
    ]);
    expect(a.skippedBatches.map((s) => s.batchId).sort()).toEqual(ids.slice(0, 5).sort());
    expect(await statuses(ids)).toEqual({ cancelled: 28, succeeded: 2 });
  });

  it('pause and resume skip what is paused already or not paused, and resume what pause paused', async () => {
    const tenant = own('steer');
    const ids = await openBatches(tenant, 10);
    await pauseBatch(db.sql, ids[0]);
    const pause = await startAction(db.sql, { requestKey: own('k'), action: 'pause', filter: { tenant, status: ['open'] } });
    await workAction(db.sql, pause.action.id);
    expect(await getAction(db.sql, pause.action.id)).toMatchObject({
      done: 9,
      skipped: 1,
      skippedReasons: [{ reason: 'already paused', count: 1 }],
    });
    expect(await statuses(ids)).toEqual({ 'open/paused': 10 });
    // Resume by datasource: ds0 holds batches 0, 3, 6, 9; one of them resumed already.
    await db.sql`update leasehold_batches set paused_at = null, target = 1 where id = ${ids[3]}`;
    const resume = await startAction(db.sql, {
      requestKey: own('k'),
      action: 'resume',
      filter: { tenant, datasource: 'ds0', status: ['open'] },
    });
    await workAction(db.sql, resume.action.id);
    expect(await getAction(db.sql, resume.action.id)).toMatchObject({
      matched: 4,
      done: 3,
      skipped: 1,
      skippedReasons: [{ reason: 'not paused', count: 1 }],
    });
    expect(await statuses(ids)).toEqual({ open: 4, 'open/paused': 6 });
    // The default status of resume is `paused`: only the 6 still paused match.
    const rest = await startAction(db.sql, { requestKey: own('k'), action: 'resume', filter: { tenant } });
    expect(rest.action.matched).toBe(6);
  });

  it('a filter by creation time matches only the batches created in it', async () => {
    const tenant = own('created');
    const early = await openBatches(tenant, 3);
    await sleep(20);
    const [{ mid }] = await db.sql<{ mid: Date }[]>`select now() as mid`;
    await sleep(20);
    const late = await openBatches(tenant, 4);
    const a = await startAction(db.sql, { requestKey: own('k'), action: 'cancel', filter: { tenant, createdAfter: mid } });
    expect(a.action.matched).toBe(4);
    await workAction(db.sql, a.action.id);
    expect(await statuses(late)).toEqual({ cancelled: 4 });
    expect(await statuses(early)).toEqual({ open: 3 });
  });

  it('4 workers of one action at once work each batch exactly once', async () => {
    for (let round = 0; round < 3; round++) {
      const tenant = own('lanes');
      const ids = await openBatches(tenant, 120);
      const { action } = await startAction(db.sql, { requestKey: own('k'), action: 'cancel', filter: { tenant } });
      const results = await Promise.all(
        Array.from({ length: 4 }, () => workAction(pool(3), action.id, { chunk: 10, parallel: 2 })),
      );
      // Every batch was claimed by one worker only: the chunks' batches add up to the matched ones,
      // and none was skipped as already cancelled (which a second worker on it would find).
      expect(results.reduce((n, r) => n + r.batches, 0)).toBe(120);
      expect(results.filter((r) => r.chunks > 0).length).toBeGreaterThan(1);
      expect(await getAction(db.sql, action.id)).toMatchObject({ done: 120, skipped: 0, remaining: 0 });
      expect(await statuses(ids)).toEqual({ cancelled: 120 });
    }
  }, 180_000);

  it('a batch a worker holds locked is busy: the chunk does not wait for it, works the others, and tries it again later', async () => {
    const tenant = own('busy');
    const ids = await openBatches(tenant, 20);
    const { action } = await startAction(db.sql, { requestKey: own('k'), action: 'cancel', filter: { tenant } });
    // A worker's transaction holds one batch's row (as a takeover or an end does) and does not commit.
    const worker = pool(1, own('busy-worker'));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const tx = worker.begin(async (t) => {
      await t`select id from leasehold_batches where id = ${ids[5]} for update`;
      locked();
      await held;
    });
    await isLocked;
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from pg_locks l join pg_class c on c.oid = l.relation
      where c.relname = 'leasehold_batches' and l.mode = 'RowShareLock' and l.granted`;
    expect(n).toBeGreaterThan(0);
    const t0 = performance.now();
    const w = await workAction(db.sql, action.id, { lockTimeoutMs: 100, busyRetryMs: 60_000 });
    const ms = performance.now() - t0;
    expect(w).toMatchObject({ batches: 20, finished: false });
    expect(await getAction(db.sql, action.id)).toMatchObject({ done: 19, skipped: 0, remaining: 1 });
    expect((await getBatch(db.sql, ids[5])).status).toBe('open');
    // The held lock cost the action one lock_timeout, not the worker's transaction.
    expect(ms).toBeLessThan(5_000);
    const [row] = await db.sql<{ tries: number }[]>`select tries from leasehold_action_batches
      where action_id = ${action.id} and batch_id = ${ids[5]}`;
    expect(row.tries).toBe(1);
    release();
    await tx;
    await db.sql`update leasehold_action_batches set taken_until = null where action_id = ${action.id}`;
    expect(await workAction(db.sql, action.id)).toMatchObject({ batches: 1, finished: true });
    expect(await statuses(ids)).toEqual({ cancelled: 20 });
  });

  it('a batch busy every try is skipped as busy after maxTries', async () => {
    const tenant = own('busy-max');
    const ids = await openBatches(tenant, 3);
    const { action } = await startAction(db.sql, { requestKey: own('k'), action: 'pause', filter: { tenant } });
    const worker = pool(1);
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const tx = worker.begin(async (t) => {
      await t`select id from leasehold_batches where id = ${ids[1]} for update`;
      locked();
      await held;
    });
    await isLocked;
    for (let i = 0; i < 3; i++) await workAction(db.sql, action.id, { lockTimeoutMs: 50, busyRetryMs: 0, maxTries: 3 });
    release();
    await tx;
    expect(await getAction(db.sql, action.id)).toMatchObject({
      done: 2,
      skipped: 1,
      skippedReasons: [{ reason: 'busy', count: 1 }],
      skippedBatches: [{ batchId: ids[1], reason: 'busy' }],
    });
    expect(await statuses(ids)).toEqual({ 'open/paused': 2, open: 1 });
  });

  it('cancelling 300 batches never makes a running batch of another tenant wait on the action, and stops the runs of its own', async () => {
    const actionApp = own('bulk-act');
    const tenant = own('victims');
    const ids = await openBatches(tenant, 300);
    // Runs of 4 matched batches (100 slow items each) and of one other tenant's batch (600 items).
    // The matched batches' items wait until the action is over, so they cannot finish before it.
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const held: ItemWork = async () => (await gate, 'ok');
    const work: ItemWork = async () => (await sleep(2), 'ok');
    const bystanderApp = own('bulk-by');
    const runners = Array.from(
      { length: 5 },
      (_, i) => new Runner(pool(2, i < 4 ? own('bulk-run') : bystanderApp), { beatMs: 50, staleMs: 5_000, parallel: 2 }),
    );
    const matchedRunning = await openBatches(tenant, 4, 100);
    const { batch: other } = await createBatch(db.sql, newBatch(600, { tenant: own('bystander') }), { maxOpen: 100 });
    for (let i = 0; i < 4; i++) await runners[i].takeOver(() => ({ work: held }), matchedRunning[i]);
    const matchedRuns = matchedRunning.map((id, i) => runOf(runners[i], id));
    await runners[4].takeOver(() => ({ work }), other.id);
    const otherRun = runOf(runners[4], other.id);

    // Sample every 5 ms: a worker backend waiting on a lock the action's backends hold, and how long.
    let sampling = true;
    let longestWaitMs = 0;
    let waits = 0;
    let bystanderWaits = 0;
    const sampler = (async () => {
      const s = pool(1);
      while (sampling) {
        const rows = await s<{ ms: number; app: string }[]>`select extract(epoch from now() - w.query_start) * 1000 as ms,
            w.application_name as app
          from pg_stat_activity w join pg_stat_activity h on h.pid = any(pg_blocking_pids(w.pid))
          where h.application_name = ${actionApp} and (w.application_name like 'bulk-run-%' or w.application_name = ${bystanderApp})`;
        for (const r of rows) {
          if (r.app === bystanderApp) bystanderWaits++;
          else {
            waits++;
            longestWaitMs = Math.max(longestWaitMs, Number(r.ms));
          }
        }
        await sleep(5);
      }
    })();
    const actionPool = pool(4, actionApp);
    const { action } = await startAction(actionPool, { requestKey: own('k'), action: 'cancel', filter: { tenant } });
    expect(action.matched).toBe(304);
    // A batch busy at its try (a lock a run held past the lock_timeout) is tried again later.
    let calls = 0;
    while (!(await workAction(actionPool, action.id, { lockTimeoutMs: 200, busyRetryMs: 100 })).finished) {
      expect(++calls).toBeLessThan(50);
      await sleep(100);
    }
    sampling = false;
    await sampler;
    open();
    const [{ busy }] = await db.sql<{ busy: number }[]>`select coalesce(sum(tries), 0)::int as busy
      from leasehold_action_batches where action_id = ${action.id}`;
    expect(await getAction(db.sql, action.id)).toMatchObject({ done: 304, skipped: 0 });
    // The runs of matched batches stopped; the bystander's run finished its batch.
    for (const r of await Promise.all(matchedRuns)) expect(r.outcome).not.toBe('succeeded');
    expect((await otherRun).outcome).toBe('succeeded');
    await waitFor('bystander succeeded', async () => (await getBatch(db.sql, other.id)).status === 'succeeded');
    expect(await statuses([...ids, ...matchedRunning])).toEqual({ cancelled: 304 });
    console.log(
      `bulk cancel of 304 batches beside 5 runs: the bystander's waits on it ${bystanderWaits}; matched runs' waits seen ${waits}, longest ${Math.round(longestWaitMs)} ms; busy tries ${busy}`,
    );
    // The bystander never waits on the action; a run of a matched batch at most as long as one
    // batch's cancel holds its locks (its beat waits for its own run row's delete).
    expect(bystanderWaits).toBe(0);
    expect(longestWaitMs).toBeLessThan(1_000);
  }, 180_000);
});
