// Late and repeated worker events (docs/design.md, "Late and repeated worker events"): events
// the scheduler really sent, held back as Lambda's queue would (throttled, or retried) and
// delivered after their confirmation window or twice at once — a fleet event, a batch's event
// (each delivery with a pool of its own), and an invoke that the runtime's LambdaDispatcher sent
// twice through the SDK's own retry because the answer to the first was lost. Each stale worker
// sends one statement (counted by a wire-protocol proxy) and returns; the fleet stays at its
// desired count, and a batch never gets two runs from one invocation.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeEach, expect, it } from 'vitest';
import { cancelBatch, createBatch, type WorkerEvent } from '../../src/batch/index.js';
import { putTenantUnits, reserveInvocations, setDesired } from '../../src/lease/index.js';
import { createInvokeEndpoint } from '../../src/local/index.js';
import { LambdaDispatcher, loadConfig, runScheduler, runWorker, type WorkerResult } from '../../src/runtime/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { silentLog } from '../../src/log.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { inProcessFleet, slowJobs } from '../support/fleet.js';
import { PgProxy } from '../support/pgproxy.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();
beforeEach(async () => {
  for (const t of ['leasehold_units', 'leasehold_processes', 'leasehold_invocations', 'leasehold_items', 'leasehold_batches']) {
    await db.sql`delete from ${db.sql(t)}`;
  }
});

const config = (env: Record<string, string> = {}) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_DEADLINE_MARGIN_MS: '500',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_INVOCATION_PENDING_MS: '1000',
    ...env,
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
    const lives: number[] = [];
    for (let i = 0; i < 5; i++) {
      const live = await fleet.live();
      expect(live).toMatchObject({ fleet: 3, batch: 0 });
      lives.push(live.fleet);
      await sleep(100);
    }
    expect((await fleet.tick()).invoked).toBe(0);
    console.log(
      `late events: 3 delivered past their window with desired 3 and 3 live: all stale, ${c.statements.length} statements ` +
        `in all, live ${lives.join(', ')} over 0.5 s, the next scheduler run invoked 0`,
    );
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

it('an event for a batch delivered twice at once, 5 times: one process, one run of the batch; the other delivery returns at once', async () => {
  const maxima: number[] = [];
  for (let round = 0; round < 5; round++) {
    // 800 items and maxConcurrency 4: the batch wants 4 runs, so a second delivery that got
    // through would join it as a second run.
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'd',
      job: 'slow',
      params: { ms: 50 },
      requestKey: `twice-${round}`,
      maxConcurrency: 4,
      items: Array.from({ length: 800 }, (_, i) => ({ key: `k${i}` })),
    });
    // The start's reservation: the event names its invocation.
    const [event] = await reserveInvocations(db.sql, { batchIds: [batch.id], maxWorkers: 10, pendingMs: 30_000 });
    expect(event).toMatchObject({ batchId: batch.id });
    // Each delivery has a pool of its own (as two containers would): their first statements
    // race on two connections.
    const pools = [0, 1].map(() => db.connect({ max: 4 }));
    const stop = new AbortController();
    const seen = { runs: 0, processes: 0 };
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const [r] = await db.sql<{ runs: number; processes: number }[]>`select count(*)::int as runs,
            count(distinct process)::int as processes from leasehold_runs where batch_id = ${batch.id}`;
        seen.runs = Math.max(seen.runs, r.runs);
        seen.processes = Math.max(seen.processes, r.processes);
        await sleep(5);
      }
    })();
    try {
      const both = pools.map((sql) =>
        runWorker(
          event,
          { getRemainingTimeInMillis: () => 60_000 },
          {
            sql,
            jobs: slowJobs(),
            config: config(),
            dispatcher: { invoke: async () => {} },
            log: silentLog,
            signal: stop.signal,
          },
        ),
      );
      const first = await Promise.race(both);
      expect(first.reason, `round ${round}`).toBe('stale');
      await waitFor('the batch run by the other delivery', async () => {
        const [r] = await db.sql<{ done: number }[]>`select count(*)::int as done from leasehold_items
          where batch_id = ${batch.id} and state = 'done'`;
        return r.done >= 20;
      });
      const [rows] = await db.sql<{ processes: number; runs: number }[]>`select
          (select count(*)::int from leasehold_processes) as processes,
          (select count(*)::int from leasehold_runs where batch_id = ${batch.id}) as runs`;
      expect(rows, `round ${round}`).toEqual({ processes: 1, runs: 1 });
      stop.abort();
      const results = await Promise.all(both);
      expect(results.map((r) => r.reason).sort()).toEqual(['deadline', 'stale']);
      expect(results.find((r) => r.reason === 'stale')).toMatchObject({ runs: [] });
      expect(results.find((r) => r.reason === 'deadline')?.runs).toMatchObject([{ batchId: batch.id, outcome: 'handed-off' }]);
    } finally {
      stop.abort();
      sampling = false;
      await sampler;
      await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
    }
    // Never two runs of the batch at once, nor two processes on it.
    expect(seen, `round ${round}`).toEqual({ runs: 1, processes: 1 });
    maxima.push(seen.runs);
    await cancelBatch(db.sql, batch.id);
    await db.sql`delete from leasehold_processes`;
    await db.sql`delete from leasehold_invocations`;
  }
  console.log(
    `repeated batch event: 5 rounds of 2 deliveries at once; most runs of the batch at once per round: ${maxima.join(', ')}`,
  );
});

it("the dispatcher's SDK retry of an invoke whose answer was lost delivers the event twice: one process, the retry's delivery returns at once", async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 2 });
  await setDesired(db.sql, 1);
  // A confirmation window of 30 s (the default): the SDK client is loaded on the first invoke,
  // after the scheduler recorded the invocation, which takes a while in a test process.
  const cfg = config({ LEASEHOLD_INVOCATION_PENDING_MS: '30000' });
  const stop = new AbortController();
  const results: WorkerResult[] = [];
  const delivered: unknown[] = [];
  const endpoint = createInvokeEndpoint({
    functions: {
      worker: async (event: WorkerEvent, context: { getRemainingTimeInMillis(): number }) => {
        delivered.push(event);
        // Lambda's queue holds both (throttled at the worker limit) and runs them at once.
        await waitFor('both deliveries queued', () => delivered.length === 2);
        const r = await runWorker(event, context, {
          sql: db.sql,
          jobs: slowJobs(),
          config: cfg,
          dispatcher: { invoke: async () => {} },
          log: silentLog,
          signal: stop.signal,
        });
        results.push(r);
      },
    },
    timeoutMs: 60_000,
  });
  const { url } = await endpoint.start();
  // Between the SDK and the invoke endpoint: the first invoke reaches Lambda (the endpoint
  // queues the event and answers 202), but its answer is lost (the connection is reset), so
  // the SDK's standard retry sends it again.
  const bodies: string[] = [];
  /** What the endpoint answered each request (the first answer never reached the SDK). */
  const statuses: number[] = [];
  const forward = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    bodies.push(body.toString());
    const headers = Object.fromEntries(
      Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'connection' && k !== 'content-length'),
    ) as Record<string, string>;
    const answer = await fetch(`${url}${req.url}`, { method: req.method, headers, body });
    const text = await answer.text();
    statuses.push(answer.status);
    if (statuses.length === 1) req.socket.destroy();
    else res.writeHead(answer.status, Object.fromEntries(answer.headers)).end(text);
  };
  const front = createServer((req, res) => void forward(req, res).catch(() => res.destroy()));
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  const env = {
    AWS_ENDPOINT_URL_LAMBDA: `http://127.0.0.1:${(front.address() as AddressInfo).port}`,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
  };
  const before = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    // The scheduler with the runtime's own dispatcher and its default client (maxAttempts 3).
    const dispatcher = new LambdaDispatcher('worker');
    const tick = await runScheduler({ sql: db.sql, config: cfg, dispatcher });
    expect(tick.invoked).toBe(1);
    expect(bodies).toHaveLength(2);
    expect(statuses).toEqual([202, 202]);
    expect(bodies[1]).toBe(bodies[0]);
    const event = JSON.parse(bodies[0]) as WorkerEvent;
    expect(event.invocationId).toBeDefined();
    await waitFor('both deliveries ran, one returned', () => delivered.length === 2 && results.length >= 1);
    expect(delivered).toEqual([event, event]);
    expect(results[0].reason).toBe('stale');
    await waitFor('one fleet process live', async () => (await liveCounts()).fleet === 1);
    await sleep(500);
    const [rows] = await db.sql<{ processes: number; invocations: number }[]>`select
        (select count(*)::int from leasehold_processes) as processes, (select count(*)::int from leasehold_invocations) as invocations`;
    expect(rows).toEqual({ processes: 1, invocations: 0 });
    // The next scheduler run sees the desired count met.
    expect((await runScheduler({ sql: db.sql, config: cfg, dispatcher })).invoked).toBe(0);
    console.log(
      `SDK retry: ${bodies.length} invoke requests of one event, ${delivered.length} deliveries run at once, ` +
        `first to return: ${results[0].reason}; process rows ${rows.processes}, invocations left ${rows.invocations}`,
    );
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    stop.abort();
    await endpoint.stop();
    await new Promise((resolve) => front.close(resolve));
  }
  expect(results.map((r) => r.reason).sort()).toEqual(['deadline', 'stale']);
});

async function liveCounts(): Promise<{ fleet: number }> {
  const [r] = await db.sql<{ fleet: number }[]>`select count(*)::int as fleet from leasehold_processes
    where expires_at > now() and role = 'fleet'`;
  return r;
}
