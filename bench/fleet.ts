// Fan-out at fleet scale, simulated here (part of `npm run bench`; `BENCH_ONLY=fleet` runs only
// this; issue 36's line): one batch worked by 256 and by 1,024 runs at once, each run a `Runner`
// with its own pool of 2 in pooler mode (`connect(…, { max: 2, pooler: 'transaction' })`), all in
// this one process and all through one PgBouncer in transaction mode with 20 server connections
// (test/support/pgbouncer.ts, a fresh one per measurement; the shape of RDS Proxy in front of a
// small instance). Its items await a 1 s timer, parallel 4, so they cost no CPU: what limits the
// rate is the design's database work. Per run count:
//   - items/s from just before the takeovers (database clock) to the batch's finish, and as a
//     percentage of linear (4 × runs items/s); a run's tail after the finish is not counted;
//   - server transactions per item: the delta of the database's `pg_stat_database`
//     xact_commit + xact_rollback over the measurement, less the warm-up's statements (each pool
//     opens its 2 connections with a `select 1` apiece before the takeovers; one transaction
//     each), over items. The bench has a database of its own (`bench_fleet_<now>`, dropped after),
//     read once every session of it has closed (a backend reports its counts at exit), so
//     nothing else counts;
//   - lock waits of the runs' server sessions (`pg_stat_activity` and `pg_locks` sampled every
//     50 ms from another database of the server): each wait seen (`pg_locks.waitstart`) at the
//     longest it was seen to last, their 95th percentile and the locks seen most, and the share
//     of active-session samples that were waiting on a lock (a wait shorter than 50 ms is often
//     missed, so the percentile leans long); and PgBouncer's own wait (`SHOW STATS`
//     total_wait_time over total_xact_count: how long a run's transaction waited for a server),
//     and a transaction's time on a server: total_xact_time, which PgBouncer counts from the
//     client's first statement and so includes that wait, less total_wait_time, per transaction;
//     with it how busy the 20 server connections were over the measurement.
// Items per measurement: runs × 4 × BENCH_FLEET_SECONDS (default 25; at least 100 per run, as a
// batch wants one run per 100 items). PgBouncer's `server_check_delay` is its default of 30 s
// here (the tests' 0 adds a `select 1`, a server transaction, to nearly every lending). The
// process needs 2 sockets per run: the part checks the open-files limit (`ulimit -n`) first.
// BENCH_FLEET_RUNS=256 measures only those run counts (comma-separated; default 256,1024).
// BENCH_FLEET_TRACE=1 prints, per run count, the statements the runs sent by kind (through
// postgres.js's `debug` hook on each pool), the bench process's CPU time, and how long the
// takeovers took, on stderr.
// Without PgBouncer (`LEASEHOLD_TEST_PGBOUNCER`, default /usr/sbin/pgbouncer) it prints
// `fleet: skipped: …, install …` and the bench goes on.
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Runner, createBatch, getBatch, type Executor, type RunResult } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { startPgbouncer } from '../test/support/pgbouncer.js';
import { installCommand, installed, PGBOUNCER } from '../test/support/programs.js';
import { batchOf, clean } from './runs.js';

const SECONDS = Number(process.env.BENCH_FLEET_SECONDS ?? 25);
const TRACE = process.env.BENCH_FLEET_TRACE === '1';
/** Run counts measured; `BENCH_FLEET_RUNS` (comma-separated) picks some, e.g. `256`. Default 256 and 1,024. */
const RUN_COUNTS = (process.env.BENCH_FLEET_RUNS ?? '256,1024').split(',').map(Number);
const PARALLEL = 4;
const ITEM_MS = 1_000;
/** PgBouncer's server connections (`default_pool_size`). */
const SERVERS = 20;
const SAMPLE_MS = 50;

/** When each item's work ended (performance.now()), for the trace's rate once all runs joined. */
let workEnds: number[] = [];
const executor: Executor = {
  work: () =>
    sleep(ITEM_MS).then(() => {
      workEnds.push(performance.now());
      return null;
    }),
  parallel: PARALLEL,
};
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** What the runs' pools sent, through postgres.js's `debug` hook. */
interface Sent {
  statements: number;
  /** Transactions as the client sees them: each `begin`, and each statement outside one. */
  transactions: number;
  /** Statements by text. */
  kinds: Map<string, number>;
}

/** Count what `pool` sends into `sent`. */
function counted(pool: Sql, sent: Sent): Sql {
  const inTransaction = new Set<unknown>();
  // postgres.js reads `debug` for every statement it sends on this pool (connection id, text).
  (pool.options as { debug?: unknown }).debug = (connection: unknown, text: string) => {
    sent.statements++;
    const head = text.trimStart().slice(0, 8).toLowerCase();
    if (head.startsWith('begin')) {
      inTransaction.add(connection);
      sent.transactions++;
    } else if (head.startsWith('commit') || head.startsWith('rollback')) {
      inTransaction.delete(connection);
    } else if (!inTransaction.has(connection)) {
      sent.transactions++;
    }
    sent.kinds.set(text, (sent.kinds.get(text) ?? 0) + 1);
  };
  return pool;
}

/** A statement's text, short: its start and the tables it writes. */
function kindLabel(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  const writes = new Set(
    [...t.matchAll(/\b(?<!for )(update|insert into|delete from) (\w+)/gi)].map((m) => `${m[1]!.toLowerCase()} ${m[2]}`),
  );
  return `${t.slice(0, 60)}${t.length > 60 ? '…' : ''}${writes.size ? ` [${[...writes].join(', ')}]` : ''}`;
}

/** Lock waits of a database's sessions, sampled. */
interface LockWaits {
  /** Samples of active sessions, and of those waiting on a lock. */
  active: number;
  waiting: number;
  /** Samples that failed (skipped). */
  failed: number;
  /** Each wait seen (by backend and waitstart): the longest it was seen to last, ms, its lock and statement. */
  waits: Map<string, { ms: number; lock: string; statement: string; blocker: string }>;
}

/** One sample: the client sessions of `database`, each with its ungranted lock and blocker, if any. */
function sampleOnce(sql: Sql, database: string) {
  return sql<
    {
      state: string | null;
      wait: string | null;
      lock: string | null;
      ms: number | null;
      statement: string | null;
      blocker: string | null;
    }[]
  >`
      select a.state, left(regexp_replace(a.query, '[[:space:]]+', ' ', 'g'), 60) as statement, a.pid || ' ' || l.waitstart::text as wait,
             l.locktype || coalesce(' ' || l.relation::int8, '') || ' ' || l.mode as lock,
             (extract(epoch from clock_timestamp() - l.waitstart) * 1000)::float8 as ms,
             case when l.pid is not null then (
               select left(regexp_replace(b.query, '[[:space:]]+', ' ', 'g'), 60)
               from pg_stat_activity b where b.pid = (pg_blocking_pids(a.pid))[1] limit 1
             ) end as blocker
      from pg_stat_activity a left join pg_locks l on l.pid = a.pid and not l.granted
      where a.datname = ${database} and a.backend_type = 'client backend'`;
}

/** Sample the lock waits of `database`'s client sessions every SAMPLE_MS until `until` settles. */
async function sampleLocks(sql: Sql, database: string, until: Promise<unknown>): Promise<LockWaits> {
  const s: LockWaits = { active: 0, waiting: 0, failed: 0, waits: new Map() };
  let done = false;
  void until.finally(() => (done = true)).catch(() => {});
  while (!done) {
    const rows = await sampleOnce(sql, database).catch(() => {
      s.failed++;
      return [];
    });
    for (const r of rows) {
      if (r.state !== 'active') continue;
      s.active++;
      if (r.lock === null) continue;
      s.waiting++;
      const key = r.wait ?? r.lock;
      const seen = s.waits.get(key);
      if (!seen || seen.ms < (r.ms ?? 0))
        s.waits.set(key, { ms: r.ms ?? 0, lock: r.lock, statement: r.statement ?? '', blocker: r.blocker ?? '?' });
    }
    await sleep(SAMPLE_MS);
  }
  return s;
}

/** The 95th percentile (nearest rank) of `xs`, or undefined for none. */
function p95(xs: number[]): number | undefined {
  if (xs.length === 0) return undefined;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.ceil(0.95 * sorted.length) - 1];
}

/** Committed and rolled back transactions of `database`, once none of its client sessions is left. */
async function transactions(admin: Sql, database: string): Promise<number> {
  for (let i = 0; ; i++) {
    const [{ n }] = await admin<{ n: number }[]>`
      select count(*) as n from pg_stat_activity where datname = ${database} and backend_type = 'client backend'`;
    if (n === 0) break;
    if (i > 600) throw new Error(`bench fleet: sessions of ${database} still open after 30 s`);
    await sleep(50);
  }
  // A backend leaves pg_stat_activity and reports its counts as it exits: give the last one a moment.
  await sleep(200);
  const [{ x }] = await admin<{ x: number }[]>`
    select xact_commit + xact_rollback as x from pg_stat_database where datname = ${database}`;
  return x;
}

/** One measurement's figures. */
interface Fleet {
  runs: number;
  items: number;
  rate: number;
  transactionsPerItem: number;
  notJoined: number;
  locks: LockWaits;
  /** PgBouncer's average wait of a transaction for a server, ms. */
  poolerWaitMs: number;
  /** A transaction's time on a server, ms (PgBouncer's xact time less its wait). */
  serverMs: number;
  /** PgBouncer's server connections' busy share over the measurement, 0 to 1. */
  serversBusy: number;
  sent: Sent;
  cpuMs: number;
  joinMs: number;
  /** Items/s from the last run's join until 90 % of the items' work had ended (undefined: too late). */
  joinedRate?: number;
  /** When 90 % of the items' work had ended, when the last item's had, and when the batch finished: ms after go. */
  ends: { work90Ms?: number; lastWorkMs: number; finishedMs: number };
}

/** Take over `id` on `runner` until taken or `deadline` (performance.now()) passes. */
async function join(runner: Runner, id: string, deadline: number): Promise<boolean> {
  for (;;) {
    try {
      if (await runner.takeOver(() => executor, id)) return true;
    } catch {
      // A takeover that failed (a lock or store timeout in the crowd) is tried again.
    }
    if (performance.now() > deadline) return false;
    await sleep(20 + Math.random() * 30);
  }
}

/** `runs` runs over one batch on `name` (URL `direct` reaches it without PgBouncer). */
async function fleetOnce(url: string, direct: string, name: string, admin: Sql, runs: number): Promise<Fleet> {
  const items = Math.max(runs * PARALLEL * SECONDS, runs * 100);
  const setup = connect(direct, { max: 2 });
  await clean(setup);
  const { batch } = await createBatch(setup, { ...batchOf(items), maxConcurrency: runs });
  await setup.end();
  const before = await transactions(admin, name);
  const bouncer = await startPgbouncer(url, { poolSize: SERVERS, maxClients: 2 * runs + 100, serverCheckDelayS: 30 });
  const sent: Sent = { statements: 0, transactions: 0, kinds: new Map() };
  const pools = Array.from({ length: runs }, () =>
    counted(connect(bouncer.url(name), { max: 2, pooler: 'transaction', schema: name }), sent),
  );
  let poolsOpen = true;
  try {
    await Promise.all(pools.map((p) => Promise.all([p`select 1`, p`select 1`])));
    const warmUp = sent.statements;
    sent.statements = sent.transactions = 0;
    sent.kinds.clear();
    workEnds = [];
    const runners = pools.map((p) => new Runner(p, { parallel: PARALLEL }));
    const [{ go }] = await admin<{ go: Date }[]>`select clock_timestamp() as go`;
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    let joinMs = 0;
    const ended = Promise.all(
      runners.map(async (r): Promise<RunResult | undefined> => {
        if (!(await join(r, batch.id, t0 + 4 * SECONDS * 1_000))) return undefined;
        joinMs = Math.max(joinMs, performance.now() - t0);
        return r.running(batch.id);
      }),
    );
    const locks = await sampleLocks(admin, name, ended);
    const results = await ended;
    const cpu = process.cpuUsage(cpu0);
    const tJoined = t0 + joinMs;
    const t90 = [...workEnds].sort((a, b) => a - b)[Math.floor(0.9 * items) - 1];
    const joinedRate =
      t90 !== undefined && t90 - tJoined > 2_000
        ? workEnds.filter((t) => t > tJoined && t <= t90).length / ((t90 - tJoined) / 1000)
        : undefined;
    const console_ = (await import('postgres')).default(bouncer.adminUrl, { max: 1, prepare: false, fetch_types: false });
    const elapsedS = (performance.now() - t0) / 1000;
    const stats = await console_.unsafe<
      { database: string; total_xact_count: string; total_wait_time: string; total_xact_time: string }[]
    >('show stats', [], { simple: true } as never);
    await console_.end();
    const mine = stats.find((r) => r.database === name);
    const xacts = Math.max(1, Number(mine?.total_xact_count));
    /** ms the transactions spent on a server, all told. */
    const onServerMs = (Number(mine?.total_xact_time) - Number(mine?.total_wait_time)) / 1000;
    await Promise.all(pools.map((p) => p.end()));
    poolsOpen = false;
    await bouncer.stop();
    const after = await transactions(admin, name);
    const check = connect(direct, { max: 1 });
    const b = await getBatch(check, batch.id);
    await check.end();
    if (b?.status !== 'succeeded' || b.counts.done !== items) {
      const outcomes = new Map<string, number>();
      for (const r of results) {
        const k = r ? `${r.outcome}${r.error ? ` (${r.error.message.slice(0, 120)})` : ''}` : 'never joined';
        outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
      }
      throw new Error(
        `bench fleet: ${runs} runs ended and left the batch ${b?.status} with counts ${JSON.stringify(b?.counts)}; ` +
          `the runs: ${[...outcomes.entries()].map(([k, n]) => `${n} ${k}`).join('; ')}`,
      );
    }
    const seconds = (b.finishedAt!.getTime() - go.getTime()) / 1000;
    return {
      runs,
      items,
      rate: items / seconds,
      transactionsPerItem: (after - before - warmUp) / items,
      notJoined: results.filter((r) => r === undefined).length,
      locks,
      poolerWaitMs: Number(mine?.total_wait_time) / 1000 / xacts,
      serverMs: onServerMs / xacts,
      serversBusy: onServerMs / 1000 / (SERVERS * elapsedS),
      sent,
      cpuMs: (cpu.user + cpu.system) / 1000,
      joinMs,
      joinedRate,
      ends: {
        work90Ms: t90 === undefined ? undefined : t90 - t0,
        lastWorkMs: workEnds.reduce((m, t) => Math.max(m, t), -Infinity) - t0,
        finishedMs: seconds * 1000,
      },
    };
  } finally {
    if (poolsOpen) {
      await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
      await bouncer.stop();
    }
  }
}

/** The open-files limit of this process (Linux), or undefined where it cannot be read. */
function openFilesLimit(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === undefined || soft === 'unlimited' ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

/** `url` naming database `name`. */
function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/** The lock-wait text of one measurement; relation oids named through `names`. */
function lockText(f: Fleet, names: Map<number, string>): string {
  const waits = [...f.locks.waits.values()];
  const share = f.locks.active ? ((100 * f.locks.waiting) / f.locks.active).toFixed(1) : '0';
  const byLock = new Map<string, number>();
  for (const w of waits) {
    const lock = w.lock.replace(/^(\S+) (\d+) /, (_, type: string, oid: string) => `${type} ${names.get(Number(oid)) ?? oid} `);
    byLock.set(lock, (byLock.get(lock) ?? 0) + 1);
  }
  const top = [...byLock.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([lock, n]) => `${lock} ×${n}`)
    .join(', ');
  const p = p95(waits.map((w) => w.ms));
  return (
    `${fmt(f.runs)} runs ${p === undefined ? 'no wait seen' : `p95 ${fmt(p)} ms over ${fmt(waits.length)} waits seen`}, ` +
    `${share} % of active-session samples waiting${top ? ` (${top})` : ''}, PgBouncer wait ${fmt(f.poolerWaitMs)} ms and ${fmt(f.serverMs)} ms on a server per transaction (its ${SERVERS} servers ${Math.round(100 * f.serversBusy)} % busy)` +
    (f.notJoined ? `, ${f.notJoined} runs never joined` : '')
  );
}

/** The trace of one measurement, on stderr. */
function trace(f: Fleet): void {
  const kinds = [...f.sent.kinds.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([text, n]) => `  ${(n / f.items).toFixed(4)}/item  ${kindLabel(text)}`)
    .join('\n');
  const byStatement = new Map<string, number>();
  for (const w of f.locks.waits.values()) {
    const k = `${w.statement} ← ${w.blocker}`;
    byStatement.set(k, (byStatement.get(k) ?? 0) + 1);
  }
  const waiters = [...byStatement.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([text, n]) => `  ${n}  ${text}`)
    .join('\n');
  const joined =
    f.joinedRate === undefined
      ? ''
      : ` (then ${fmt(f.joinedRate)} items/s, ${Math.round((100 * f.joinedRate) / (PARALLEL * f.runs))} % of linear, until 90 % of the items' work had ended)`;
  const ends =
    `90 % of the items' work ended ${f.ends.work90Ms === undefined ? '?' : fmt(f.ends.work90Ms)} ms after go, ` +
    `the last item's ${fmt(f.ends.lastWorkMs)} ms, the batch finished ${fmt(f.ends.finishedMs)} ms (linear: ${fmt((1000 * f.items) / (PARALLEL * f.runs))} ms)`;
  console.error(
    `fleet, ${f.runs} runs: ${fmt(f.items)} items; all joined ${fmt(f.joinMs)} ms after go${joined}; ${ends}; ` +
      `${(f.sent.statements / f.items).toFixed(3)} statements and ${(f.sent.transactions / f.items).toFixed(3)} client transactions per item; ` +
      `bench process CPU ${fmt(f.cpuMs)} ms (${((1000 * f.cpuMs) / f.items).toFixed(0)} µs per item); lock samples failed: ${f.locks.failed}; statements by kind:\n${kinds}\nlock waits seen, by the waiting statement ← the first blocking session's:\n${waiters}`,
  );
}

/** Print the fleet lines (see the top of this file) on the server of `url` (its user may create databases). */
export async function fleetBench(url: string): Promise<void> {
  if (!installed(PGBOUNCER)) {
    console.log(
      `fleet: skipped: no PgBouncer at ${PGBOUNCER.path} (${PGBOUNCER.env}), install it: ${installCommand([PGBOUNCER.package])}`,
    );
    return;
  }
  const sockets = 2 * Math.max(...RUN_COUNTS) + 256;
  const limit = openFilesLimit();
  if (limit !== undefined && limit < sockets) {
    throw new Error(
      `bench fleet: ${sockets} open files needed (2 sockets per run), ulimit -n is ${limit}: raise it (ulimit -n ${sockets})`,
    );
  }
  const name = `bench_fleet_${Date.now()}`;
  const admin = connect(url, { max: 2 });
  await admin.unsafe(`create database "${name}"`);
  const direct = withDatabase(url, name);
  try {
    const setup = connect(direct, { max: 1, schema: name });
    await setup.unsafe(`create schema "${name}"`);
    for (const s of [
      `search_path = "${name}"`,
      "statement_timeout = '30000'",
      "lock_timeout = '2000'",
      "idle_in_transaction_session_timeout = '10000'",
    ]) {
      await setup.unsafe(`alter database "${name}" set ${s}`);
    }
    await migrate(setup);
    const tables = await setup<{ oid: number; relname: string }[]>`
      select oid::int8 as oid, relname from pg_class where relnamespace = ${name}::regnamespace`;
    await setup.end();
    const names = new Map(tables.map((t) => [t.oid, t.relname]));
    const figures: Fleet[] = [];
    for (const runs of RUN_COUNTS) {
      const f = await fleetOnce(url, direct, name, admin, runs);
      figures.push(f);
      if (TRACE) trace(f);
    }
    const at = (f: Fleet) =>
      `${fmt(f.runs)} runs ${fmt(f.rate)}/s (${Math.round((100 * f.rate) / (PARALLEL * f.runs))} % of linear), ` +
      `${f.transactionsPerItem.toFixed(2)} transactions per item`;
    console.log(`fleet scale through PgBouncer, 1 s items, parallel ${PARALLEL}: ${figures.map(at).join('; ')}`);
    console.log(
      `fleet scale, lock waits of the runs' server sessions (pg_locks every ${SAMPLE_MS} ms): ${figures.map((f) => lockText(f, names)).join('; ')}; ` +
        `goals: 256 runs ≥ 90 %, 1,024 runs ≥ 80 % of linear, ≤ 0.5 transactions per item at 256 runs, lock wait p95 ≤ 100 ms`,
    );
  } finally {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
  }
}
