// Late and repeated worker events (docs/design.md, "Late and repeated worker events"): events
// the scheduler really sent, held back as Lambda's queue would (throttled, or retried) and
// delivered after their confirmation window or twice at once. Each stale worker sends one
// statement (counted by a wire-protocol proxy) and returns; the fleet stays at its desired count.
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { cancelBatch, createBatch, type WorkerEvent } from '../../src/batch/index.js';
import { putTenantUnits, setDesired } from '../../src/lease/index.js';
import { loadConfig, runWorker } from '../../src/runtime/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { silentLog } from '../../src/log.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { inProcessFleet, slowJobs } from '../support/fleet.js';
import { PgProxy } from '../support/pgproxy.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await testDatabase();
});
afterAll(() => db.close());
beforeEach(async () => {
  for (const t of ['leasehold_units', 'leasehold_processes', 'leasehold_invocations', 'leasehold_items', 'leasehold_batches']) {
    await db.sql`delete from ${db.sql(t)}`;
  }
});

const config = () =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_DEADLINE_MARGIN_MS: '500',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_INVOCATION_PENDING_MS: '1000',
  });

/** A pool through a proxy that records the text of every statement sent through it. */
async function counted(): Promise<{ sql: Sql; statements: string[]; close(): Promise<void> }> {
  const proxy = await PgProxy.start(db.url);
  const statements: string[] = [];
  proxy.stallAfterSend((s) => (statements.push(s), false));
  const sql = connect(proxy.url, { schema: db.schema, max: 4 });
  // The pool's own connection setup sends nothing through the matcher but its statements.
  return { sql, statements, close: async () => (await sql.end({ timeout: 1 }), await proxy.close()) };
}

const stale = (sql: Sql, event: WorkerEvent) =>
  runWorker(
    event,
    { getRemainingTimeInMillis: () => 60_000 },
    {
      sql,
      jobs: slowJobs(),
      config: config(),
      dispatcher: { invoke: async () => {} },
      log: silentLog,
    },
  );

it('events delivered after their confirmation window, with desired 3 and 3 live, return at once and live stays 3', async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 6 });
  await setDesired(db.sql, 3);
  // The first 3 invocations are held back (Lambda's queue), answering success.
  const fleet = inProcessFleet(db.sql, config(), { drop: (n) => n <= 3, jobs: slowJobs() });
  try {
    expect((await fleet.tick()).invoked).toBe(3);
    await sleep(1_100);
    // Past the window they count no more: the scheduler invokes 3 others, which come live.
    expect((await fleet.tick()).invoked).toBe(3);
    await waitFor('3 live fleet processes', async () => (await fleet.live()).fleet === 3, { timeoutMs: 10_000 });
    const late = fleet.invocations.filter((i) => i.dropped).map((i) => i.event);
    expect(late).toHaveLength(3);

    const c = await counted();
    try {
      const results = await Promise.all(late.map((e) => stale(c.sql, e)));
      expect(results.map((r) => r.reason)).toEqual(['stale', 'stale', 'stale']);
      // One statement each, and none of them wrote a process row.
      expect(c.statements.filter((s) => /leasehold_invocations/.test(s))).toHaveLength(3);
      expect(c.statements).toHaveLength(3);
    } finally {
      await c.close();
    }
    for (let i = 0; i < 5; i++) {
      expect(await fleet.live()).toMatchObject({ fleet: 3, batch: 0 });
      await sleep(100);
    }
    expect((await fleet.tick()).invoked).toBe(0);
  } finally {
    await fleet.stop();
  }
});

it('the same event delivered twice at once makes one process; the other delivery returns at once', async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 2 });
  await setDesired(db.sql, 1);
  const fleet = inProcessFleet(db.sql, config(), { drop: () => true, jobs: slowJobs() });
  expect((await fleet.tick()).invoked).toBe(1);
  const [{ event }] = fleet.invocations;
  const stop = new AbortController();
  const both = [0, 1].map(() =>
    runWorker(
      event,
      { getRemainingTimeInMillis: () => 60_000 },
      {
        sql: db.sql,
        jobs: slowJobs(),
        config: config(),
        dispatcher: { invoke: async () => {} },
        log: silentLog,
        signal: stop.signal,
      },
    ),
  );
  const first = await Promise.race(both);
  expect(first.reason).toBe('stale');
  await waitFor('the other delivery heartbeats', async () => (await fleet.live()).fleet === 1);
  await sleep(500);
  const [rows] = await db.sql<{ processes: number; invocations: number }[]>`select
      (select count(*)::int from leasehold_processes) as processes, (select count(*)::int from leasehold_invocations) as invocations`;
  // One process row, and its heartbeat confirmed the invocation.
  expect(rows).toEqual({ processes: 1, invocations: 0 });
  stop.abort();
  const results = await Promise.all(both);
  expect(results.map((r) => r.reason).sort()).toEqual(['deadline', 'stale']);
});

it('an event for a batch that finished meanwhile returns at once, with one statement', async () => {
  const { batch } = await createBatch(db.sql, {
    tenant: 't',
    datasource: 'd',
    job: 'slow',
    params: { ms: 1 },
    requestKey: 'late',
    items: [{ key: 'a' }],
  });
  await cancelBatch(db.sql, batch.id);
  const c = await counted();
  try {
    const r = await stale(c.sql, { batchId: batch.id });
    expect(r).toMatchObject({ reason: 'stale', role: 'batch', runs: [] });
    expect(c.statements).toHaveLength(1);
  } finally {
    await c.close();
  }
  const [rows] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_processes`;
  expect(rows.n).toBe(0);
});
