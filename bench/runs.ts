// Run benchmarks (part of `npm run bench`, in its batch part): how fast one run moves items.
//   1. one run, parallel 64, over ITEMS no-op items: items/s from takeover to finish, and the
//      statements the run sent per item, counted through postgres.js's `debug` hook on the run's
//      own pool (every statement it sends, beats and retries included);
//   2. four runs at once, each with its own pool and batch;
//   3. one run, parallel 4, over SHORT_ITEMS items that each sleep 2 ms, next to the same sleeps
//      in a plain pool of 4 with no database, measured in the same round;
//   4. one run, parallel 64, over ITEMS no-op items of which every tenth fails, tolerating 20 %:
//      what the tolerance check after each flush carrying a failure costs (items/s, statements).
// Each figure is the median of ROUNDS rounds, with the best. Every round starts from the same
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
): Promise<{ rate: number; statements: number }> {
  const pool = connect(url, { max: 4, schema });
  let statements = 0;
  // postgres.js reads `debug` for every statement it sends on this pool.
  (pool.options as { debug?: unknown }).debug = () => void statements++;
  try {
    const { batch } = await createBatch(pool, { ...batchOf(n), toleratedFailures });
    statements = 0;
    const runner = new Runner(pool, { parallel: executor.parallel });
    const t1 = performance.now();
    await runner.takeOver(() => executor, batch.id);
    const result = await runner.running(batch.id)!;
    const t2 = performance.now();
    if (result.outcome !== 'succeeded' || result.finishedItems !== n) throw new Error(`bench run ended ${result.outcome}`);
    // Counted from the takeover on: the runner's takeover statement, then the run's.
    return { rate: n / ((t2 - t1) / 1000), statements };
  } finally {
    await pool.end();
  }
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

/** Delete the bench's batches (their items cascade) and vacuum, so the next round starts clean. */
async function clean(sql: Sql): Promise<void> {
  await sql`delete from leasehold_batches where tenant = 'bench'`;
  await sql`vacuum leasehold_items`;
  await sql`vacuum leasehold_batches`;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n: number) => Math.round(n).toString();

/** Print the run figures; the schema must be migrated. */
export async function runBench(url: string, schema: string, sql: Sql): Promise<void> {
  const [{ version }] = await sql<{ version: string }[]>`select current_setting('server_version') as version`;
  console.log(`PostgreSQL ${version}; ${ITEMS} no-op items per batch; ${ROUNDS} rounds; median (best)`);
  const one: number[] = [];
  const perItem: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await clean(sql);
    const r = await runOnce(url, schema, ITEMS, noop);
    one.push(r.rate);
    perItem.push(r.statements / ITEMS);
  }
  console.log(`one run, parallel 64: ${fmt(median(one))} items/s (best ${fmt(Math.max(...one))} items/s)`);
  console.log(`statements per item, one no-op run: ${median(perItem).toFixed(3)} (statements the run's pool sent / items)`);
  const four: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await clean(sql);
    four.push(await fourRuns(url, schema));
  }
  console.log(`4 concurrent runs, parallel 64 each: ${fmt(median(four))} items/s (best ${fmt(Math.max(...four))} items/s)`);
  const runs: number[] = [];
  const ratios: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await clean(sql);
    const plain = await plainPool();
    const run = (await runOnce(url, schema, SHORT_ITEMS, short)).rate;
    runs.push(run);
    ratios.push((100 * run) / plain);
  }
  console.log(
    `one run, parallel 4, 2 ms items: ${fmt(median(runs))} items/s (${median(ratios).toFixed(0)} % of no database; best ${fmt(Math.max(...runs))} items/s)`,
  );
  const tolerant: number[] = [];
  const tolerantPerItem: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await clean(sql);
    const r = await runOnce(url, schema, ITEMS, tenthFails, { percent: 20 });
    tolerant.push(r.rate);
    tolerantPerItem.push(r.statements / ITEMS);
  }
  console.log(
    `one run, parallel 64, every tenth item failing, tolerating 20 %: ${fmt(median(tolerant))} items/s (best ${fmt(Math.max(...tolerant))} items/s), ${median(tolerantPerItem).toFixed(3)} statements per item`,
  );
}
