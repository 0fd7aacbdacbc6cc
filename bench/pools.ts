// Concurrency-pool benchmark (part of `npm run bench`; `BENCH_ONLY=pools` runs only this;
// docs/design.md, "Concurrency pools"): a pool of 20 shared by 3 batches of maxConcurrency 8, on
// 8 runners (a connection pool each, as processes are) of 3 runs with `parallel` 4 each, so 24
// runs want 96 items in flight. Each item is a 50 ms call. The items in flight are sampled every
// 50 ms while work is waiting (at least 20 items not started yet): it prints the most seen and
// the mean share of the pool busy. A fresh schema of its own.
import { Runner, createBatch, getBatch, setPool, type Executor } from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const LIMIT = 20;
const BATCHES = 3;
const MAX_CONCURRENCY = 8;
const RUNNERS = 8;
const PARALLEL = 4;
const ITEM_MS = Number(process.env.BENCH_POOL_ITEM_MS ?? 50);
const SECONDS = Number(process.env.BENCH_POOL_SECONDS ?? 10);
const SAMPLE_MS = 50;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** `pool 20 over 3 batches: most in flight N, busy P %`. */
export async function poolsBench(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_pools', 2);
  try {
    await setPool(sql, 'downstream', { total: LIMIT, perKey: null });
    // Enough items to keep the pool full for SECONDS.
    const perBatch = Math.ceil((LIMIT * SECONDS * (1_000 / ITEM_MS)) / BATCHES);
    const total = perBatch * BATCHES;
    const ids: string[] = [];
    for (let b = 0; b < BATCHES; b++) {
      const { batch } = await createBatch(
        sql,
        { ...batchOf(perBatch), job: `pooled-${b}`, maxConcurrency: MAX_CONCURRENCY, pool: 'downstream' },
        { maxOpen: 10 },
      );
      ids.push(batch.id);
    }
    let now = 0;
    let started = 0;
    const executor: Executor = {
      parallel: PARALLEL,
      work: async () => {
        now++;
        started++;
        try {
          await sleep(ITEM_MS);
          return null;
        } finally {
          now--;
        }
      },
    };
    const pools: Sql[] = Array.from({ length: RUNNERS }, () => connect(url, { max: 4, schema }));
    const runners = pools.map((p) => new Runner(p, { maxRuns: 3, parallel: PARALLEL, beatMs: 500, staleMs: 10_000 }));
    const samples: number[] = [];
    let most = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        await sleep(SAMPLE_MS);
        most = Math.max(most, now);
        // Work is waiting: at least a pool's worth of items not started yet.
        if (started > 0 && total - started >= LIMIT) samples.push(now);
      }
    })();
    const t0 = performance.now();
    try {
      for (const r of runners) r.watch(() => executor, 20);
      for (;;) {
        const open = (await Promise.all(ids.map((id) => getBatch(sql, id)))).filter((b) => b.status === 'open');
        if (open.length === 0) break;
        if (performance.now() - t0 > SECONDS * 10_000) throw new Error('bench pools: the batches did not end');
        await sleep(100);
      }
    } finally {
      sampling = false;
      await sampler;
      await Promise.all(runners.map((r) => r.close()));
      await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
    }
    const seconds = (performance.now() - t0) / 1_000;
    const busy = samples.reduce((s, n) => s + n, 0) / (samples.length * LIMIT);
    console.log(
      `pool ${LIMIT} over ${BATCHES} batches: most in flight ${most}, busy ${(busy * 100).toFixed(1)} % ` +
        `(${samples.length} samples of ${SAMPLE_MS} ms while work waited; ${total} items of ${ITEM_MS} ms in ${seconds.toFixed(1)} s, ` +
        `${Math.round(total / seconds)}/s of ${Math.round((LIMIT * 1_000) / ITEM_MS)}/s at most)`,
    );
  } finally {
    await drop();
  }
}
