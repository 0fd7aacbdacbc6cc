// Retention benchmark (part of `npm run bench`; `BENCH_ONLY=retention` runs only this;
// docs/design.md, "Retention"): does deleting expired history slow a running batch?
//   1. in a schema of its own, RETENTION_ITEMS finished items in 250 batches, finished 40 to 70
//      days ago (test/support/history.ts), all of them expired at the default 30 days;
//   2. one run, parallel 64, over ITEMS no-op items (as bench/runs.ts's one run): items/s from
//      takeover to finish, once before the deletion starts ("alone");
//   3. retention passes (`deleteExpiredBatches`, default chunk, cap and budget) back to back in
//      a pool of their own until nothing expired is left: harsher than the scheduler, which runs
//      one pass per run. Meanwhile the same run, round after round; a round counts only if the
//      deletion was still going when it finished (passes still running and history batches left);
//   4. ROUNDS more rounds alone once the deletion has finished.
// Each round starts with the bench's earlier batches deleted (as bench/runs.ts does); the items
// are vacuumed before the first round alone and after the deletion (see `clean`). While the deletion goes on,
// pg_stat_activity is sampled every SAMPLE_MS for the run's and the deletion's sessions: what
// they were waiting for (no wait event while active: on CPU), to say where a slowdown comes from.
import { randomUUID } from 'node:crypto';
import { Runner, createBatch, deleteExpiredBatches, type Executor } from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { loadHistory } from '../test/support/history.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const RETENTION_ITEMS = Number(process.env.BENCH_RETENTION_ITEMS ?? 5_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RETENTION_DAYS = 30;
const SAMPLE_MS = 100;

const noop: Executor = { work: async () => null, parallel: 64 };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const s = (ms: number) => (ms / 1000).toFixed(0);

/** One batch of ITEMS no-op items on its own runner and pool; items/s from takeover to finish. */
async function runOnce(url: string, schema: string, app: string): Promise<number> {
  const pool = connect(url, { max: 4, schema, applicationName: app });
  try {
    const { batch } = await createBatch(pool, batchOf(ITEMS));
    const runner = new Runner(pool, { parallel: noop.parallel });
    const t1 = performance.now();
    await runner.takeOver(() => noop, batch.id);
    const result = await runner.running(batch.id)!;
    const t2 = performance.now();
    if (result.outcome !== 'succeeded' || result.finishedItems !== ITEMS) throw new Error(`bench run ended ${result.outcome}`);
    return ITEMS / ((t2 - t1) / 1000);
  } finally {
    await pool.end();
  }
}

/**
 * Delete the bench's own batches (their items cascade) and vacuum the batch table, so the next
 * round starts clean; `vacuum` also vacuums the items, which with millions of rows takes longer
 * than a round, so only before the first round and after the deletion (rounds in between carry
 * the dead items of the rounds before them, which if anything slows the rounds during deletion).
 */
async function clean(sql: Sql, vacuum?: Sql): Promise<void> {
  await sql`delete from leasehold_batches where tenant = 'bench'`;
  if (vacuum) await vacuum`vacuum leasehold_items`;
  await sql`vacuum leasehold_batches`;
}

/** History batches not yet deleted. */
async function historyLeft(sql: Sql): Promise<number> {
  const [{ n }] = await sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches where tenant like 'history-%'`;
  return n;
}

/** Samples pg_stat_activity for sessions of the given application names until stopped: counts of `who: wait`. */
function sampleWaits(sql: Sql, apps: Record<string, string>): { stop(): Promise<Map<string, number>> } {
  const counts = new Map<string, number>();
  let stopping = false;
  const loop = (async () => {
    while (!stopping) {
      const rows = await sql<{ app: string; wait: string }[]>`select application_name as app,
          coalesce(wait_event_type || ':' || wait_event, 'CPU') as wait
        from pg_stat_activity
        where application_name in ${sql(Object.keys(apps))} and state = 'active'`;
      for (const r of rows) {
        const key = `${apps[r.app]} ${r.wait}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
      await sleep(SAMPLE_MS);
    }
  })();
  return {
    stop: async () => {
      stopping = true;
      await loop;
      return counts;
    },
  };
}

/**
 * The retention figures (issue 16's goal: deleting 5,000,000 expired items slows a running batch
 * by at most 10 %, measured during the deletion; docs/design.md, "Retention"). In a schema of its
 * own on `url`, dropped after: loads `BENCH_RETENTION_ITEMS` (default 5,000,000) expired items,
 * then prints the no-op run's items/s (`BENCH_ITEMS`, default 20,000 items, parallel 64) alone
 * and during back-to-back retention passes, the share of the one in the other, how long the
 * deletion took (and rows/s), and what the run's and the deletion's sessions waited for.
 *
 * @throws Error when a round's run does not succeed with every item, or when no round overlapped
 *   the deletion; any database error.
 */
export async function retentionBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_retention', 2);
  const [{ schema }] = await sql<{ schema: string }[]>`select current_schema() as schema`;
  const tag = randomUUID().slice(0, 8);
  const runApp = `bench-retention-run-${tag}`;
  const deleteApp = `bench-retention-delete-${tag}`;
  const deleter = connect(url, { max: 1, schema, applicationName: deleteApp });
  // Loading and vacuuming millions of items may outlast the default statement timeout.
  const maint = connect(url, { max: 1, schema, statementTimeoutMs: 0 });
  let waits: { stop(): Promise<Map<string, number>> } | undefined;
  try {
    const loaded = await loadHistory(maint, { items: RETENTION_ITEMS, olderDays: 40, spreadDays: 30, units: 0, outbox: 0 });
    console.log(
      `retention: ${fmt(loaded.items)} expired items in ${loaded.batches} batches loaded in ${s(loaded.ms)} s; ${fmt(ITEMS)} no-op items per run, parallel 64`,
    );

    await clean(sql, maint);
    // The load's writes are flushed now rather than by a checkpoint during the first round; a
    // role that may not checkpoint leaves it to the server.
    await sql`checkpoint`.catch(() => {});
    const before = await runOnce(url, schema, runApp);

    let deleting = true;
    let deleted = 0;
    let passes = 0;
    waits = sampleWaits(sql, { [runApp]: 'run', [deleteApp]: 'deletion' });
    const t0 = performance.now();
    const deletion = (async () => {
      try {
        for (;;) {
          const r = await deleteExpiredBatches(deleter, { retentionDays: RETENTION_DAYS });
          passes++;
          deleted += r.items + r.batches;
          if (!r.more) return performance.now() - t0;
        }
      } finally {
        deleting = false;
      }
    })();
    // Rounds while the deletion goes on; one that ends after it does not count.
    const during: number[] = [];
    let late = 0;
    try {
      while (deleting) {
        await clean(sql);
        if (!deleting) break;
        const rate = await runOnce(url, schema, runApp);
        if (deleting && (await historyLeft(sql)) > 0) during.push(rate);
        else late++;
      }
    } finally {
      // A failing round must not leave the deletion running under a dropped schema.
      await deletion.catch(() => {});
    }
    const ms = await deletion;
    const counts = await waits.stop();
    waits = undefined;
    if ((await historyLeft(sql)) !== 0) throw new Error('retention left expired batches');
    if (during.length === 0) throw new Error('no round overlapped the deletion: raise BENCH_RETENTION_ITEMS');

    const after: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      await clean(sql, i === 0 ? maint : undefined);
      after.push(await runOnce(url, schema, runApp));
    }
    const alone = median([before, ...after]);
    const share = (100 * median(during)) / alone;
    console.log(
      `retention: one run alone ${fmt(alone)} items/s; during deletion of ${fmt(loaded.items)} items ${fmt(median(during))} items/s (${share.toFixed(0)} %; goal ≥ 90 %); deleted in ${s(ms)} s (${fmt(deleted / (ms / 1000))} rows/s)`,
    );
    console.log(
      `retention: alone median of ${1 + after.length} (before ${fmt(before)}, after ${after.map(fmt).join(', ')} items/s); during median of ${during.length} rounds overlapping the deletion (${during.map(fmt).join(', ')} items/s${late > 0 ? `; ${late} ending after it left out` : ''}); ${passes} passes, ${fmt(deleted)} rows`,
    );
    for (const who of ['run', 'deletion']) {
      const mine = [...counts].filter(([k]) => k.startsWith(`${who} `));
      const total = mine.reduce((a, [, n]) => a + n, 0);
      const top = mine
        .sort((a, b) => b[1] - a[1])
        .slice(0, 5)
        .map(([k, n]) => `${k.slice(who.length + 1)} ${((100 * n) / total).toFixed(0)} %`);
      console.log(
        `retention: ${who} sessions while deleting, active samples every ${SAMPLE_MS} ms: ${total} (${top.join(', ')})`,
      );
    }
  } finally {
    await waits?.stop().catch(() => {});
    await deleter.end();
    await maint.end();
    await drop();
  }
}
