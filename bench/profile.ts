// `npm run bench:profile`: where one no-op run's time goes, per item (docs/development.md, "Where
// an item's time goes"). One run, parallel 64, over PROFILE_ITEMS no-op items (default 50,000) on
// an embedded PostgreSQL of its own (so that nothing else writes WAL or takes locks on it) with
// `pg_stat_statements` loaded, after PROFILE_HISTORY finished items of history (default 500,000;
// 0 for a fresh database). Prints, per item:
//   - the run: items/s, Node CPU (user + system) ms, statements the run's pool sent;
//   - the server: WAL bytes, and WAL records by type (pg_walinspect); row versions written per
//     table (HOT and not), index entries written (inserted rows and non-HOT updates, times the
//     table's indexes); the pages the items table grew by; and the statements by total execution
//     time (calls, plans, rows, mean ms executing, mean ms per plan, WAL bytes);
//   - wait events of the run's backends, sampled every 5 ms;
//   - with PROFILE_CPU=1, the Node CPU profile's functions by self time (node --cpu-prof's format);
//   - with PROFILE_EXPLAIN=<file>, the plans of one statement in 20 with their actual times and
//     buffers (auto_explain), written to that file from the server's log;
//   - with PROFILE_FILLFACTOR=<10-100>, the items table at that fillfactor (set before the history
//     and the batch are written; 100 is the table before migration 035), to compare.
// DATABASE_URL is ignored: a shared server's WAL and statistics would mix in other work.
import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Runner, createBatch, type Executor } from '../src/batch/index.js';
import { startEmbedded } from '../src/local/embedded/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { loadHistory } from '../test/support/history.js';

const ITEMS = Number(process.env.PROFILE_ITEMS ?? 50_000);
const HISTORY = Number(process.env.PROFILE_HISTORY ?? 500_000);
const EXPLAIN = process.env.PROFILE_EXPLAIN;
const FILLFACTOR = process.env.PROFILE_FILLFACTOR === undefined ? undefined : Number(process.env.PROFILE_FILLFACTOR);
const noop: Executor = { work: async () => null, parallel: 64 };

interface TableStats {
  relname: string;
  ins: number;
  upd: number;
  hot: number;
  del: number;
  indexes: number;
}

async function tableStats(sql: Sql): Promise<Map<string, TableStats>> {
  const rows = await sql<TableStats[]>`
    select t.relname, t.n_tup_ins::float8 as ins, t.n_tup_upd::float8 as upd, t.n_tup_hot_upd::float8 as hot,
           t.n_tup_del::float8 as del,
           (select count(*) from pg_index i where i.indrelid = t.relid)::int as indexes
    from pg_stat_user_tables t where t.relname like 'leasehold_%'`;
  return new Map(rows.map((r) => [r.relname, r]));
}

/** Set the items table's fillfactor (10 to 100), for pages written from now on. */
async function setItemsFillfactor(sql: Sql, fillfactor: number): Promise<void> {
  if (!Number.isInteger(fillfactor) || fillfactor < 10 || fillfactor > 100)
    throw new Error(`PROFILE_FILLFACTOR must be an integer from 10 to 100, got ${fillfactor}`);
  // A storage parameter takes no bind parameter: the checked integer goes in as it is.
  await sql`alter table leasehold_items set (fillfactor = ${sql.unsafe(String(fillfactor))})`;
}

/** The pages of leasehold_items' heap (its size / 8 kB): a run's new row versions that found no room on their page extend it. */
async function itemPages(sql: Sql): Promise<number> {
  const [{ pages }] = await sql<{ pages: number }[]>`select pg_relation_size('leasehold_items')::float8 / 8192 as pages`;
  return pages;
}

/** Sample the wait events of the other backends of this database every 5 ms until `done`. */
function sampleWaits(sql: Sql, done: () => boolean): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  return (async () => {
    while (!done()) {
      const rows = await sql<{ w: string }[]>`
        select coalesce(wait_event_type || ':' || wait_event, 'CPU (no wait)') as w
        from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() and state = 'active'`;
      for (const { w } of rows) seen.set(w, (seen.get(w) ?? 0) + 1);
      seen.set('(samples)', (seen.get('(samples)') ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 5));
    }
    return seen;
  })();
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

/** The CPU profile's functions by self time, the top `n`, with their share of all samples. */
function selfTime(profile: { nodes: ProfileNode[] }, n: number): string[] {
  const by = new Map<string, number>();
  let total = 0;
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0;
    total += hits;
    const { functionName, url, lineNumber } = node.callFrame;
    const where = url.replace(/^.*\/(node_modules\/|src\/)/, '$1');
    const name = `${functionName || '(anonymous)'} ${where}:${lineNumber + 1}`;
    by.set(name, (by.get(name) ?? 0) + hits);
  }
  return [...by.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([name, hits]) => `${((100 * hits) / total).toFixed(1).padStart(5)} %  ${name}`);
}

const f = (x: number, d = 2) => x.toFixed(d);

async function main() {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-profile-'));
  const db = await startEmbedded({
    dir: join(dir, 'pgdata'),
    port: 0,
    // PROFILE_SYNC=off: commits do not wait for the disk (as the CI's PostgreSQL 15 database).
    settings: {
      shared_preload_libraries: 'pg_stat_statements',
      'pg_stat_statements.track': 'all',
      'pg_stat_statements.track_planning': 'on',
      synchronous_commit: process.env.PROFILE_SYNC ?? 'on',
      ...(EXPLAIN && {
        session_preload_libraries: 'auto_explain',
        'auto_explain.log_min_duration': 0,
        'auto_explain.log_analyze': 'on',
        'auto_explain.log_buffers': 'on',
        'auto_explain.log_nested_statements': 'on',
        'auto_explain.sample_rate': 0.05,
      }),
    },
    log: EXPLAIN ? (line) => appendFileSync(EXPLAIN, `${line}\n`) : undefined,
  });
  let admin = connect(db.url, { max: 2 });
  const pool = connect(db.url, { max: 4 });
  try {
    await migrate(admin);
    await admin`create extension if not exists pg_stat_statements`;
    await admin`create extension if not exists pg_walinspect`;
    // PROFILE_FILLFACTOR=100: the items table as before migration 035 (pages packed full), to compare.
    if (FILLFACTOR !== undefined) await setItemsFillfactor(admin, FILLFACTOR);
    if (HISTORY > 0) {
      await loadHistory(admin, {
        items: HISTORY,
        batches: Math.max(1, Math.round(HISTORY / 20_000)),
        tenants: 10,
        units: 1_000,
        outbox: 0,
      });
    }
    await admin`vacuum analyze`;
    const items = Array.from({ length: ITEMS }, (_, i) => ({ key: String(i).padStart(7, '0') }));
    const { batch } = await createBatch(admin, {
      tenant: 'bench',
      datasource: randomUUID(),
      job: 'noop',
      params: {},
      requestKey: randomUUID(),
      items,
    });
    await admin`vacuum analyze`;
    // The start's own row versions are not the run's: its backends report them when they end.
    await admin.end();
    admin = connect(db.url, { max: 2 });
    let statements = 0;
    (pool.options as { debug?: unknown }).debug = () => void statements++;
    const before = await tableStats(admin);
    const pages0 = await itemPages(admin);
    const [{ lsn: lsn0 }] = await admin<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
    await admin`select pg_stat_statements_reset()`;
    const cpu = process.env.PROFILE_CPU === '1' ? new Session() : undefined;
    if (cpu) {
      cpu.connect();
      await cpu.post('Profiler.enable');
      await cpu.post('Profiler.start');
    }
    let finished = false;
    const waits = sampleWaits(admin, () => finished);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const runner = new Runner(pool, { parallel: 64 });
    await runner.takeOver(() => noop, batch.id);
    const result = await runner.running(batch.id)!;
    const ms = performance.now() - t0;
    const used = process.cpuUsage(cpu0);
    finished = true;
    const profile = cpu ? ((await cpu.post('Profiler.stop')) as { profile: { nodes: ProfileNode[] } }).profile : undefined;
    if (result.outcome !== 'succeeded') throw new Error(`profiled run ended ${result.outcome}`);
    const seen = await waits;
    // A backend reports its table statistics when it ends (or when idle, at most every 10 s).
    await pool.end();
    await new Promise((r) => setTimeout(r, 200));
    const [{ wal }] = await admin<
      { wal: number }[]
    >`select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn0}::pg_lsn)::float8 as wal`;
    const after = await tableStats(admin);
    const records = await admin<{ type: string; n: number; bytes: number }[]>`
      select "resource_manager/record_type" as type, count::float8 as n, combined_size::float8 as bytes
      from pg_get_wal_stats(${lsn0}::pg_lsn, pg_current_wal_flush_lsn(), true)
      where count > 0 order by combined_size desc limit 8`;
    const pages1 = await itemPages(admin);
    const top = await admin<
      {
        query: string;
        calls: number;
        plans: number;
        rows: number;
        total: number;
        mean: number;
        plan: number;
        planTotal: number;
        wal: number;
      }[]
    >`
      select query, calls::float8 as calls, plans::float8 as plans, rows::float8 as rows, total_exec_time as total, mean_exec_time as mean,
             mean_plan_time as plan, total_plan_time as "planTotal", wal_bytes::float8 as wal
      from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
      order by total_exec_time desc limit 12`;
    const serverMs = top.reduce((s, r) => s + r.total, 0);
    const planMs = top.reduce((s, r) => s + r.planTotal, 0);

    console.log(
      `PostgreSQL (embedded), ${ITEMS.toLocaleString('en-US')} no-op items, one run, parallel 64; history ${HISTORY.toLocaleString('en-US')} items`,
    );
    console.log(
      `run: ${Math.round(ITEMS / (ms / 1000)).toLocaleString('en-US')} items/s; per item: ${f((1000 * ms) / ITEMS, 1)} µs wall, ` +
        `${f((used.user + used.system) / ITEMS, 1)} µs Node CPU, ${f(statements / ITEMS, 3)} statements`,
    );
    console.log(
      `server per item: ${f(wal / ITEMS, 0)} WAL bytes; ${f((1000 * serverMs) / ITEMS, 1)} µs execution and ` +
        `${f((1000 * planMs) / ITEMS, 1)} µs planning (${f((100 * planMs) / (planMs + serverMs), 1)} % of the two) in the top statements`,
    );
    console.log(
      'row versions per item (inserted, updated HOT, updated non-HOT, deleted; at most this many index entries written):',
    );
    for (const [name, a] of after) {
      const b = before.get(name);
      if (!b) continue;
      const ins = a.ins - b.ins;
      const hot = a.hot - b.hot;
      const nonHot = a.upd - b.upd - hot;
      const del = a.del - b.del;
      if (ins + hot + nonHot + del === 0) continue;
      // An upper bound: a partial index takes only the row versions that match its predicate.
      const entries = (ins + nonHot) * a.indexes;
      console.log(
        `  ${name.padEnd(28)} ${f(ins / ITEMS, 3)} ins, ${f(hot / ITEMS, 3)} HOT, ${f(nonHot / ITEMS, 3)} non-HOT, ${f(del / ITEMS, 3)} del; ${f(entries / ITEMS, 3)} index entries (${a.indexes} indexes)`,
      );
    }
    console.log('WAL records per item by type (records, bytes with full-page images):');
    for (const r of records) console.log(`  ${f(r.n / ITEMS, 3).padStart(6)} ${f(r.bytes / ITEMS, 0).padStart(5)} B  ${r.type}`);
    console.log(
      `leasehold_items pages: ${pages0.toLocaleString('en-US')} before the run, ${pages1.toLocaleString('en-US')} after it (${f((8192 * (pages1 - pages0)) / ITEMS, 0)} bytes grown per item)`,
    );
    console.log(
      'statements by execution time (calls, plans, rows, mean ms executing, mean ms per plan, share, WAL bytes per item):',
    );
    for (const r of top) {
      const text = r.query.replace(/\s+/g, ' ').slice(0, 110);
      console.log(
        `  ${String(r.calls).padStart(6)} calls ${String(r.plans).padStart(6)} plans ${String(r.rows).padStart(7)} rows ${f(r.mean, 3).padStart(7)} ms ${f(r.plan, 3).padStart(6)} ms ${f((100 * r.total) / serverMs, 1).padStart(5)} %  ${f(r.wal / ITEMS, 0).padStart(5)} B  ${text}`,
      );
    }
    const samples = seen.get('(samples)') ?? 1;
    seen.delete('(samples)');
    console.log(`wait events of the run's active backends (${samples} samples, share of samples):`);
    for (const [w, n] of [...seen.entries()].sort((a, b) => b[1] - a[1]).slice(0, 8))
      console.log(`  ${f((100 * n) / samples, 1).padStart(5)} %  ${w}`);
    if (profile) {
      console.log('Node CPU profile, functions by self time:');
      for (const line of selfTime(profile, 25)) console.log(`  ${line}`);
    }
  } finally {
    await pool.end();
    await admin.end();
    await db.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
