// Tenant fairness benchmark (part of `npm run bench`; `BENCH_ONLY=fairness` runs only this;
// docs/design.md, "Tenant fairness"):
//   1. the case through a local stack, as a user tries it: `leasehold dev --concurrency 2`
//      (two worker invocations at once, default settings) on the bench's database; over its HTTP
//      API tenant `big` starts 20 `checksum` batches of 400 files, tenant `small` one of 50 files
//      one second later. Prints when the small batch and the big tenant finished, counted from
//      the big tenant's first start, against the small batch's solo time on the same stack;
//   2. the same in-process: two Runners running one batch at a time each, looking for the next
//      as soon as a run ends (no HTTP, no invocations);
//   3. the cost of choosing the next batch (the takeover statement), median of 200 takeovers, at
//      10 open batches of 10 tenants and at 10,000 open batches of 1,000 tenants.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Runner, RUNNER_DEFAULTS, createBatch, getBatch, type Resolve } from '../src/batch/index.js';
import * as q from '../src/batch/sql/index.js';
import { defaultJobContext, defaultRegistry, type JobRegistry } from '../src/jobs/index.js';
import { ApiClient } from '../src/client/index.js';
import type { Sql } from '../src/store/index.js';
import { benchSchema } from './schema.js';

const BIG_BATCHES = 20;
const BIG_FILES = 400;
const SMALL_FILES = 50;
const WORKERS = 2;
const POLL_MS = 100;

const s = (ms: number) => (ms / 1000).toFixed(2);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** `n` files of 1–64 KiB in a new folder under `root`. */
async function folder(root: string, name: string, n: number): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir);
  let seed = n;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  for (let i = 0; i < n; i++)
    await writeFile(join(dir, `f${String(i).padStart(4, '0')}.bin`), Buffer.alloc(1024 + Math.floor(random() * 63 * 1024), i));
  return dir;
}

/** Workers: each runs one batch at a time and looks for the next at once when its run ends. */
function workers(sql: Sql, resolve: Resolve, n: number): { stop(): Promise<void> } {
  let stopping = false;
  const loops = Array.from({ length: n }, async () => {
    const runner = new Runner(sql, { maxRuns: 1 });
    while (!stopping) {
      const b = await runner.takeOver(resolve);
      const run = b && runner.running(b.id);
      await (run ? run.then(() => {}) : sleep(POLL_MS));
    }
    await runner.close();
  });
  return {
    stop: async () => {
      stopping = true;
      await Promise.all(loops);
    },
  };
}

async function start(sql: Sql, jobs: JobRegistry, tenant: string, dir: string): Promise<string> {
  const expanded = await jobs.expand('checksum', { dir });
  const { batch } = await createBatch(
    sql,
    { tenant, datasource: 'files', job: 'checksum', params: expanded.params, requestKey: randomUUID(), items: expanded.items },
    { maxOpen: 100 },
  );
  return batch.id;
}

async function finishedAt(sql: Sql, ids: string[], t0: number): Promise<number> {
  for (;;) {
    const all = await Promise.all(ids.map((id) => getBatch(sql, id)));
    if (all.every((b) => b.status !== 'open')) {
      if (all.some((b) => b.status !== 'succeeded')) throw new Error('bench fairness: a batch did not succeed');
      return performance.now() - t0;
    }
    await sleep(20);
  }
}

/** `leasehold dev --concurrency 2` on a schema of its own; resolves once its API answers. */
async function devStack(url: string, schema: string, root: string): Promise<{ api: ApiClient; stop(): Promise<void> }> {
  const cli = join(import.meta.dirname, '..', 'src', 'cli', 'index.ts');
  const schemaUrl = `${url}${url.includes('?') ? '&' : '?'}search_path=${encodeURIComponent(schema)}`;
  const child = spawn(
    process.execPath,
    ['--import', import.meta.resolve('tsx'), cli, 'dev', '--port', '0', '--concurrency', String(WORKERS)],
    {
      cwd: root,
      env: { ...process.env, DATABASE_URL: schemaUrl, LEASEHOLD_ALLOWED_ROOTS: root, LEASEHOLD_MAX_OPEN: '100' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const until = Date.now() + 120_000;
  let base: string | undefined;
  while (!base) {
    base = /^\s*api\s+(http:\/\/127\.0\.0\.1:\d+)/m.exec(out)?.[1];
    if (base && /serving/.test(out)) break;
    base = undefined;
    if (child.exitCode !== null || Date.now() > until) {
      child.kill('SIGKILL');
      throw new Error(`bench fairness: leasehold dev did not start:\n${out}`);
    }
    await sleep(50);
  }
  return {
    api: new ApiClient(base),
    stop: async () => {
      child.kill('SIGINT');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** When every batch of `ids` finished through the API, ms after t0. */
async function apiFinishedAt(api: ApiClient, ids: string[], t0: number): Promise<number> {
  for (;;) {
    const all = await Promise.all(ids.map((id) => api.getBatch(id)));
    if (all.every((b) => b.status !== 'open')) {
      if (all.some((b) => b.status !== 'succeeded')) throw new Error('bench fairness: a batch did not succeed');
      return performance.now() - t0;
    }
    await sleep(20);
  }
}

/** The case on `leasehold dev --concurrency 2`. */
async function sharingDev(url: string): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'leasehold-bench-fairness-dev-'));
  const { sql, drop } = await benchSchema(url, 'bench_fairness_dev', 2);
  const schema = (await sql<{ s: string }[]>`select current_schema() as s`)[0].s;
  let dev: Awaited<ReturnType<typeof devStack>> | undefined;
  try {
    const bigDir = await folder(root, 'big', BIG_FILES);
    const smallDir = await folder(root, 'small', SMALL_FILES);
    dev = await devStack(url, schema, root);
    const api = dev.api;
    const startApi = async (tenant: string, dir: string, datasource = 'files') =>
      (await api.startBatch({ tenant, datasource, job: 'checksum', params: { dir } })).batch.id;

    let t0 = performance.now();
    const solo = await apiFinishedAt(api, [await startApi('small-solo', smallDir)], t0);

    // The big tenant's 20 starts go out at once; the small one's a second later.
    t0 = performance.now();
    const bigStarts = Promise.all(Array.from({ length: BIG_BATCHES }, () => startApi('big', bigDir)));
    await sleep(1_000);
    const smallStart = performance.now();
    const small = await startApi('small', smallDir);
    const big = await bigStarts;
    const [smallDone, bigDone] = await Promise.all([apiFinishedAt(api, [small], t0), apiFinishedAt(api, big, t0)]);
    const bigFinishedBefore = (
      await sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches
        where tenant = 'big' and finished_at <= (select finished_at from leasehold_batches where id = ${small})`
    )[0].n;
    console.log(
      `tenant fairness, ${WORKERS} workers: small batch done after ${s(smallDone)} s (big tenant done after ${s(bigDone)} s)`,
    );
    console.log(
      `  on leasehold dev --concurrency ${WORKERS}: small batch ${s(smallDone - (smallStart - t0))} s from its own start (solo ${s(solo)} s;` +
        ` goal ≤ solo + 1 s + one slice of ${s(RUNNER_DEFAULTS.sliceMs)} s); small done / big done = ${((100 * smallDone) / bigDone).toFixed(0)} %,` +
        ` small's own time / big done = ${((100 * (smallDone - (smallStart - t0))) / bigDone).toFixed(0)} % (goal ≤ 30 %);` +
        ` ${bigFinishedBefore} of ${BIG_BATCHES} big batches finished before it`,
    );
  } finally {
    await dev?.stop();
    await drop();
    await rm(root, { recursive: true, force: true });
  }
}

/** The two-worker case in-process: the small tenant's batch against the big tenant's 20. */
async function sharing(url: string): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'leasehold-bench-fairness-'));
  const { sql, drop } = await benchSchema(url, 'bench_fairness', 8);
  try {
    const bigDir = await folder(root, 'big', BIG_FILES);
    const smallDir = await folder(root, 'small', SMALL_FILES);
    const jobs = defaultRegistry(defaultJobContext({ allowedRoots: [root] }));

    // The small batch alone on the same two workers.
    let w = workers(sql, jobs.resolve, WORKERS);
    let t0 = performance.now();
    const solo = await finishedAt(sql, [await start(sql, jobs, 'small-solo', smallDir)], t0);
    await w.stop();

    w = workers(sql, jobs.resolve, WORKERS);
    t0 = performance.now();
    const big: string[] = [];
    for (let i = 0; i < BIG_BATCHES; i++) big.push(await start(sql, jobs, 'big', bigDir));
    await sleep(1_000 - (performance.now() - t0));
    const smallStart = performance.now();
    const small = await start(sql, jobs, 'small', smallDir);
    const [smallDone, bigDone] = await Promise.all([finishedAt(sql, [small], t0), finishedAt(sql, big, t0)]);
    await w.stop();
    const bigFinishedBefore = (
      await sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches
        where tenant = 'big' and finished_at <= (select finished_at from leasehold_batches where id = ${small})`
    )[0].n;
    console.log(
      `  in-process, ${WORKERS} runners of one run each: small batch done after ${s(smallDone)} s (big tenant done after ${s(bigDone)} s); small batch ${s(smallDone - (smallStart - t0))} s from its own start (solo ${s(solo)} s;` +
        ` goal ≤ solo + 1 s + one slice of ${s(RUNNER_DEFAULTS.sliceMs)} s); small/big = ${((100 * smallDone) / bigDone).toFixed(0)} % (goal ≤ 30 %);` +
        ` ${bigFinishedBefore} of ${BIG_BATCHES} big batches finished before it; ${BIG_FILES} + ${SMALL_FILES}-file checksum batches, one run per worker`,
    );
  } finally {
    await drop();
    await rm(root, { recursive: true, force: true });
  }
}

/** Median time of the takeover statement (the choice) over `n` takeovers, each handed back. */
async function choiceMs(sql: Sql, n: number): Promise<number> {
  const times: number[] = [];
  const processId = randomUUID();
  for (let i = 0; i < n; i++) {
    const run = randomUUID();
    const t0 = performance.now();
    const b = await q.takeOver(sql, { run, process: processId, staleMs: 30_000, maxRunning: q.NO_LIMIT });
    times.push(performance.now() - t0);
    if (!b) throw new Error('bench fairness: nothing to take');
    await q.handBack(sql, b.id, run);
  }
  return median(times);
}

/**
 * Median server time of the takeover statement (EXPLAIN ANALYZE's execution time, its trigger
 * included) over `n` runs, each rolled back so every run meets the same rows.
 */
async function choiceServerMs(sql: Sql, n: number): Promise<number> {
  const args = { run: randomUUID(), process: randomUUID(), staleMs: 30_000, maxRunning: q.NO_LIMIT };
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    await sql
      .begin(async (tx) => {
        const t = tx as unknown as Sql;
        const [row] = await t<
          { 'QUERY PLAN': [{ 'Execution Time': number }] }[]
        >`explain (analyze, format json) ${q.takeOverStatement(t, args)}`;
        times.push(row['QUERY PLAN'][0]['Execution Time']);
        throw new RolledBack();
      })
      .catch((e: unknown) => {
        if (!(e instanceof RolledBack)) throw e;
      });
  }
  return median(times);
}

class RolledBack extends Error {}

/** The choice's cost at 10 open batches and at 10,000 of 1,000 tenants. */
async function choiceCost(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_choice', 2);
  try {
    const open = async (tenants: number, perTenant: number) => {
      await sql`insert into leasehold_batches (tenant, datasource, job, params, request_key, total, priority)
        select 't' || (g / ${perTenant}), 'ds', 'checksum', '{}'::jsonb, 'k' || g, 1, g % 10
        from generate_series(0, ${tenants * perTenant - 1}) g`;
      await sql`analyze leasehold_batches`;
      await sql`analyze leasehold_tenants`;
    };
    await open(10, 1);
    const fewServer = await choiceServerMs(sql, 200);
    await choiceMs(sql, 50);
    const few = await choiceMs(sql, 200);
    await sql`delete from leasehold_batches`;
    await sql`vacuum analyze leasehold_tenants`;
    await open(1_000, 10);
    const manyServer = await choiceServerMs(sql, 200);
    await choiceMs(sql, 50);
    const many = await choiceMs(sql, 200);
    console.log(
      `tenant fairness, choosing the next batch: ${few.toFixed(2)} ms at 10 open batches, ${many.toFixed(2)} ms at 10,000 open batches of 1,000 tenants (${(many / few).toFixed(2)}×; median of 200 takeovers, each handed back)`,
    );
    console.log(
      `  the statement alone on the server (EXPLAIN ANALYZE, rolled back): ${fewServer.toFixed(3)} ms at 10, ${manyServer.toFixed(3)} ms at 10,000 (${(manyServer / fewServer).toFixed(2)}×; median of 200)`,
    );
  } finally {
    await drop();
  }
}

/**
 * The fairness figures. BENCH_FAIRNESS=choice prints only the choice's cost (no stack, no files).
 */
export async function fairnessBench(url: string): Promise<void> {
  if (process.env.BENCH_FAIRNESS !== 'choice') {
    await sharingDev(url);
    await sharing(url);
  }
  await choiceCost(url);
}
