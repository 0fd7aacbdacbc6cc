// Through a transaction-mode pooler (part of `npm run bench`; `BENCH_ONLY=pooler` runs only this):
// the batch runner's throughput on one database reached three ways, in turn in every round —
// directly with the default pool, directly with a pool in pooler mode (`pooler: 'transaction'`:
// no named prepared statements, settings set in each transaction), and through Debian's PgBouncer
// in transaction mode (test/support/pgbouncer.ts, started here on a free port) with that pool.
// Figures: one run, parallel 64, over BENCH_ITEMS no-op items (default 20,000), and four runs at
// once, each with its own pool and batch; medians of BENCH_ROUNDS rounds (default 3), each side's
// ratio to the direct default. Issue 18's goal: PgBouncer within 20 % of direct.
// The database is a fresh one of its own (`bench_pooler_<now>`, dropped after) whose defaults hold
// the schema and the runtime roles' timeouts, as a pooled session needs (test/support/db.ts).
// Without PgBouncer (`LEASEHOLD_TEST_PGBOUNCER`, default /usr/sbin/pgbouncer) the part prints
// `pooler: skipped: …, install …` and the bench goes on.
import { Runner, createBatch, type Executor } from '../src/batch/index.js';
import { connect, migrate, type ConnectOptions, type Sql } from '../src/store/index.js';
import { startPgbouncer } from '../test/support/pgbouncer.js';
import { installCommand, installed, PGBOUNCER } from '../test/support/programs.js';
import { batchOf, clean } from './runs.js';
import { median } from './sides.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const noop: Executor = { work: async () => null, parallel: 64 };

/** One way to reach the bench's database. */
interface Way {
  name: string;
  open(max: number): Sql;
}

/** `url` naming database `name`. */
function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/** One batch of `n` no-op items run by one runner on its own pool: items/s and statements per item. */
async function oneRun(way: Way, n: number): Promise<{ rate: number; perItem: number }> {
  const pool = way.open(4);
  let statements = 0;
  (pool.options as { debug?: unknown }).debug = () => void statements++;
  try {
    const { batch } = await createBatch(pool, batchOf(n));
    statements = 0;
    const runner = new Runner(pool, { parallel: 64 });
    const t1 = performance.now();
    await runner.takeOver(() => noop, batch.id);
    const result = await runner.running(batch.id)!;
    const t2 = performance.now();
    if (result.outcome !== 'succeeded' || result.finishedItems !== n) throw new Error(`bench run ended ${result.outcome}`);
    return { rate: n / ((t2 - t1) / 1000), perItem: statements / n };
  } finally {
    await pool.end();
  }
}

/** Four runners at once, each with its own pool and batch of `n` items: items/s of them all. */
async function fourRuns(way: Way, n: number): Promise<number> {
  const pools = Array.from({ length: 4 }, () => way.open(4));
  try {
    const batches = await Promise.all(pools.map((p) => createBatch(p, batchOf(n)).then((r) => r.batch.id)));
    const runners = pools.map((p) => new Runner(p, { parallel: 64 }));
    const t1 = performance.now();
    await Promise.all(runners.map((r, i) => r.takeOver(() => noop, batches[i]!)));
    const results = await Promise.all(runners.map((r, i) => r.running(batches[i]!)!));
    const t2 = performance.now();
    for (const r of results) if (r.outcome !== 'succeeded') throw new Error(`bench run ended ${r.outcome}`);
    return (4 * n) / ((t2 - t1) / 1000);
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}

const fmt = (n: number) => Math.round(n).toString();

/** The pooler figures on the server of `url` (its user may create databases). */
export async function poolerBench(url: string): Promise<void> {
  if (!installed(PGBOUNCER)) {
    console.log(
      `pooler: skipped: no PgBouncer at ${PGBOUNCER.path} (${PGBOUNCER.env}), install it: ${installCommand([PGBOUNCER.package])}`,
    );
    return;
  }
  const name = `bench_pooler_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create database "${name}"`);
  const bouncer = await startPgbouncer(url, { poolSize: 20 });
  const direct = withDatabase(url, name);
  const base: ConnectOptions = { schema: name };
  const ways: Way[] = [
    { name: 'direct', open: (max) => connect(direct, { ...base, max }) },
    { name: 'direct, pooler mode', open: (max) => connect(direct, { ...base, max, pooler: 'transaction' }) },
    { name: 'PgBouncer', open: (max) => connect(bouncer.url(name), { ...base, max, pooler: 'transaction' }) },
  ];
  const setup = connect(direct, { max: 1 });
  try {
    await setup.unsafe(`create schema "${name}"`);
    for (const s of [
      `search_path = "${name}"`,
      "statement_timeout = '30000'",
      "lock_timeout = '2000'",
      "idle_in_transaction_session_timeout = '10000'",
    ]) {
      await setup.unsafe(`alter database "${name}" set ${s}`);
    }
    const sql = ways[0]!.open(2);
    await migrate(sql);
    const [{ version }] = await sql<{ version: string }[]>`select current_setting('server_version') as version`;
    console.log(
      `pooler: PostgreSQL ${version}, PgBouncer in transaction mode (pool size 20); ${ITEMS} no-op items per batch; ${ROUNDS} rounds; medians`,
    );
    const one = new Map(ways.map((w) => [w.name, [] as number[]]));
    const perItem = new Map(ways.map((w) => [w.name, [] as number[]]));
    const four = new Map(ways.map((w) => [w.name, [] as number[]]));
    for (let i = 0; i < ROUNDS; i++) {
      // Each way first in turn, so a drift of the machine's load favours none of them.
      const order = ways.map((_, k) => ways[(k + i) % ways.length]!);
      for (const w of order) {
        await clean(sql);
        const r = await oneRun(w, ITEMS);
        one.get(w.name)!.push(r.rate);
        perItem.get(w.name)!.push(r.perItem);
      }
      for (const w of order) {
        await clean(sql);
        four.get(w.name)!.push(await fourRuns(w, ITEMS));
      }
    }
    await clean(sql);
    await sql.end();
    const line = (title: string, rates: Map<string, number[]>) => {
      const ref = median(rates.get('direct')!);
      return `${title}: ${ways
        .map((w) => {
          const m = median(rates.get(w.name)!);
          return `${w.name} ${fmt(m)} items/s${w.name === 'direct' ? '' : ` (${((100 * m) / ref).toFixed(0)} % of direct)`}`;
        })
        .join('; ')}`;
    };
    console.log(line('pooler, one run, parallel 64', one));
    console.log(line('pooler, 4 concurrent runs, parallel 64 each', four));
    console.log(
      `pooler, statements per item, one run: ${ways.map((w) => `${w.name} ${median(perItem.get(w.name)!).toFixed(3)}`).join('; ')}`,
    );
    const console_ = (await import('postgres')).default(bouncer.adminUrl, { max: 1, prepare: false, fetch_types: false });
    const stats = await console_.unsafe<{ database: string; total_xact_count: string; total_query_count: string }[]>(
      'show stats',
      [],
      { simple: true } as never,
    );
    const mine = stats.find((r) => r.database === name);
    console.log(
      `pooler, PgBouncer's SHOW STATS for the bench database: ${mine?.total_xact_count} transactions, ${mine?.total_query_count} statements`,
    );
    await console_.end();
  } finally {
    await setup.end();
    await bouncer.stop();
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
  }
}
