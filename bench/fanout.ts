// Fan-out (part of `npm run bench`; `BENCH_ONLY=fanout` runs only this): the goal lines of issue
// 17, on a fresh schema of their own (and, for the local-stack lines, a database of their own).
//   1. scaling: one batch of FANOUT_ITEMS items that each await a 20 ms timer, parallel 16, worked
//      by 1, 2, 4, 8 and 16 runs, each run in a Node child process of its own with one Runner
//      (bench/fanout-child.ts), all told to take over the batch at once once connected: items/s
//      from that moment (database clock) until the batch's finish, and each as a percentage of
//      1 run × N. (`leasehold dev` runs its worker invocations in its own one process, so
//      16 runs there share one Node event loop; child processes are what a fleet of workers is.)
//   2. no-op: one batch of 4 × ITEMS items over 4 runs (4 runners, each with its own pool, in this
//      process) against 4 batches of ITEMS items with one run each (items/s from the takeovers to
//      the last finish, database clock), and graphile-worker with
//      4 runners of concurrency 32 and a local queue of 500 each over 4 × ITEMS jobs, same rounds;
//   3. cost at 8 runs: the runs' statements (sum of RunResult.statements) per item, of 1's 8 runs
//      and of 8 child processes over a no-op batch of ITEMS items at parallel 64, with the lock
//      waits of their sessions (pg_stat_activity and pg_locks sampled every 50 ms, first round);
//   4. start to full speed: on an idle `leasehold dev` (bench/fanout-app.mjs; worker invocations
//      through its local Lambda invoke endpoint), ms from POST /batches of FANOUT_ITEMS 20 ms
//      items with maxConcurrency 8 until the batch has 8 run rows (leasehold_runs);
//   5. the knob: during a batch of FANOUT_ITEMS items started with maxConcurrency 2, PATCH it to
//      8: ms until 8 run rows; PATCH it to 2: ms until 2; once it finished, its items with more
//      than one attempt (none expected: surplus runs give back unstarted items unused).
// 1–3 are medians of ROUNDS rounds (run counts ascending in even rounds, descending in odd);
// 4 and 5 are measured once. BENCH_FANOUT_TRACE=1 prints each child-process measurement's runs
// (outcome, items, statements, ms to join and to end) on stderr. Line 1 is followed by the child
// processes' CPU time (user + system, summed) per item and the median process's per item of its
// own, their PostgreSQL backends' (/proc/<pid>/stat, when the server runs on this machine), the
// cores both kept busy over the wall time, the rate the machine's cores allow at that CPU per
// item (as a share of the items' own bound, runs × 16 / 20 ms), and the statements per item, per
// run count: whether 16 processes are bound by CPU. Line 3 is followed by the 8 runs' statements
// per item by kind (what their pools sent after `go`, through postgres.js's `debug` hook).
// Knobs: BENCH_FANOUT_RUNS=8,16 measures only those run counts in line 1 (the cost line needs 8;
// without 1 no percentage is printed); BENCH_FANOUT_LINES=scaling,cost,four,local picks lines
// (scaling: 1; cost: 3; four: 2; local: 4 and 5); BENCH_FANOUT_QUEUE_DEPTH sets the child
// processes' runner `queueDepth` (default the runner's own).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Runner, createBatch, getBatch, type Executor } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { startDev } from '../test/support/dev-process.js';
import { graphileMeasured, migrateGraphile } from './graphile.js';
import { batchOf, clean } from './runs.js';
import { cpuLine, cpuMark, cpuSpent, median, type CpuSpent } from './sides.js';

const ROOT = resolve(import.meta.dirname, '..');
const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const FANOUT_ITEMS = Number(process.env.BENCH_FANOUT_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Run counts of line 1; `BENCH_FANOUT_RUNS` (comma-separated) picks some, e.g. `8` (line 1 then prints those alone). */
const RUN_COUNTS = (process.env.BENCH_FANOUT_RUNS ?? '1,2,4,8,16').split(',').map(Number);
/** Lines printed; `BENCH_FANOUT_LINES` (comma-separated of scaling, cost, four, local) picks some. */
const LINES = new Set((process.env.BENCH_FANOUT_LINES ?? 'scaling,cost,four,local').split(','));
const PARALLEL = 16;
/** How long each item of the scaling line waits, ms (bench/fanout-child.ts). */
const ITEM_MS = 20;
/** application_name of the runs' sessions, so the lock samples see theirs only. */
const APP = 'leasehold-fanbench';

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** A child process of bench/fanout-child.ts and its stdout lines as they come. */
function child(env: NodeJS.ProcessEnv): { proc: ChildProcess; next: () => Promise<string> } {
  const proc = spawn(process.execPath, [...process.execArgv, join(ROOT, 'bench', 'fanout-child.ts')], {
    cwd: ROOT,
    env,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  return {
    proc,
    next: async () => {
      const r = await lines.next();
      if (r.done) throw new Error('bench/fanout-child.ts ended early');
      return r.value;
    },
  };
}

/** What bench/fanout-child.ts prints when its run has ended; ms after `go`. */
interface ChildResult {
  outcome: string;
  finishedItems: number;
  statements: number;
  takenMs: number;
  endedMs: number;
  /** CPU time the child process used from `go` to its run's end, ms (user + system). */
  cpuMs: number;
  /** The statements it sent from `go` to its run's end, by kind (see bench/fanout-child.ts). */
  kinds: Record<string, number>;
}

/** Lock waits of the runs' sessions, sampled: session samples, those waiting on a lock, by lock. */
interface LockSamples {
  sessions: number;
  waiting: number;
  byLock: Map<string, number>;
}

/** Sample pg_stat_activity and pg_locks every 50 ms until `until` settles. */
async function sampleLocks(sql: Sql, until: Promise<unknown>): Promise<LockSamples> {
  const s: LockSamples = { sessions: 0, waiting: 0, byLock: new Map() };
  let done = false;
  void until.finally(() => (done = true)).catch(() => {});
  while (!done) {
    const [a] = await sql<{ sessions: number; waiting: number }[]>`
      select count(*) filter (where state = 'active') as sessions,
             count(*) filter (where state = 'active' and wait_event_type = 'Lock') as waiting
      from pg_stat_activity where application_name = ${APP}`;
    s.sessions += a.sessions;
    s.waiting += a.waiting;
    const locks = await sql<{ lock: string }[]>`
      select l.locktype || coalesce(' ' || c.relname, '') || ' ' || l.mode as lock
      from pg_locks l join pg_stat_activity a on a.pid = l.pid left join pg_class c on c.oid = l.relation
      where not l.granted and a.application_name = ${APP}`;
    for (const { lock } of locks) s.byLock.set(lock, (s.byLock.get(lock) ?? 0) + 1);
    await sleep(50);
  }
  return s;
}

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (Linux's USER_HZ). */
const TICKS_PER_S = 100;

/** CPU time (user + system) a process used so far, ms; undefined when /proc cannot tell (not Linux, gone). */
async function procCpuMs(pid: number): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may hold spaces) in parentheses: utime is the 14th field, stime the 15th.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_S;
  } catch {
    return undefined;
  }
}

/**
 * CPU time the runs' PostgreSQL backends (application_name {@link APP}) used until `until`
 * settles, ms: each backend's /proc/<pid>/stat read every 100 ms, the last reading counted less
 * the first (a backend seen first after `go` counts from 0: its connection's own start). Only
 * when the server runs on this machine (a backend's /proc entry exists); else undefined.
 */
async function sampleBackendCpu(sql: Sql, until: Promise<unknown>): Promise<number | undefined> {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  let done = false;
  let initial = true;
  void until.finally(() => (done = true)).catch(() => {});
  while (!done) {
    const pids = await sql<{ pid: number }[]>`select pid from pg_stat_activity where application_name = ${APP}`;
    for (const { pid } of pids) {
      const ms = await procCpuMs(pid);
      if (ms === undefined) continue;
      if (!first.has(pid)) first.set(pid, initial ? ms : 0);
      last.set(pid, ms);
    }
    initial = false;
    await sleep(100);
  }
  if (last.size === 0) return undefined;
  let sum = 0;
  for (const [pid, ms] of last) sum += ms - first.get(pid)!;
  return sum;
}

/** One scaling measurement: `runs` child processes over one batch of `items` items. */
interface Scaling {
  runs: number;
  items: number;
  /** `timer`: each item awaits a 20 ms timer; `noop`: nothing. */
  work: 'timer' | 'noop';
  parallel: number;
  /** Sample the runs' lock waits meanwhile. */
  locks: boolean;
}

/** `W of S (P %)`, and the ungranted locks seen most. */
function lockText(s: LockSamples): string {
  const top = [...s.byLock.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([lock, n]) => `${lock} ×${n}`)
    .join(', ');
  const share = s.sessions ? ((100 * s.waiting) / s.sessions).toFixed(1) : '0';
  return `${s.waiting} of ${s.sessions} (${share} %)${top ? `: ${top}` : ''}`;
}

/**
 * One batch worked by `runs` child processes (one Runner each): items/s from `go` (database
 * clock, read just before it is sent) to the batch's finish, the runs' statements, and (with
 * `locks`) lock samples of their sessions until every run has ended. A run that did not finish
 * the batch may end up to a beat after it (it learns of the finish on its next beat or claim):
 * that tail is not counted.
 */
async function scalingOnce(
  url: string,
  schema: string,
  sql: Sql,
  m: Scaling,
): Promise<{
  rate: number;
  statements: number;
  cpuMs: number;
  /** The median child process's CPU time per item it finished, ms. */
  cpuPerItemMs: number;
  /** The runs' PostgreSQL backends' CPU time, ms; undefined when the server is not on this machine. */
  backendCpuMs: number | undefined;
  kinds: Map<string, number>;
  samples?: LockSamples;
}> {
  await clean(sql);
  const job = m.work === 'timer' ? 'fanout-timer' : 'noop';
  const { batch } = await createBatch(sql, { ...batchOf(m.items), job, maxConcurrency: m.runs });
  const env = {
    ...process.env,
    FANOUT_URL: url,
    FANOUT_SCHEMA: schema,
    FANOUT_BATCH: batch.id,
    FANOUT_PARALLEL: String(m.parallel),
    FANOUT_WORK: m.work,
  };
  const children = Array.from({ length: m.runs }, () => child(env));
  try {
    for (const c of children) if ((await c.next()) !== 'ready') throw new Error('bench/fanout-child.ts did not start');
    const [{ go }] = await sql<{ go: Date }[]>`select clock_timestamp() as go`;
    for (const c of children) c.proc.stdin!.write('go\n');
    const ended = Promise.all(children.map((c) => c.next()));
    const sampling = m.locks ? sampleLocks(sql, ended) : undefined;
    const backends = sampleBackendCpu(sql, ended);
    const results = (await ended).map((l) => JSON.parse(l) as ChildResult);
    const samples = await sampling;
    const backendCpuMs = await backends;
    const b = await getBatch(sql, batch.id);
    if (process.env.BENCH_FANOUT_TRACE)
      console.error(`${m.runs} runs, ${m.work}: finished ${b!.finishedAt!.getTime() - go.getTime()} ms after go`, results);
    if (b?.status !== 'succeeded' || b.counts.done !== m.items) throw new Error(`bench fan-out batch ended ${b?.status}`);
    if (results.some((r) => r.outcome === 'not-taken')) throw new Error(`bench fan-out: a run of ${m.runs} never joined`);
    const seconds = (b.finishedAt!.getTime() - go.getTime()) / 1000;
    return {
      rate: m.items / seconds,
      statements: results.reduce((n, r) => n + r.statements, 0),
      cpuMs: results.reduce((n, r) => n + r.cpuMs, 0),
      cpuPerItemMs: median(results.filter((r) => r.finishedItems > 0).map((r) => r.cpuMs / r.finishedItems)),
      backendCpuMs,
      kinds: sumKinds(results.map((r) => r.kinds)),
      samples,
    };
  } finally {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill();
  }
}

/** The children's statements by kind, summed. */
function sumKinds(all: Record<string, number>[]): Map<string, number> {
  const sum = new Map<string, number>();
  for (const kinds of all) for (const [k, n] of Object.entries(kinds)) sum.set(k, (sum.get(k) ?? 0) + n);
  return sum;
}

const noop: Executor = { work: async () => null, parallel: 64 };

/**
 * 4 runners, each with its own pool, over `ids` (4 batch ids, or one id 4 times): items/s from
 * just before their takeovers to the last batch's finish (database clock; as in scalingOnce, a
 * run's tail after its batch finished is not counted).
 */
async function fourRunners(
  url: string,
  schema: string,
  ids: string[],
  total: number,
): Promise<{ rate: number; cpu: CpuSpent | null }> {
  const pools = ids.map(() => connect(url, { max: 4, schema }));
  try {
    const runners = pools.map((p) => new Runner(p, { parallel: 64 }));
    const [{ go }] = await pools[0]<{ go: Date }[]>`select clock_timestamp() as go`;
    const m0 = cpuMark();
    const taken = await Promise.all(runners.map((r, i) => r.takeOver(() => noop, ids[i])));
    if (taken.some((b) => !b)) throw new Error('bench fan-out: a no-op run never joined');
    await Promise.all(runners.map((r, i) => r.running(ids[i])!));
    const cpu = cpuSpent(m0, cpuMark(), total);
    const batches = await Promise.all([...new Set(ids)].map((id) => getBatch(pools[0], id)));
    if (batches.some((b) => b?.status !== 'succeeded')) throw new Error('bench no-op batch did not succeed');
    const last = Math.max(...batches.map((b) => b!.finishedAt!.getTime()));
    return { rate: total / ((last - go.getTime()) / 1000), cpu };
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}

/** One batch of 4 × ITEMS no-op items over 4 runs: items/s, and the CPU spent (bench/sides.ts). */
async function oneBatchFourRuns(url: string, schema: string, sql: Sql): Promise<{ rate: number; cpu: CpuSpent | null }> {
  await clean(sql);
  const { batch } = await createBatch(sql, { ...batchOf(4 * ITEMS), maxConcurrency: 4 });
  return fourRunners(url, schema, [batch.id, batch.id, batch.id, batch.id], 4 * ITEMS);
}

/** 4 batches of ITEMS no-op items, one run each: items/s. */
async function fourBatches(url: string, schema: string, sql: Sql): Promise<number> {
  await clean(sql);
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) ids.push((await createBatch(sql, batchOf(ITEMS))).batch.id);
  return (await fourRunners(url, schema, ids, 4 * ITEMS)).rate;
}

/** Poll the batch's run rows every 10 ms until `ok(count)`: ms from `t0`, or throw after `timeoutMs`. */
async function runsReach(sql: Sql, id: string, ok: (n: number) => boolean, t0: number, timeoutMs = 60_000): Promise<number> {
  for (;;) {
    const [{ n }] = await sql<{ n: number }[]>`select count(*) as n from leasehold_runs where batch_id = ${id}`;
    if (ok(n)) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) throw new Error(`bench fan-out: batch ${id} has ${n} runs after ${timeoutMs} ms`);
    await sleep(10);
  }
}

/** Lines 4 and 5 on a `leasehold dev` of their own, on a database of their own on `url`'s server. */
async function localStackLines(url: string): Promise<void> {
  await new Promise<void>((done, fail) => {
    const build = spawn(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], { cwd: ROOT, stdio: 'inherit' });
    build.on('exit', (code) => (code === 0 ? done() : fail(new Error(`build ended ${code}`))));
  });
  const name = `leasehold_fanbench_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin`create database ${admin(name)}`;
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${name}`;
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-fanout-'));
  await chmod(dir, 0o755);
  const sql = connect(dbUrl.toString(), { max: 2 });
  const env = { ...process.env, DATABASE_URL: dbUrl.toString() };
  const beatMs = Number(process.env.LEASEHOLD_BEAT_MS ?? 5_000);
  const tickMs = Number(process.env.LEASEHOLD_LOCAL_SCHEDULE_MS ?? 5_000);
  const dev = await startDev(
    process.execPath,
    [
      join(ROOT, 'bin', 'leasehold.js'),
      'dev',
      '--app',
      join(ROOT, 'bench', 'fanout-app.mjs'),
      '--port',
      '0',
      '--concurrency',
      '32',
    ],
    { cwd: dir, env },
  );
  try {
    // Idle: the scheduler's first tick has passed and nothing runs.
    await sleep(1_000);
    const start = (maxConcurrency: number) =>
      dev.api.startBatch({
        tenant: 'bench',
        datasource: randomUUID(),
        job: 'fanout-timer',
        params: { n: FANOUT_ITEMS },
        maxConcurrency,
      });
    let t0 = performance.now();
    const full = (await start(8)).batch;
    const toEight = await runsReach(sql, full.id, (n) => n >= 8, t0);
    await dev.api.cancelBatch(full.id);
    await runsReach(sql, full.id, (n) => n === 0, performance.now());
    console.log(
      `start to full speed (local stack, ${FANOUT_ITEMS.toLocaleString('en-US')} 20 ms items, maxConcurrency 8): ` +
        `8 runs ${fmt(toEight)} ms after POST /batches; goal ≤ 2,000 ms`,
    );

    const knob = (await start(2)).batch;
    await runsReach(sql, knob.id, (n) => n >= 2, performance.now());
    t0 = performance.now();
    await dev.api.updateBatch(knob.id, { maxConcurrency: 8 });
    const up = await runsReach(sql, knob.id, (n) => n >= 8, t0);
    t0 = performance.now();
    await dev.api.updateBatch(knob.id, { maxConcurrency: 2 });
    const down = await runsReach(sql, knob.id, (n) => n <= 2, t0);
    // The batch runs to its end, then its items' attempts are read.
    for (;;) {
      const b = await dev.api.getBatch(knob.id);
      if (b.status !== 'open') break;
      await sleep(200);
    }
    const [{ retried, done }] = await sql<{ retried: number; done: number }[]>`
      select count(*) filter (where attempts > 1) as retried, count(*) filter (where state = 'done') as done
      from leasehold_items where batch_id = ${knob.id}`;
    console.log(
      `the knob (local stack, ${FANOUT_ITEMS.toLocaleString('en-US')} 20 ms items): PATCH maxConcurrency 2 → 8: 8 runs in ${fmt(up)} ms ` +
        `(scheduler tick ${fmt(tickMs)} ms); → 2: 2 runs in ${fmt(down)} ms (beat ${fmt(beatMs)} ms); ` +
        `items with more than one attempt: ${retried} (${fmt(done)} done)`,
    );
  } finally {
    await dev.stop();
    await sql.end();
    await admin`drop database if exists ${admin(name)} with (force)`;
    await admin.end();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Print the fan-out lines (see the top of this file). */
export async function fanoutBench(url: string): Promise<void> {
  const schema = `bench_fanout_${Date.now()}`;
  const gwSchema = `bench_gw_fanout_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin`create schema ${admin(schema)}`;
  const sql = connect(url, { max: 4, schema });
  try {
    await migrate(sql);
    await migrateGraphile(url, gwSchema);
    const rates = new Map<number, number[]>(RUN_COUNTS.map((n) => [n, []]));
    const cpu = new Map<number, number[]>(RUN_COUNTS.map((n) => [n, []]));
    const cpuPerProcess = new Map<number, number[]>(RUN_COUNTS.map((n) => [n, []]));
    const backendCpu = new Map<number, number[]>(RUN_COUNTS.map((n) => [n, []]));
    const costs = new Map<number, number[]>(RUN_COUNTS.map((n) => [n, []]));
    const timerCost: number[] = [];
    // The 8 runs' statements by kind, summed over the rounds.
    const timerKinds: Map<string, number>[] = [];
    let timerLocks: LockSamples | undefined;
    for (let round = 0; round < ROUNDS && (LINES.has('scaling') || LINES.has('cost')); round++) {
      for (const runs of round % 2 === 0 ? RUN_COUNTS : [...RUN_COUNTS].reverse()) {
        const locks = runs === 8 && round === 0;
        const r = await scalingOnce(url, schema, sql, { runs, items: FANOUT_ITEMS, work: 'timer', parallel: PARALLEL, locks });
        rates.get(runs)!.push(r.rate);
        cpu.get(runs)!.push(r.cpuMs / FANOUT_ITEMS);
        cpuPerProcess.get(runs)!.push(r.cpuPerItemMs);
        if (r.backendCpuMs !== undefined) backendCpu.get(runs)!.push(r.backendCpuMs / FANOUT_ITEMS);
        costs.get(runs)!.push(r.statements / FANOUT_ITEMS);
        if (runs === 8) timerCost.push(r.statements / FANOUT_ITEMS);
        if (runs === 8) timerKinds.push(r.kinds);
        timerLocks ??= r.samples;
      }
    }
    if (LINES.has('scaling')) {
      const one = rates.has(1) ? median(rates.get(1)!) : undefined;
      const at = (n: number) => {
        const r = median(rates.get(n)!);
        const share = one ? ` (${Math.round((100 * r) / (one * n))} %${n === 8 || n === 16 ? ' of linear' : ''})` : '';
        return `${n} run${n === 1 ? '' : 's'} ${fmt(r)} items/s${share}`;
      };
      console.log(
        `fan-out, 20 ms items, parallel ${PARALLEL}: ${RUN_COUNTS.map(at).join('; ')}; ` +
          `goals ≥ 90 % at 8, ≥ 80 % at 16 (each run a Node child process with one Runner, not the local stack; ` +
          `${FANOUT_ITEMS.toLocaleString('en-US')} items, go to finish, fresh schema)`,
      );
      // Whether the runs are CPU-bound: the child processes' CPU time per item (summed over the
      // runs, and the median process's over its own items: flat as runs are added if the work per
      // item does not grow), their PostgreSQL backends' (from /proc, when the server is local),
      // the cores both kept busy over the wall time, and the rate the machine's cores would allow
      // at that CPU per item if the runs and their backends had them to themselves.
      const cores = availableParallelism();
      const used = (n: number) => {
        const perItem = median(cpu.get(n)!);
        const backend = backendCpu.get(n)!.length ? median(backendCpu.get(n)!) : undefined;
        const both = perItem + (backend ?? 0);
        const bound = (1000 * cores) / both;
        // Against the work's own bound (each slot one 20 ms item at a time), which a loaded
        // machine's 1-run line does not move.
        const ideal = (n * PARALLEL * 1000) / ITEM_MS;
        const ofLinear = ` (${Math.round((100 * bound) / ideal)} % of ${n} × ${fmt(ideal / n)})`;
        return (
          `${n}: ${perItem.toFixed(3)} ms/item (per process ${median(cpuPerProcess.get(n)!).toFixed(3)} ms per own item)` +
          `${backend === undefined ? '' : ` + backends ${backend.toFixed(3)} ms/item`}, ` +
          `${((both * median(rates.get(n)!)) / 1000).toFixed(2)} cores busy, ${cores} cores allow ${fmt(bound)} items/s${ofLinear}, ` +
          `${median(costs.get(n)!).toFixed(4)} statements/item`
        );
      };
      console.log(
        `fan-out, 20 ms items: the runs' CPU (user + system: child processes, their PostgreSQL backends) by runs: ` +
          `${RUN_COUNTS.map(used).join('; ')}`,
      );
    }
    if (LINES.has('cost') && timerCost.length > 0) {
      const noopCost: number[] = [];
      let noopLocks: LockSamples | undefined;
      for (let round = 0; round < ROUNDS; round++) {
        const r = await scalingOnce(url, schema, sql, { runs: 8, items: ITEMS, work: 'noop', parallel: 64, locks: round === 0 });
        noopCost.push(r.statements / ITEMS);
        noopLocks ??= r.samples;
      }
      console.log(
        `cost at 8 runs (sum of the runs' RunResult.statements / items; goal ≤ 0.03, issue 36): ` +
          `20 ms items, parallel ${PARALLEL}: ${median(timerCost).toFixed(4)} statements per item, lock waits ${lockText(timerLocks!)}; ` +
          `no-op, parallel 64, ${ITEMS.toLocaleString('en-US')} items: ${median(noopCost).toFixed(4)}, lock waits ${lockText(noopLocks!)} ` +
          `(active sessions of the runs waiting on a lock / sampled, pg_stat_activity and pg_locks every 50 ms)`,
      );
      const byKind = sumKinds(timerKinds.map((k) => Object.fromEntries(k)));
      const perItem = (n: number) => n / (timerKinds.length * FANOUT_ITEMS);
      console.log(
        `cost at 8 runs by kind (20 ms items, parallel ${PARALLEL}, statements per item over ${timerKinds.length} rounds; ` +
          `what the children's pools sent, RunResult.statements counts the same but the takeover): ` +
          [...byKind.entries()]
            .sort((a, b) => b[1] - a[1])
            .map(([k, n]) => `${perItem(n).toFixed(4)} ${k}`)
            .join('; '),
      );
    }
    if (LINES.has('four')) {
      const oneBatch: number[] = [];
      const separate: number[] = [];
      const graphile: number[] = [];
      const oneBatchCpu: CpuSpent[] = [];
      const graphileCpu: CpuSpent[] = [];
      const gw = { name: 'fresh' as const, schema: gwSchema, sql: admin };
      for (let round = 0; round < ROUNDS; round++) {
        const order = [
          async () => {
            const m = await oneBatchFourRuns(url, schema, sql);
            oneBatch.push(m.rate);
            if (m.cpu) oneBatchCpu.push(m.cpu);
          },
          async () => separate.push(await fourBatches(url, schema, sql)),
          async () => {
            const m = await graphileMeasured(url, gw, 4, 32);
            graphile.push(m.rate);
            if (m.cpu) graphileCpu.push(m.cpu);
          },
        ];
        for (const f of round % 2 === 0 ? order : order.reverse()) await f();
      }
      const [o, f, g] = [median(oneBatch), median(separate), median(graphile)];
      console.log(
        `no-op, 4 runs of one batch: ${fmt(o)} items/s; 4 batches: ${fmt(f)} items/s (${Math.round((100 * o) / f)} %; goal ≥ 90 %) ` +
          `(${(o / g).toFixed(2)}× graphile-worker 4×32, ${fmt(g)} jobs/s; goal ≥ 2×) ` +
          `(parallel 64, 4 runners with a pool each in one process, ${(4 * ITEMS).toLocaleString('en-US')} items, fresh schema)`,
      );
      if (oneBatchCpu.length && graphileCpu.length) {
        console.log(cpuLine('4 runs of one batch', oneBatchCpu, 'graphile-worker 4×32', graphileCpu));
      }
    }
    await clean(sql);
  } finally {
    await sql.end();
    await admin`drop schema if exists ${admin(schema)} cascade`;
    await admin`drop schema if exists ${admin(gwSchema)} cascade`;
    await admin.end();
  }
  if (LINES.has('local')) await localStackLines(url);
}
