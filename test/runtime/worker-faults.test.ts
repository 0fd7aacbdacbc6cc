// A worker invocation under store faults injected through a wire-protocol proxy
// (test/support/pgproxy.ts): it still returns before its deadline owning nothing, and a failed
// look for batches to take over does not end the batch it runs.
import { afterEach, describe, expect, it } from 'vitest';
import { createBatch, getBatch } from '../../src/batch/index.js';
import { defaultJobContext, JobRegistry } from '../../src/jobs/index.js';
import { slowJobOf } from '../support/fleet.js';
import { loadConfig, runWorker, type WorkerResult } from '../../src/runtime/index.js';
import { type Dispatcher, type WorkerEvent } from '../../src/batch/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { PgProxy } from '../support/pgproxy.js';
import { sleep } from '../support/time.js';
import { createLog, silentLog } from '../../src/log.js';

const db = useTestDatabase();

// Proxies and the pools through them, closed after each test: the proxy first, so a stalled
// connection does not hold the pool's end.
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

/**
 * A pool through a new proxy. `max` is generous: statements go to idle or unopened connections
 * before postgres.js pipelines them onto a busy one, so with fewer statements in flight than
 * `max − 1`, none ever queues behind a connection the proxy stalled.
 */
async function proxied(max = 10): Promise<{ proxy: PgProxy; sql: Sql }> {
  const proxy = await PgProxy.start(db.url);
  const sql = connect(proxy.url, { schema: db.schema, max, applicationName: 'leasehold-test-proxied' });
  cleanup.push(() => proxy.close());
  cleanup.push(() => Promise.race([sql.end({ timeout: 0 }), sleep(2_000)]));
  return { proxy, sql };
}

/** A dispatcher that records what it was asked to invoke. */
function recording(): Dispatcher & { events: WorkerEvent[] } {
  const events: WorkerEvent[] = [];
  return { events, invoke: async (e) => void events.push(e) };
}

/** Successful executions per key, across every worker of a test. */
let executions = new Map<string, number>();

const slow = slowJobOf({ parallel: 4, onDone: (key) => executions.set(key, (executions.get(key) ?? 0) + 1) });
const jobs = new JobRegistry([slow], defaultJobContext());

const config = (extra: Record<string, string> = {}) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '300',
    LEASEHOLD_REBALANCE_MS: '300',
    LEASEHOLD_WORKER_POLL_MS: '100',
    LEASEHOLD_WORKER_IDLE_MS: '300',
    LEASEHOLD_BEAT_MS: '200',
    LEASEHOLD_STALE_MS: '5000',
    LEASEHOLD_MOVE_BACKOFF_MS: '20',
    ...extra,
  });

/** An invocation context with `ms` left from now. */
const remaining = (ms: number) => {
  const end = Date.now() + ms;
  return { getRemainingTimeInMillis: () => end - Date.now() };
};

/** `p`, or a rejection naming `what` after `ms` (a guard: the worker must return by itself). */
function within<T>(what: string, p: Promise<T>, ms: number): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))),
  ]);
}

const items = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` }));
const MOVE = /update leasehold_items i\s+set state = m\.state/;
const HEARTBEAT = /insert into leasehold_processes/;
const TAKEOVER = /insert into leasehold_runs \(id, batch_id, process\)/;

describe('worker under store faults', () => {
  // The statement whose connection goes silent: the nth of its kind in the worker's process.
  it.each([
    { what: 'a move of its run', pattern: MOVE, nth: 5, name: 'move' },
    { what: 'a look for batches to take over', pattern: TAKEOVER, nth: 3, name: 'takeover' },
    { what: 'a heartbeat of its process', pattern: HEARTBEAT, nth: 3, name: 'heartbeat' },
  ])(
    'a worker whose store connection stalls mid-run ($what) returns before its deadline, owning nothing',
    async ({ pattern, nth, name }) => {
      executions = new Map();
      const { proxy, sql } = await proxied();
      const key = `stall-${name}`;
      const { batch } = await createBatch(db.sql, {
        tenant: 't',
        datasource: key,
        job: 'slow',
        params: { ms: 30 },
        requestKey: key,
        items: items(400),
      });
      // That statement gets no answer, ever: its connection goes silent.
      let seen = 0;
      const stall = proxy.stallAfterSend((s) => pattern.test(s) && ++seen === nth);
      const d = recording();
      const REMAINING = 4_000;
      const cfg = config({ LEASEHOLD_DEADLINE_MARGIN_MS: '1500', LEASEHOLD_STORE_TIMEOUT_MS: '500', LEASEHOLD_MOVE_TRIES: '2' });
      const t0 = Date.now();
      const r: WorkerResult = await within(
        'worker',
        runWorker({ batchId: batch.id }, remaining(REMAINING), { log: silentLog, sql, jobs, config: cfg, dispatcher: d }),
        REMAINING + 5_000,
      );
      const took = Date.now() - t0;

      expect(await stall.fired).toMatch(pattern);
      // It returned at its deadline (remaining − margin), before the platform's.
      expect(r.reason).toBe('deadline');
      expect(took).toBeLessThan(REMAINING);
      // Owning nothing: the run handed off (a continuation asked for), no process row.
      expect(r.runs).toEqual([expect.objectContaining({ batchId: batch.id, outcome: 'handed-off' })]);
      expect(r.continued).toEqual([batch.id]);
      expect(d.events).toContainEqual(expect.objectContaining({ batchId: batch.id }));
      const after = await getBatch(db.sql, batch.id);
      expect(after).toMatchObject({ status: 'open', ownerProcess: null, beatAt: null });
      expect(after.counts.running).toBe(0);
      expect(after.counts.done).toBeGreaterThan(0);
      expect((await db.sql`select count(*) as n from leasehold_processes where id = ${r.processId}`)[0].n).toBe(0);

      // The continuation finishes the batch; what the stalled statement did had committed, and
      // nothing runs twice.
      const rest = await within(
        'continuation',
        runWorker({ batchId: batch.id }, remaining(20_000), {
          log: silentLog,
          sql: db.sql,
          jobs,
          config: config(),
          dispatcher: recording(),
        }),
        20_000,
      );
      expect(rest.runs).toEqual([expect.objectContaining({ batchId: batch.id, outcome: 'succeeded' })]);
      expect((await getBatch(db.sql, batch.id)).counts).toEqual({ pending: 0, running: 0, waiting: 0, done: 400, failed: 0 });
      expect(executions.size).toBe(400);
      expect([...executions.values()].every((n) => n === 1)).toBe(true);
    },
  );

  it('a worker whose look for batches to take over hits a dropped connection keeps running its batch to the end', async () => {
    executions = new Map();
    const { proxy, sql } = await proxied();
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'poll',
      job: 'slow',
      params: { ms: 10 },
      requestKey: 'poll',
      items: items(60),
    });
    // The first takeover statement is the dispatched batch's; the second is the first poll for
    // other batches: it runs, then its connection is cut before the answer arrives.
    let takeovers = 0;
    const drop = proxy.dropAfterCommit((s) => TAKEOVER.test(s) && ++takeovers === 2);
    const logged: string[] = [];
    const r: WorkerResult = await within(
      'worker',
      runWorker({ batchId: batch.id }, remaining(30_000), {
        sql,
        jobs,
        config: config({ LEASEHOLD_DEADLINE_MARGIN_MS: '1500' }),
        dispatcher: recording(),
        log: createLog((_level, message) => void logged.push(message)),
      }),
      20_000,
    );

    expect(await drop.fired).toMatch(TAKEOVER);
    expect(logged).toContain('looking for batches failed');
    // It went on: the batch it was sent finished here, and the worker left idle, not by an error.
    expect(r.reason).toBe('idle');
    expect(r.runs).toEqual([{ batchId: batch.id, outcome: 'succeeded', finishedItems: 60 }]);
    expect(await getBatch(db.sql, batch.id)).toMatchObject({
      status: 'succeeded',
      runs: 1,
      counts: { pending: 0, running: 0, done: 60, failed: 0 },
    });
    expect(executions.size).toBe(60);
    expect([...executions.values()].every((n) => n === 1)).toBe(true);
    expect((await db.sql`select count(*) as n from leasehold_processes where id = ${r.processId}`)[0].n).toBe(0);
  });
});
