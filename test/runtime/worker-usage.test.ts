// A worker invocation counts its runs' usage at its Lambda context's memory size, else at
// LEASEHOLD_WORKER_MEMORY_MB (docs/design.md, "Usage and cost"; issue 39 item 6).
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createBatch, getBatchUsage, type Dispatcher } from '../../src/batch/index.js';
import { silentLog } from '../../src/log.js';
import { loadConfig, runWorker } from '../../src/runtime/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { slowJobs } from '../support/fleet.js';

const db = useTestDatabase();
const dispatcher: Dispatcher = { invoke: async () => {} };

async function workedAt(memoryLimitInMB: string | undefined) {
  const config = loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_WORKER_IDLE_MS: '50',
    LEASEHOLD_WORKER_POLL_MS: '20',
    LEASEHOLD_WORKER_MEMORY_MB: '640',
  });
  const items = Array.from({ length: 20 }, (_, k) => ({ key: `k${k}`, input: null }));
  const tenant = `wu-${randomUUID().slice(0, 8)}`;
  const { batch } = await createBatch(
    db.sql,
    { tenant, datasource: 'd', job: 'slow', params: { ms: 5 }, requestKey: randomUUID(), items },
    { maxOpen: 10 },
  );
  const context = { getRemainingTimeInMillis: () => 120_000, ...(memoryLimitInMB ? { memoryLimitInMB } : {}) };
  const t0 = performance.now();
  const r = await runWorker({ batchId: batch.id }, context, {
    log: silentLog,
    sql: db.sql,
    jobs: slowJobs(),
    config,
    dispatcher,
  });
  const measured = performance.now() - t0;
  expect(r.runs.map((x) => x.outcome)).toEqual(['succeeded']);
  const [row] = await db.sql<{ memory_mb: number; process: string }[]>`
    select memory_mb, process from leasehold_run_usage where batch_id = ${batch.id}`;
  expect(row!.process).toBe(r.processId);
  return { memoryMb: row!.memory_mb, usage: await getBatchUsage(db.sql, batch.id), measured };
}

describe("a worker's usage", () => {
  it("is counted at its Lambda context's memory size, else at LEASEHOLD_WORKER_MEMORY_MB", async () => {
    const lambda = await workedAt('1769');
    expect(lambda.memoryMb).toBe(1769);
    expect(lambda.usage).toMatchObject({ runs: 1, invocations: 1, items: 20 });
    expect(lambda.usage.gbSeconds).toBeCloseTo((lambda.usage.workerMs * 1769) / 1024 / 1000, 2);
    // The run is within the invocation: never more than its measured time.
    expect(lambda.usage.workerMs).toBeLessThanOrEqual(lambda.measured);
    const local = await workedAt(undefined);
    expect(local.memoryMb).toBe(640);
  }, 60_000);
});
