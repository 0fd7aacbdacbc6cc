// `BENCH_ONLY=usage`: usage per batch against the workers' own measured invocation times (issue
// 39, item 6; docs/design.md, "Usage and cost"). Three batches of BENCH_USAGE_ITEMS items (each
// waits 2 ms) are started, and four worker invocations (runWorker, as Lambda runs it, with a
// context of 1,769 MB) are sent at once: one per batch (`{ batchId }`) and one fleet worker
// that joins the batches as they fan out. Each invocation's time is measured around
// runWorker (this process's clock); the recorded figure is the sum of the batches' `workerMs`.
// Their difference is what an invocation does before its runner starts (its idle time after
// that is charged to its runs: docs/design.md, "Usage and cost"). Prints
// `usage: worker ms recorded R vs measured M (P %), GB-s G, invocations I, est. cost $C`.
import { randomUUID } from 'node:crypto';
import { createBatch, getBatchUsage, pricesFor, type Dispatcher } from '../src/batch/index.js';
import { silentLog } from '../src/log.js';
import { loadConfig, runWorker } from '../src/runtime/index.js';
import { slowJobs } from '../test/support/fleet.js';
import { benchSchema } from './schema.js';

const ITEMS = Number(process.env.BENCH_USAGE_ITEMS ?? 3_000);

export async function usageBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_usage', 16);
  try {
    const config = loadConfig({
      DATABASE_URL: url,
      LEASEHOLD_WORKER_IDLE_MS: '100',
      LEASEHOLD_WORKER_POLL_MS: '50',
      LEASEHOLD_BEAT_MS: '1000',
      LEASEHOLD_PARALLEL: '8',
    });
    const jobs = slowJobs();
    const dispatcher: Dispatcher = { invoke: async () => {} };
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const items = Array.from({ length: ITEMS }, (_, k) => ({ key: `k${k}`, input: null }));
      const { batch } = await createBatch(
        sql,
        {
          tenant: `usage-${i}`,
          datasource: 'd',
          job: 'slow',
          params: { ms: 2 },
          requestKey: randomUUID(),
          items,
          maxConcurrency: 2,
        },
        { maxOpen: 10 },
      );
      ids.push(batch.id);
    }
    const context = { getRemainingTimeInMillis: () => 600_000, memoryLimitInMB: '1769' };
    const invoke = async (event: { batchId?: string }) => {
      const t0 = performance.now();
      await runWorker(event, context, { log: silentLog, sql, jobs, config, dispatcher });
      return performance.now() - t0;
    };
    const times = await Promise.all([...ids.map((batchId) => invoke({ batchId })), invoke({})]);
    const measured = times.reduce((a, b) => a + b, 0);
    const prices = pricesFor(process.env.AWS_REGION);
    const usages = await Promise.all(ids.map((id) => getBatchUsage(sql, id, prices)));
    const recorded = usages.reduce((a, u) => a + u.workerMs, 0);
    const gbs = usages.reduce((a, u) => a + u.gbSeconds, 0);
    const invocations = usages.reduce((a, u) => a + u.invocations, 0);
    const cost = usages.reduce((a, u) => a + u.estimatedCost.total, 0);
    const items = usages.reduce((a, u) => a + u.items, 0);
    const off = ((recorded - measured) / measured) * 100;
    console.log(
      `usage: worker ms recorded ${recorded.toFixed(0)} vs measured ${measured.toFixed(0)} (${off >= 0 ? '+' : ''}${off.toFixed(1)} %), ` +
        `GB-s ${gbs.toFixed(2)}, ${items} item attempts, invocations ${invocations} (summed per batch), ` +
        `est. cost $${cost.toFixed(6)} (${prices.region})`,
    );
  } finally {
    await drop();
  }
}
