// Where a bulk cancel's time goes (`npm run bench:bulk-stats`; not part of `npm run bench`;
// docs/development.md, "Benchmarks"): load-insensitive figures of cancel actions over
// BENCH_BULK_BATCHES open batches of one item (default 2,000; half in each phase), on an embedded
// PostgreSQL of its own with pg_stat_statements loaded (DATABASE_URL is ignored: a shared
// server's statistics would mix in other work):
//   1. one action alone over half of them: statements sent per cancelled batch, statements run
//      inside them (triggers, foreign-key checks), server transactions per cancelled batch
//      (pg_stat_database, rolled back ones included), and the statements by total time;
//   2. one action over the other half while a batch of BENCH_ITEMS no-op items of another tenant
//      runs round after round: the run's backends' lock waits (pg_stat_activity every 10 ms).
import { Runner, createBatch, startAction, workAction, type Executor } from '../src/batch/index.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbedded } from '../src/local/embedded/index.js';
import { connect } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const BULK_BATCHES = Number(process.env.BENCH_BULK_BATCHES ?? 2_000);
const ITEMS = Number(process.env.BENCH_ITEMS ?? 5_000);
const noop: Executor = { work: async () => null, parallel: 64 };

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bulk-stats-'));
  const db = await startEmbedded({
    dir: join(dir, 'pgdata'),
    port: 0,
    settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all', synchronous_commit: 'off' },
  });
  const url = db.url;
  const admin = connect(url, { max: 1 });
  await admin`create extension if not exists pg_stat_statements`;
  await admin.end();
  try {
    await measure(url);
  } finally {
    await db.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

async function measure(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bulk_stats', 8);
  const run = connect(url, { max: 4, schema, applicationName: 'bench-bulk-run' });
  try {
    let next = 0;
    const lane = async () => {
      while (next < BULK_BATCHES) {
        next++;
        await createBatch(sql, { ...batchOf(1), tenant: 'bulk' }, { maxOpen: 1_000_000 });
      }
    };
    await Promise.all(Array.from({ length: 8 }, lane));
    await sql`update leasehold_batches set tenant = 'bulk-b' where tenant = 'bulk' and id in
      (select id from leasehold_batches where tenant = 'bulk' order by id limit ${Math.floor(BULK_BATCHES / 2)})`;
    await sql`update leasehold_tenants t set open = c.n from (select tenant, count(*)::int as n from leasehold_batches
      where status = 'open' group by tenant) c where t.tenant = c.tenant`;
    await sql`insert into leasehold_tenants (tenant, open) select 'bulk-b', count(*) from leasehold_batches where tenant = 'bulk-b'
      on conflict (tenant) do update set open = excluded.open`;
    await sql`analyze`;
    const dbid = sql`(select oid from pg_database where datname = current_database())`;
    const cancel = async (tenant: string) => {
      // A pool of its own, ended after: a backend's statistics reach pg_stat_database when it ends.
      const actions = connect(url, { max: 4, schema, applicationName: 'bench-bulk-action' });
      const t0 = performance.now();
      const { action } = await startAction(actions, {
        requestKey: `stats-${schema}-${tenant}`,
        action: 'cancel',
        filter: { tenant },
      });
      while (!(await workAction(actions, action.id)).finished) await new Promise((r) => setTimeout(r, 100));
      const ms = performance.now() - t0;
      await actions.end();
      const [a] = await sql<
        { done: number; skipped: number }[]
      >`select done, skipped from leasehold_actions where id = ${action.id}`;
      return { ms, ...a };
    };

    // 1. The action alone: its statements and transactions.
    await sql`select public.pg_stat_statements_reset()`;
    const xacts = () =>
      sql<
        { n: number }[]
      >`select (xact_commit + xact_rollback)::int as n from pg_stat_database where datname = current_database()`;
    const [x0] = await xacts();
    const alone = await cancel('bulk');
    await new Promise((r) => setTimeout(r, 500));
    const [x1] = await xacts();
    const stmts = await sql<{ query: string; calls: number; ms: number; rows: number; top: boolean }[]>`
      select left(regexp_replace(query, '\\s+', ' ', 'g'), 120) as query, calls::int, round(total_exec_time)::float8 as ms, rows::int,
        toplevel as top
      from public.pg_stat_statements where dbid = ${dbid} and query not ilike '%pg_stat_statements%'
      order by total_exec_time desc`;
    const calls = (f: (q: string) => boolean, top = true) =>
      stmts.filter((s) => s.top === top && f(s.query.toLowerCase())).reduce((n, s) => n + s.calls, 0);
    const all = calls(() => true);
    const txn = calls((q) => q === 'begin' || q === 'commit' || q === 'rollback');
    const nested = calls(() => true, false);
    console.log(`alone: cancelled ${alone.done} (skipped ${alone.skipped}) in ${(alone.ms / 1000).toFixed(1)} s`);
    console.log(
      `statements sent ${all} (${(all / alone.done).toFixed(2)} per batch; ${((all - txn) / alone.done).toFixed(2)} without begin/commit), ` +
        `run inside them (triggers, foreign keys) ${nested} (${(nested / alone.done).toFixed(2)} per batch), ` +
        `server transactions ${x1.n - x0.n} (${((x1.n - x0.n) / alone.done).toFixed(3)} per batch)`,
    );
    for (const s of stmts.slice(0, 20))
      console.log(
        `${s.top ? ' ' : '>'}${String(s.calls).padStart(7)} calls ${String(s.ms).padStart(7)} ms ${String(s.rows).padStart(7)} rows  ${s.query}`,
      );

    // 2. The action while a batch of another tenant runs: the run's lock waits.
    let going = true;
    const waits = new Map<string, number>();
    let samples = 0;
    let runSamples = 0;
    const sampler = (async () => {
      while (going) {
        const rows = await sql<{ wait: string | null }[]>`
          select a.wait_event_type || ':' || a.wait_event as wait
          from pg_stat_activity a where a.application_name = 'bench-bulk-run' and a.state = 'active'`;
        samples++;
        runSamples += rows.length;
        for (const r of rows) if (r.wait?.startsWith('Lock')) waits.set(r.wait, (waits.get(r.wait) ?? 0) + 1);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const runner = (async () => {
      let rounds = 0;
      while (going) {
        const { batch } = await createBatch(run, batchOf(ITEMS));
        const r = new Runner(run, { parallel: noop.parallel });
        await r.takeOver(() => noop, batch.id);
        await r.running(batch.id);
        rounds++;
      }
      return rounds;
    })();
    await new Promise((r) => setTimeout(r, 500));
    const during = await cancel('bulk-b');
    going = false;
    const rounds = await runner;
    await sampler;
    console.log(
      `with a run going: cancelled ${during.done} (skipped ${during.skipped}) in ${(during.ms / 1000).toFixed(1)} s; run rounds ${rounds}`,
    );
    console.log(
      `run's active statements sampled ${runSamples} times in ${samples} samples; lock waits among them: ${JSON.stringify(Object.fromEntries(waits))}`,
    );
  } finally {
    await run.end();
    await drop();
  }
}

await main();
