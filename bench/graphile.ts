// graphile-worker side by side (part of `npm run bench`; `BENCH_ONLY=graphile` runs only this):
// the goal is that leasehold's one run (parallel 64) stays at least 1.5× graphile-worker's batched
// mode on the lived-in database. graphile-worker runs in schemas of its own (its `schema`
// option), with its batched mode as its performance page configures it (a local queue of 500,
// completions and failures batched with a delay of 0 ms), over ITEMS no-op jobs added in bulk
// (`addJobs`) before its runner starts; the figure is jobs/s from the start of the runner until
// its jobs table is empty (every completion written), as leasehold's is from takeover until the
// batch finished. Figures:
//   1. one runner of concurrency 64 (leasehold's one run, parallel 64);
//   2. 4 runners of concurrency 32 with a local queue of 500 each, over 4 × ITEMS jobs (issue 17);
// each on a fresh graphile-worker schema and on a lived-in one, whose tables have the history of
// BENCH_HISTORY_JOBS jobs (default 5,000,000) added, locked and deleted in pieces as running
// them would, vacuumed as autovacuum would between pieces, then analyzed. Leasehold's one run on
// the lived-in leasehold schema is measured in the same rounds, so the ratio shares their drift.
import { readFileSync } from 'node:fs';
import { Logger, makeWorkerUtils, run, type Runner as GraphileRunner } from 'graphile-worker';
import { connect, type Sql } from '../src/store/index.js';
import { oneRunMeasured, oneRunRate } from './runs.js';
import {
  cpuLine,
  cpuMark,
  cpuSpent,
  inTurn,
  median,
  perSide,
  rateLine,
  type CpuSpent,
  type Side,
  type SideName,
} from './sides.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const HISTORY_JOBS = Number(process.env.BENCH_HISTORY_JOBS ?? 5_000_000);
/** Jobs per history piece: inserted, locked and deleted together. */
const PIECE = 250_000;
/** Pieces between two vacuums of the jobs table during the history load (autovacuum's part). */
const VACUUM_EVERY = 4;

/** graphile-worker's batched mode, as its performance page sets it, at this concurrency and local queue size. */
function batched(url: string, schema: string, concurrency: number, localQueue: number) {
  return {
    worker: {
      connectionString: url,
      schema,
      concurrentJobs: concurrency,
      maxPoolSize: 10,
      localQueue: { size: localQueue },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
      // The bench adds every job before the runner starts: no need to poll for more.
      pollInterval: 2_000,
    },
  };
}

/** Errors only: graphile-worker's info lines (connected, looking for jobs…) would drown the figures. */
const quiet = new Logger(() => (level, message) => {
  if (level === 'error') console.error(`graphile-worker: ${message}`);
});

/** A graphile-worker schema: its name, and a postgres.js pool for reading and cleaning it. */
export interface GraphileSchema {
  name: SideName;
  schema: string;
  sql: Sql;
}

/** Add `n` no-op jobs in bulk through graphile-worker's own `addJobs`, in slices of 5,000. */
async function addNoops(url: string, schema: string, n: number): Promise<void> {
  const utils = await makeWorkerUtils({ connectionString: url, schema, logger: quiet });
  try {
    for (let done = 0; done < n; done += 5_000) {
      await utils.addJobs(Array.from({ length: Math.min(5_000, n - done) }, () => ({ identifier: 'noop', payload: {} })));
    }
  } finally {
    await utils.release();
  }
}

/**
 * `runners` graphile-worker runners of `concurrency` each over `runners × ITEMS` no-op jobs added
 * beforehand: jobs/s from the start of the runners until the jobs table is empty.
 */
export async function graphileOnce(url: string, db: GraphileSchema, runners: number, concurrency: number): Promise<number> {
  return (await graphileMeasured(url, db, runners, concurrency)).rate;
}

/** {@link graphileOnce}, with the CPU the machine and this process spent on it (null off Linux). */
export async function graphileMeasured(
  url: string,
  db: GraphileSchema,
  runners: number,
  concurrency: number,
): Promise<{ rate: number; cpu: CpuSpent | null }> {
  const total = runners * ITEMS;
  await addNoops(url, db.schema, total);
  let ran = 0;
  let allRan: () => void = () => {};
  const ranAll = new Promise<void>((r) => (allRan = r));
  const taskList = {
    noop: async () => {
      if (++ran === total) allRan();
    },
  };
  const started: GraphileRunner[] = [];
  try {
    const m0 = cpuMark();
    const t0 = performance.now();
    for (let i = 0; i < runners; i++) {
      started.push(
        await run({ preset: batched(url, db.schema, concurrency, 500), taskList, logger: quiet, noHandleSignals: true }),
      );
    }
    await ranAll;
    // Done means completed in the database: every batched completion has deleted its job.
    while ((await db.sql.unsafe(`select exists (select 1 from ${db.schema}._private_jobs) as left`))[0].left) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const m1 = cpuMark();
    return { rate: total / ((performance.now() - t0) / 1000), cpu: cpuSpent(m0, m1, total) };
  } finally {
    await Promise.all(started.map((r) => r.stop()));
    await db.sql.unsafe(`vacuum ${db.schema}._private_jobs`);
  }
}

/** Create graphile-worker's schema `schema` with its own migrations (through `makeWorkerUtils().migrate()`). */
export async function migrateGraphile(url: string, schema: string): Promise<void> {
  const utils = await makeWorkerUtils({ connectionString: url, schema, logger: quiet });
  try {
    await utils.migrate();
  } finally {
    await utils.release();
  }
}

/**
 * Give a graphile-worker schema the history of `jobs` jobs run and deleted: pieces inserted as
 * its job fetch leaves them (`attempts` 1, `locked_at`, `locked_by`), deleted as its completion
 * does; a vacuum every VACUUM_EVERY pieces; then analyze.
 * Returns ms.
 */
async function graphileHistory(sql: Sql, schema: string, jobs: number): Promise<number> {
  const t0 = performance.now();
  await sql.unsafe(`insert into ${schema}._private_tasks (identifier) values ('noop') on conflict do nothing`);
  const [{ id: task }] = await sql.unsafe<{ id: number }[]>(`select id from ${schema}._private_tasks where identifier = 'noop'`);
  for (let done = 0, piece = 0; done < jobs; done += PIECE, piece++) {
    const n = Math.min(PIECE, jobs - done);
    // Inserted as its job fetch leaves them (locked, one attempt): one write less per job than
    // an insert and a separate lock update, and the same dead rows once deleted.
    await sql.unsafe(`insert into ${schema}._private_jobs (task_id, payload, run_at, created_at, updated_at, attempts, locked_at, locked_by)
      select ${task}, '{}'::json, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', 1, now(), 'history'
      from generate_series(1, ${n})`);
    await sql.unsafe(`delete from ${schema}._private_jobs where locked_by = 'history'`);
    if (piece % VACUUM_EVERY === VACUUM_EVERY - 1) await sql.unsafe(`vacuum ${schema}._private_jobs`);
  }
  await sql.unsafe(`vacuum analyze ${schema}._private_jobs, ${schema}._private_tasks, ${schema}._private_job_queues`);
  return performance.now() - t0;
}

/**
 * Print graphile-worker's batched-mode figures on a fresh and a lived-in schema, leasehold's one
 * run on `lived` measured in the same rounds, and their ratio against the goal (≥ 1.5×).
 * BENCH_HISTORY_SCHEMA=name keeps (and reuses) the lived-in graphile-worker schema as `name_graphile`.
 */
export async function graphileBench(url: string, lived: Side): Promise<void> {
  const keep = process.env.BENCH_HISTORY_SCHEMA;
  const stamp = Date.now();
  const freshSchema = `bench_gw_fresh_${stamp}`;
  const livedSchema = keep ? `${keep}_graphile` : `bench_gw_lived_${stamp}`;
  const sql = connect(url, { max: 2 });
  try {
    const wanted = `graphile-worker history: ${HISTORY_JOBS} jobs`;
    const [marker] = await sql<{ note: string | null }[]>`select obj_description(oid, 'pg_namespace') as note
      from pg_namespace where nspname = ${livedSchema}`;
    let history: string;
    if (marker?.note === wanted) {
      history = `reused from schema ${livedSchema}`;
      await migrateGraphile(url, livedSchema);
    } else {
      await sql`drop schema if exists ${sql(livedSchema)} cascade`;
      await migrateGraphile(url, livedSchema);
      history = `loaded in ${((await graphileHistory(sql, livedSchema, HISTORY_JOBS)) / 1000).toFixed(1)} s`;
      await sql.unsafe(`comment on schema ${livedSchema} is '${wanted}'`);
    }
    await migrateGraphile(url, freshSchema);
    console.log(
      `graphile-worker ${graphileVersion()} (local queue 500, completeJobBatchDelay 0, failJobBatchDelay 0, pool of 10); ` +
        `lived-in schema: ${HISTORY_JOBS.toLocaleString('en-US')} jobs run and deleted, then analyzed (${history}); ${ITEMS} jobs per runner, ${ROUNDS} rounds`,
    );
    const sides: readonly [GraphileSchema, GraphileSchema] = [
      { name: 'fresh', schema: freshSchema, sql },
      { name: 'lived-in', schema: livedSchema, sql },
    ];
    const one = perSide();
    const four = perSide();
    const leasehold: number[] = [];
    // The same run claiming as far ahead as graphile-worker's local queue: 64 running + 436 queued.
    const leaseholdQueued: number[] = [];
    // The CPU each side's lived-in runs spent, machine-wide and in this process.
    const gwCpu: CpuSpent[] = [];
    const leaseholdCpu: CpuSpent[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const side of inTurn(round, sides)) {
        const m = await graphileMeasured(url, side, 1, 64);
        one[side.name].push(m.rate);
        if (side.name === 'lived-in' && m.cpu) gwCpu.push(m.cpu);
      }
      const m = await oneRunMeasured(url, lived);
      leasehold.push(m.rate);
      if (m.cpu) leaseholdCpu.push(m.cpu);
      leaseholdQueued.push(await oneRunRate(url, lived, 436));
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const side of inTurn(round, sides)) four[side.name].push(await graphileOnce(url, side, 4, 32));
    }
    console.log(rateLine('graphile-worker batched, concurrency 64', one, 'jobs/s'));
    console.log(rateLine('graphile-worker batched, 4 runners of concurrency 32, local queue 500 each', four, 'jobs/s'));
    const ratio = median(leasehold) / median(one['lived-in']);
    console.log(
      `one run vs graphile-worker (lived-in): ${ratio.toFixed(2)}×; goal ≥ 1.5× ` +
        `(leasehold one run, parallel 64, lived-in, same rounds: ${Math.round(median(leasehold)).toLocaleString('en-US')} items/s)`,
    );
    if (gwCpu.length && leaseholdCpu.length) console.log(cpuLine('leasehold one run', leaseholdCpu, 'graphile-worker', gwCpu));
    const queued = median(leaseholdQueued) / median(one['lived-in']);
    console.log(
      `one run claiming 500 ahead vs graphile-worker (lived-in): ${queued.toFixed(2)}× ` +
        `(leasehold one run, parallel 64, queueDepth 436 — 500 claimed at most, as graphile-worker's local queue: ` +
        `${Math.round(median(leaseholdQueued)).toLocaleString('en-US')} items/s)`,
    );
  } finally {
    await sql`drop schema if exists ${sql(freshSchema)} cascade`;
    if (!keep) await sql`drop schema if exists ${sql(livedSchema)} cascade`;
    await sql.end();
  }
}

function graphileVersion(): string {
  const pkg = new URL('../package.json', import.meta.resolve('graphile-worker'));
  return (JSON.parse(readFileSync(pkg, 'utf8')) as { version: string }).version;
}
