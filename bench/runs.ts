// Run benchmarks (part of `npm run bench`, in its batch part): how fast one run moves items.
//   1. one run, parallel 64, over ITEMS no-op items: items/s from takeover to finish, and the
//      statements the run sent per item, counted through postgres.js's `debug` hook on the run's
//      own pool (every statement it sends, beats and retries included);
//   2. four runs at once, each with its own pool and batch;
//   3. one run, parallel 4, over SHORT_ITEMS items that each sleep 2 ms, next to the same sleeps
//      in a plain pool of 4 with no database, measured in the same round;
//   4. one run, parallel 64, over ITEMS no-op items of which every tenth fails, tolerating 20 %:
//      what the tolerance check after each flush carrying a failure costs (items/s, statements).
// Figures 1–3 are measured on a fresh and on a lived-in schema (bench/sides.ts), the two in turn
// in every round; 4 on the fresh one only. Each figure is the median of ROUNDS rounds. Every round
// starts from the same
// table state: the batches of earlier rounds are deleted and the tables vacuumed first (otherwise
// each round pays for the dead rows of all the rounds before it, and later figures sink).
import { randomUUID } from 'node:crypto';
import {
  PermanentItemError,
  Runner,
  createBatch,
  type Executor,
  type NewBatch,
  type ToleratedFailures,
} from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { cpuMark, cpuSpent, inTurn, median, perSide, rateLine, type CpuSpent, type Side } from './sides.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const SHORT_ITEMS = Number(process.env.BENCH_SHORT_ITEMS ?? 2_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** A batch of `n` no-op items with fresh datasource and request key. */
export function batchOf(n: number): NewBatch {
  return {
    tenant: 'bench',
    datasource: randomUUID(),
    job: 'noop',
    params: {},
    requestKey: randomUUID(),
    items: Array.from({ length: n }, (_, i) => ({ key: String(i).padStart(6, '0') })),
  };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const noop: Executor = { work: async () => null, parallel: 64 };
const short: Executor = { work: () => sleep(2).then(() => null), parallel: 4 };
const tenthFails: Executor = {
  parallel: 64,
  attempts: 1,
  work: async ({ key }) => {
    if (Number(key) % 10 === 0) throw new PermanentItemError('bench failure');
    return null;
  },
};

/** Run one batch of `n` items on its own runner and pool; items/s from takeover to finish. */
async function runOnce(
  url: string,
  schema: string,
  n: number,
  executor: Executor,
  toleratedFailures?: ToleratedFailures,
  queueDepth?: number,
): Promise<{ rate: number; statements: number; cpu: CpuSpent | null }> {
  const pool = connect(url, { max: 4, schema });
  let statements = 0;
  // postgres.js reads `debug` for every statement it sends on this pool.
  (pool.options as { debug?: unknown }).debug = () => void statements++;
  try {
    const { batch } = await createBatch(pool, { ...batchOf(n), toleratedFailures });
    statements = 0;
    const runner = new Runner(pool, { parallel: executor.parallel, queueDepth });
    const m1 = cpuMark();
    const t1 = performance.now();
    await runner.takeOver(() => executor, batch.id);
    const result = await runner.running(batch.id)!;
    const t2 = performance.now();
    const m2 = cpuMark();
    if (result.outcome !== 'succeeded' || result.finishedItems !== n) throw new Error(`bench run ended ${result.outcome}`);
    // Counted from the takeover on: the runner's takeover statement, then the run's.
    return { rate: n / ((t2 - t1) / 1000), statements, cpu: cpuSpent(m1, m2, n) };
  } finally {
    await pool.end();
  }
}

/**
 * One run, parallel 64, over ITEMS no-op items on `side` (its bench batches deleted first):
 * items/s. `queueDepth`: items claimed ahead beyond `parallel` (default: the runner's, 64).
 */
export async function oneRunRate(url: string, side: Side, queueDepth?: number): Promise<number> {
  return (await oneRunMeasured(url, side, queueDepth)).rate;
}

/** {@link oneRunRate}, with the CPU the machine and this process spent on it (null off Linux). */
export async function oneRunMeasured(
  url: string,
  side: Side,
  queueDepth?: number,
): Promise<{ rate: number; cpu: CpuSpent | null }> {
  await clean(side.sql);
  const { rate, cpu } = await runOnce(url, side.schema, ITEMS, noop, undefined, queueDepth);
  await clean(side.sql);
  return { rate, cpu };
}

/** Four runners, each with its own pool, each running its own batch of ITEMS items at once. */
async function fourRuns(url: string, schema: string): Promise<number> {
  const pools = Array.from({ length: 4 }, () => connect(url, { max: 4, schema }));
  try {
    const batches = await Promise.all(pools.map((p) => createBatch(p, batchOf(ITEMS)).then((r) => r.batch.id)));
    const runners = pools.map((p) => new Runner(p, { parallel: 64 }));
    const t1 = performance.now();
    await Promise.all(runners.map((r, i) => r.takeOver(() => noop, batches[i])));
    const results = await Promise.all(runners.map((r, i) => r.running(batches[i])!));
    const t2 = performance.now();
    for (const r of results) if (r.outcome !== 'succeeded') throw new Error(`bench run ended ${r.outcome}`);
    return (4 * ITEMS) / ((t2 - t1) / 1000);
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}

/** SHORT_ITEMS sleeps of 2 ms in a plain pool of 4, no database: items/s. */
async function plainPool(): Promise<number> {
  let next = 0;
  const t1 = performance.now();
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (next < SHORT_ITEMS) {
        next++;
        await sleep(2);
      }
    }),
  );
  return SHORT_ITEMS / ((performance.now() - t1) / 1000);
}

/** Delete the bench's batches (their items cascade; history is another tenant's) and vacuum, so the next round starts clean. */
export async function clean(sql: Sql): Promise<void> {
  await sql`delete from leasehold_batches where tenant = 'bench'`;
  await sql`vacuum leasehold_items`;
  await sql`vacuum leasehold_batches`;
}

const fmt = (n: number) => Math.round(n).toString();

/**
 * Print the run figures: the headline ones (one run, 4 concurrent runs, 2 ms items) on both
 * sides, alternating round by round; the tolerant run on the fresh schema only. Both schemas must
 * be migrated.
 */
export async function runBench(url: string, sides: readonly [Side, Side]): Promise<void> {
  const [fresh] = sides;
  const [{ version }] = await fresh.sql<{ version: string }[]>`select current_setting('server_version') as version`;
  console.log(`PostgreSQL ${version}; ${ITEMS} no-op items per batch; ${ROUNDS} rounds; medians`);
  const one = perSide();
  const perItem = perSide();
  for (let i = 0; i < ROUNDS; i++) {
    for (const side of inTurn(i, sides)) {
      await clean(side.sql);
      const r = await runOnce(url, side.schema, ITEMS, noop);
      one[side.name].push(r.rate);
      perItem[side.name].push(r.statements / ITEMS);
    }
  }
  console.log(rateLine('one run, parallel 64', one, 'items/s'));
  console.log(
    `statements per item, one no-op run: fresh ${median(perItem.fresh).toFixed(3)}; lived-in ${median(perItem['lived-in']).toFixed(3)} (statements the run's pool sent / items)`,
  );
  const four = perSide();
  for (let i = 0; i < ROUNDS; i++) {
    for (const side of inTurn(i, sides)) {
      await clean(side.sql);
      four[side.name].push(await fourRuns(url, side.schema));
    }
  }
  console.log(rateLine('4 concurrent runs, parallel 64 each', four, 'items/s'));
  const runs = perSide();
  const ratios = perSide();
  for (let i = 0; i < ROUNDS; i++) {
    for (const side of inTurn(i, sides)) {
      await clean(side.sql);
      const plain = await plainPool();
      const run = (await runOnce(url, side.schema, SHORT_ITEMS, short)).rate;
      runs[side.name].push(run);
      ratios[side.name].push((100 * run) / plain);
    }
  }
  console.log(
    rateLine(
      'one run, parallel 4, 2 ms items',
      runs,
      'items/s',
      `; of no database: fresh ${median(ratios.fresh).toFixed(0)} %, lived-in ${median(ratios['lived-in']).toFixed(0)} %`,
    ),
  );
  const tolerant: number[] = [];
  const tolerantPerItem: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await clean(fresh.sql);
    const r = await runOnce(url, fresh.schema, ITEMS, tenthFails, { percent: 20 });
    tolerant.push(r.rate);
    tolerantPerItem.push(r.statements / ITEMS);
  }
  console.log(
    `one run, parallel 64, every tenth item failing, tolerating 20 % (fresh schema only): ${fmt(median(tolerant))} items/s (best ${fmt(Math.max(...tolerant))} items/s), ${median(tolerantPerItem).toFixed(3)} statements per item`,
  );
  for (const side of sides) await clean(side.sql);
}
