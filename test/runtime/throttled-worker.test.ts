// A worker function throttled to zero (issue 38, item 9; docs/deploy.md, "Faults and how
// leasehold answers them"): operators set its reserved concurrency to 0, and Lambda answers every
// async invoke 202 and runs none. The scheduler's real LambdaDispatcher reaches the local invoke
// endpoint (AWS_ENDPOINT_URL_LAMBDA), which does the same at reserved concurrency 0. Within 3
// scheduler runs a warning and the metrics say invocations are not confirmed; meanwhile no item
// spends an attempt and the batch is not given up; once the throttle is lifted the fleet is back
// at its desired count within 2 scheduler runs.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createBatch, type WorkerEvent } from '../../src/batch/index.js';
import { putTenantUnits, setDesired } from '../../src/lease/index.js';
import { createInvokeEndpoint, localLambdaEnv, type InvokeEndpoint } from '../../src/local/index.js';
import {
  LambdaDispatcher,
  loadConfig,
  metricsFor,
  recordUnconfirmed,
  runScheduler,
  runWorker,
  setLogSink,
  type SchedulerResult,
} from '../../src/runtime/index.js';
import { createLog, silentLog } from '../../src/log.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { slowJobs } from '../support/fleet.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();
const PERIOD_MS = 1_200;
const stop = new AbortController();
let endpoint: InvokeEndpoint;
const saved: Record<string, string | undefined> = {};
const config = () =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_DEADLINE_MARGIN_MS: '500',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_INVOCATION_PENDING_MS: '1000',
    LEASEHOLD_DISPATCH_COOLDOWN_MS: '1000',
  });

beforeAll(async () => {
  endpoint = createInvokeEndpoint({
    functions: {
      worker: (event: WorkerEvent, context: { getRemainingTimeInMillis(): number }) =>
        runWorker(event, context, {
          sql: db.sql,
          jobs: slowJobs(),
          config: config(),
          dispatcher: { invoke: async () => {} },
          log: silentLog,
          signal: stop.signal,
        }),
    },
    timeoutMs: 120_000,
    concurrency: 16,
    reservedConcurrency: { worker: 0 },
  });
  const { url } = await endpoint.start();
  for (const [k, v] of Object.entries(localLambdaEnv(url))) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
});
afterAll(async () => {
  stop.abort();
  await endpoint?.stop();
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

it('a worker throttled to zero: warned within 3 runs, no attempt spent, no batch given up; back within 2 runs once lifted', async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 4 });
  await setDesired(db.sql, 2);
  const { batch } = await createBatch(db.sql, {
    tenant: 't',
    datasource: 'd',
    job: 'slow',
    params: { ms: 20 },
    requestKey: 'throttled',
    items: Array.from({ length: 50 }, (_, i) => ({ key: `k${i}` })),
  });
  const warnings: string[] = [];
  const log = createLog((level, message) => {
    if (level === 'warn') warnings.push(message);
  });
  const dispatcher = new LambdaDispatcher('worker');
  const run = () => runScheduler({ sql: db.sql, config: config(), dispatcher, jobs: slowJobs(), log });

  const throttled: SchedulerResult[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await sleep(PERIOD_MS);
    throttled.push(await run());
  }
  // The server's own evidence of the fault: invokes answered and dropped, no process ever wrote a row.
  expect(endpoint.dropped).toBeGreaterThan(0);
  expect(endpoint.completed + endpoint.running()).toBe(0);
  const [rows] = await db.sql<{ processes: number; attempts: number; status: string; stalled: number }[]>`select
      (select count(*)::int from leasehold_processes) as processes,
      (select coalesce(sum(attempts), 0)::int from leasehold_items where batch_id = ${batch.id}) as attempts,
      status, stalled_runs as stalled from leasehold_batches where id = ${batch.id}`;
  expect(rows).toEqual({ processes: 0, attempts: 0, status: 'open', stalled: 0 });
  const unconfirmed = throttled.map((r) => r.unconfirmed.invocations);
  expect(unconfirmed.some((n) => n > 0)).toBe(true);
  expect(throttled.at(-1)!.unconfirmed.unstarted).toBeGreaterThan(0);
  expect(warnings.filter((w) => w.startsWith('invocations not confirmed')).length).toBeGreaterThan(0);
  const lines: string[] = [];
  setLogSink((line) => lines.push(line));
  try {
    const m = metricsFor('throttled-test');
    recordUnconfirmed(m, throttled.at(-1)!);
    m.flush();
  } finally {
    setLogSink(undefined);
  }
  const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => '_aws' in l);
  expect(emf).toMatchObject({ InvocationsUnconfirmed: throttled.at(-1)!.unconfirmed.invocations });
  expect(emf!.InvocationsUnstarted).toBeGreaterThan(0);

  // The throttle lifted: the next run invokes, the one after sees the desired count met.
  endpoint.setReservedConcurrency('worker', undefined);
  await sleep(PERIOD_MS);
  const lifted = [await run()];
  await sleep(PERIOD_MS);
  lifted.push(await run());
  console.log(
    `throttled to zero: unconfirmed per run ${unconfirmed.join(', ')} (${endpoint.dropped} invokes dropped); ` +
      `after the lift, live/desired per run: ${lifted.map((r) => `${r.fleet.live}/${r.fleet.desired}`).join(', ')}`,
  );
  expect(lifted[1].fleet.live).toBe(2);
});
