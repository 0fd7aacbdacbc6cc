// Planning against execution of the statements a run sends in pooler mode (`npm run
// bench:pooler-plans`; docs/development.md, "Where an item's time goes"). Behind a
// transaction-mode pooler no named prepared statement is made (docs/design.md, "Database
// connections"), so the server parses and plans every statement anew. This runs a batch of
// PLANS_ITEMS (default 2,000) items that each await a 5 ms timer, worked by 8 runs at parallel 4
// through one pool in pooler mode (direct to the server: what it measures is the server's work
// per statement, not a pooler's queue), in a database of its own (dropped after), captures every
// statement with its parameters (postgres.js's `debug` hook), then runs a sample of each of the
// six most frequent kinds 11 times under EXPLAIN (ANALYZE, SUMMARY) in a transaction rolled back,
// each on one session, and prints per kind: statements per item, the median planning and
// execution times, ms. The move + claim is a call of `leasehold_step` (migration 043): the
// planning of the statement inside falls in the call's execution time, and a session plans it
// anew for its first five calls only (as a prepared statement), so the median of 11 is a call
// as a session that served many shows it.
// DATABASE_URL: the server (default postgres://postgres@127.0.0.1:5432/test).
import { Runner, type ItemWork } from '../src/batch/index.js';
import { connect, migrate } from '../src/store/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const ITEMS = Number(process.env.PLANS_ITEMS ?? 2_000);
const RUNS = 8;
const SAMPLES = 11;

/** Ends the EXPLAIN's transaction without keeping what the statement wrote. */
class RolledBack extends Error {}

const name = `bench_plans_${Date.now()}`;
const admin = connect(url, { max: 1 });
await admin.unsafe(`create database "${name}"`);
const dbUrl = new URL(url);
dbUrl.pathname = `/${name}`;
try {
  const setup = connect(dbUrl.href, { max: 1 });
  await migrate(setup);
  await setup.end();

  const captured: { text: string; params: unknown[] }[] = [];
  const pool = connect(dbUrl.href, { max: 2, pooler: 'transaction' });
  (pool.options as { debug?: unknown }).debug = (_connection: unknown, text: string, params: unknown[]) =>
    captured.push({ text, params });
  const work: ItemWork = async () => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    return 1;
  };
  const runners = Array.from({ length: RUNS }, () => new Runner(pool, { parallel: 4 }));
  const items = Array.from({ length: ITEMS }, (_, i) => ({ key: `k${i}` }));
  const { batch } = await runners[0]!.start(
    { tenant: 'bench', datasource: 'plans', job: 'noop', params: {}, requestKey: name, items },
    {},
    { work },
  );
  await Promise.all(runners.slice(1).map((r) => r.takeOver(() => ({ work }), batch.id)));
  await Promise.all(runners.map((r) => r.running(batch.id)).filter((p) => p !== undefined));
  await pool.end();

  const kinds = new Map<string, { text: string; params: unknown[] }[]>();
  for (const c of captured) {
    const kind = c.text.replace(/\s+/g, ' ').trim().slice(0, 60);
    // Transaction control and the pooler's settings are not planned.
    if (/^(begin|commit|rollback|select set_config)/i.test(kind)) continue;
    kinds.set(kind, [...(kinds.get(kind) ?? []), c]);
  }
  const direct = connect(dbUrl.href, { max: 1 });
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`pooler mode, ${RUNS} runs × parallel 4, ${ITEMS} items of 5 ms: ${captured.length} statements sent`);
  for (const [kind, list] of [...kinds].sort((a, b) => b[1].length - a[1].length).slice(0, 6)) {
    const sample = list[Math.floor(list.length / 2)]!;
    const plan: number[] = [];
    const execution: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      await direct
        .begin(async (tx) => {
          const [row] = await tx.unsafe(`explain (analyze, summary, format json) ${sample.text}`, sample.params as never[]);
          const [out] = (row as unknown as { 'QUERY PLAN': { 'Planning Time': number; 'Execution Time': number }[] })[
            'QUERY PLAN'
          ];
          plan.push(out!['Planning Time']);
          execution.push(out!['Execution Time']);
          throw new RolledBack();
        })
        .catch((e: unknown) => {
          if (!(e instanceof RolledBack)) throw e;
        });
    }
    const p = median(plan);
    const x = median(execution);
    console.log(
      `  ${(list.length / ITEMS).toFixed(4)}/item  planning ${p.toFixed(3)} ms, execution ${x.toFixed(3)} ms ` +
        `(planning ${Math.round((100 * p) / (p + x))} %)  ${kind}`,
    );
  }
  await direct.end();
} finally {
  await admin.unsafe(`drop database if exists "${name}" with (force)`);
  await admin.end();
}
