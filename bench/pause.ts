// Pause and resume benchmark (part of `npm run bench`; `BENCH_ONLY=pause` runs only this;
// docs/design.md, "Pause, deadline and startBy"; issue 39's goal: a pause takes effect within one beat at
// maxConcurrency 8, runs 0 within 5 s; a resume is back at 8 runs within one scheduler tick; no
// attempt used by either). One batch of 20 ms items, maxConcurrency 8, worked by 8 runners (a
// connection pool each, as processes are) of one run each that watch for work every
// `BENCH_PAUSE_TICK_MS` (default 1,000 ms: the scheduler's tick as a local deployment has it,
// the interval at which workers are sent). Beat 1,000 ms. The batch's live runs (its run rows)
// are counted every 20 ms from the pause until 0, and from the resume until 8; at the end, the
// attempts used beyond one per item. A fresh schema of its own.
import { Runner, createBatch, getBatch, pauseBatch, resumeBatch, type Executor } from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const RUNS = 8;
const ITEMS = Number(process.env.BENCH_PAUSE_ITEMS ?? 20_000);
const ITEM_MS = 20;
const BEAT_MS = 1_000;
const TICK_MS = Number(process.env.BENCH_PAUSE_TICK_MS ?? 1_000);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls the batch's live runs every 20 ms until `done(n)`; answers the seconds it took. */
async function until(sql: Sql, batchId: string, done: (runs: number) => boolean, limitMs: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const [r] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_runs where batch_id = ${batchId}`;
    if (done(r.n)) return (performance.now() - t0) / 1_000;
    if (performance.now() - t0 > limitMs) throw new Error(`bench pause: runs at ${r.n} after ${limitMs} ms`);
    await sleep(20);
  }
}

/** `pause: 8 runs to 0 in S s; resume: 0 to 8 in S s; attempts used 0`. */
export async function pauseBench(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_pause', 2);
  const pools: Sql[] = Array.from({ length: RUNS }, () => connect(url, { max: 3, schema }));
  const runners = pools.map((p) => new Runner(p, { maxRuns: 1, parallel: 4, beatMs: BEAT_MS, staleMs: 10_000 }));
  try {
    const { batch } = await createBatch(sql, { ...batchOf(ITEMS), job: 'paused', maxConcurrency: RUNS }, { maxOpen: 10 });
    const executor: Executor = { parallel: 4, work: () => sleep(ITEM_MS).then(() => null) };
    for (const r of runners) r.watch(() => executor, TICK_MS);
    await until(sql, batch.id, (n) => n === RUNS, 30_000);
    await sleep(1_000);
    await pauseBatch(sql, batch.id);
    const paused = await until(sql, batch.id, (n) => n === 0, 30_000);
    // Paused: nothing is claimed for a while (two ticks).
    const [before] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_items
      where batch_id = ${batch.id} and state in ('running', 'done')`;
    await sleep(2 * TICK_MS);
    const [after] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_items
      where batch_id = ${batch.id} and state in ('running', 'done')`;
    await resumeBatch(sql, batch.id);
    const resumed = await until(sql, batch.id, (n) => n === RUNS, 30_000);
    for (;;) {
      if ((await getBatch(sql, batch.id)).status !== 'open') break;
      await sleep(100);
    }
    const [used] = await sql<{ extra: number; done: number }[]>`select
        coalesce(sum(greatest(attempts - 1, 0)), 0)::int as extra, count(*) filter (where state = 'done')::int as done
      from leasehold_items where batch_id = ${batch.id}`;
    console.log(
      `pause: ${RUNS} runs to 0 in ${paused.toFixed(2)} s; resume: 0 to ${RUNS} in ${resumed.toFixed(2)} s; attempts used ${used.extra} ` +
        `(beat ${BEAT_MS} ms, workers watching every ${TICK_MS} ms as a scheduler tick sends them; items started while paused ` +
        `${after.n - before.n}; ${used.done} of ${ITEMS} items done once; goals: 0 within 5 s, 8 within one tick, 0 attempts)`,
    );
  } finally {
    await Promise.all(runners.map((r) => r.close()));
    await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
    await drop();
  }
}
