// Bulk action benchmark (`BENCH_ONLY=bulk`; docs/design.md, "Bulk actions"): how long does one
// action take to cancel 5,000 open batches, and does it slow a running batch meanwhile?
//   1. in a schema of its own, BULK_BATCHES open batches of one item each (tenant `bulk`, started
//      through createBatch, 8 at a time);
//   2. one run, parallel 64, over ITEMS no-op items (as bench/runs.ts's one run) in tenant
//      `bench`: items/s from takeover to finish, ROUNDS times alone;
//   3. the action: startAction + workAction with the defaults (chunks of 100, 4 at a time, as
//      `POST /actions` works it; BENCH_BULK_PARALLEL changes the 4) in a pool of its own (as many
//      connections); meanwhile the same run,
//      round after round; a round counts only if the action was still going when it finished;
//   4. ROUNDS more rounds alone.
// The figure compares the median during the action with the median of the rounds alone.
import { Runner, createBatch, getAction, startAction, workAction, type Executor } from '../src/batch/index.js';
import { connect } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const BULK_BATCHES = Number(process.env.BENCH_BULK_BATCHES ?? 5_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Batches of a chunk worked at once (`ActionSettings.parallel`; default the action's, 4). */
const PARALLEL = process.env.BENCH_BULK_PARALLEL === undefined ? undefined : Number(process.env.BENCH_BULK_PARALLEL);

const noop: Executor = { work: async () => null, parallel: 64 };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** One batch of ITEMS no-op items on its own runner and pool; items/s from takeover to finish. */
async function runOnce(url: string, schema: string): Promise<number> {
  const pool = connect(url, { max: 4, schema, applicationName: 'bench-bulk-run' });
  try {
    const { batch } = await createBatch(pool, batchOf(ITEMS));
    const runner = new Runner(pool, { parallel: noop.parallel });
    const t1 = performance.now();
    await runner.takeOver(() => noop, batch.id);
    const result = await runner.running(batch.id)!;
    const t2 = performance.now();
    if (result.outcome !== 'succeeded' || result.finishedItems !== ITEMS) throw new Error(`bench run ended ${result.outcome}`);
    await pool`delete from leasehold_batches where id = ${batch.id}`;
    return ITEMS / ((t2 - t1) / 1000);
  } finally {
    await pool.end();
  }
}

/** The bulk part: prints `bulk cancel, 5,000 batches: S s; a running batch meanwhile P % of alone`. */
export async function bulkBench(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_bulk', 8);
  const actions = connect(url, { max: PARALLEL ?? 4, schema, applicationName: 'bench-bulk-action' });
  try {
    let next = 0;
    const lane = async () => {
      while (next < BULK_BATCHES) {
        next++;
        await createBatch(sql, { ...batchOf(1), tenant: 'bulk' }, { maxOpen: 1_000_000 });
      }
    };
    await Promise.all(Array.from({ length: 8 }, lane));
    await sql`analyze`;
    const alone: number[] = [];
    for (let i = 0; i < ROUNDS; i++) alone.push(await runOnce(url, schema));

    let going = true;
    const t0 = performance.now();
    const action = (async () => {
      const { action } = await startAction(actions, {
        requestKey: `bench-${schema}`,
        action: 'cancel',
        filter: { tenant: 'bulk' },
      });
      while (!(await workAction(actions, action.id, PARALLEL === undefined ? {} : { parallel: PARALLEL })).finished)
        await new Promise((r) => setTimeout(r, 100));
      going = false;
      return { ms: performance.now() - t0, a: await getAction(actions, action.id) };
    })();
    action.catch(() => (going = false));
    const during: number[] = [];
    while (going) {
      const rate = await runOnce(url, schema);
      if (going) during.push(rate);
    }
    const { ms, a } = await action;
    if (a.done !== BULK_BATCHES || a.skipped !== 0) throw new Error(`bulk action ended done ${a.done}, skipped ${a.skipped}`);
    for (let i = 0; i < ROUNDS; i++) alone.push(await runOnce(url, schema));

    const pct = during.length ? Math.round((median(during) / median(alone)) * 100) : NaN;
    console.log(
      `bulk cancel, ${fmt(BULK_BATCHES)} batches: ${(ms / 1000).toFixed(1)} s; a running batch meanwhile ${pct} % of alone` +
        ` (${fmt(median(during))} vs ${fmt(median(alone))} items/s over ${during.length} rounds during, ${alone.length} alone)`,
    );
  } finally {
    await actions.end();
    await drop();
  }
}
