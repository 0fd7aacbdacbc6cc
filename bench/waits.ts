// Waiting items benchmark (part of `npm run bench`; `BENCH_ONLY=waits` runs only this;
// docs/design.md, "Waiting items: callbacks and sleeps"): BENCH_WAITING (default 100,000) items of
// one batch wait at once, the batch parked (target 0, no run). It counts the workers the
// scheduler's dispatch would send it and the batches a takeover would join (the invocations its
// waiting costs), and times the expiry pass's statement with no wait due and with 1,000 due
// (median of 20, analyzed), in a fresh schema of its own.
import { Runner, createBatch, expireWaits } from '../src/batch/index.js';
import { claimDispatch } from '../src/batch/sql/index.js';
import { expiryStatement } from '../src/batch/sql/waits.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';
import { median } from './sides.js';

const WAITING = Number(process.env.BENCH_WAITING ?? 100_000);

/** `callbacks, 100,000 waiting: invocations while waiting N; expiry check M ms` */
export async function waitsBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_waits', 4);
  try {
    const { batch } = await createBatch(sql, batchOf(WAITING));
    // Parked as its last run leaves it (src/batch/sql/waits.ts, parkStatement): every item waiting
    // on a callback due in a day, the batch at target 0 with no run.
    await sql`update leasehold_items set state = 'waiting' where batch_id = ${batch.id}`;
    await sql`insert into leasehold_waits (batch_id, key, id, kind, attempt, wake_at, timeout_at)
      select batch_id, key, gen_random_uuid(), 'callback', 1, now() + interval '1 day' + random() * interval '1 hour',
        now() + interval '1 day' from leasehold_items where batch_id = ${batch.id}`;
    await sql`update leasehold_batches set target = 0 where id = ${batch.id}`;
    await sql`analyze`;
    let invocations = 0;
    for (let i = 0; i < 5; i++) {
      const sent = await claimDispatch(sql, { staleMs: 30_000, cooldownMs: 0, limit: 100, maxRunning: 1_000 });
      invocations += sent.filter((r) => r.id === batch.id).reduce((n, r) => n + r.workers, 0);
      if (await new Runner(sql, {}).takeOver(() => ({ work: async () => null }))) invocations++;
    }
    const time = async (n: number) => {
      const ms: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await sql.begin((t) => t`${expiryStatement(t as never, { limit: 1_000 })}`);
        ms.push(performance.now() - t0);
      }
      return median(ms);
    };
    const idleMs = await time(20);
    // 1,000 of them due now: the pass's look-up, then the whole pass (wake, unpark).
    await sql`update leasehold_waits set wake_at = now() - interval '1 minute'
      where (batch_id, key) in (select batch_id, key from leasehold_waits order by wake_at limit 1000)`;
    const dueMs = await time(20);
    const t0 = performance.now();
    const r = await expireWaits(sql, 1_000);
    const passMs = performance.now() - t0;
    const fmt = (n: number) => n.toLocaleString('en-US');
    console.log(
      `callbacks, ${fmt(WAITING)} waiting: invocations while waiting ${invocations}; expiry check ${idleMs.toFixed(1)} ms ` +
        `(none due; ${dueMs.toFixed(1)} ms with 1,000 due; a pass waking ${fmt(r.woken)}: ${Math.round(passMs)} ms)`,
    );
  } finally {
    await drop();
  }
}
