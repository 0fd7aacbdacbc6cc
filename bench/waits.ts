// Waiting items benchmark (part of `npm run bench`; `BENCH_ONLY=waits` runs only this;
// docs/design.md, "Waiting items: callbacks and sleeps"): BENCH_WAITING (default 100,000) items of
// one batch wait at once, the batch parked (target 0, no run). It counts the workers the
// scheduler's dispatch would send it and the batches a takeover would join (the invocations its
// waiting costs), and times the expiry pass (one statement that finds, locks and wakes) with no
// wait due and with 1,000 due (medians, analyzed), in a fresh schema of its own.
// Then the latency of a completion (callbackLatencyBench): BENCH_CALLBACKS (default 1,000) items
// wait; each completion goes through the API's route (`POST /callbacks/{token}/succeed`, the
// handler a deployment runs), which sends the woken batch a worker as a deployment does
// (sendWorkers: reserve, mark dispatched, invoke), the invoke starting a fresh Runner in this
// process (a Lambda invoke's own latency is not in the figure); timed from the request to the
// item's next attempt starting, one completion at a time, each after the batch parked again.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { handleApi, type ApiDeps } from '../src/api/index.js';
import {
  Runner,
  createBatch,
  expireWaits,
  sendWorkers,
  type Executor,
  type WorkerEvent,
  type WorkerSender,
} from '../src/batch/index.js';
import { defaultRegistry } from '../src/jobs/index.js';
import { silentLog } from '../src/log.js';
import { claimDispatch } from '../src/batch/sql/index.js';
import type { MaintenanceContext } from '../src/runtime/maintenance/service.js';
import { WAITS_DEFAULTS, waitsService } from '../src/runtime/maintenance/waits.js';
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
    // One statement of the scheduler's expiry pass (expireWaits: look-up, lock and wake in one),
    // as its `waits` service sends it (its page, WAITS_DEFAULTS.limit): with none due, then with
    // 1,000 due (each round makes the 1,000 soonest waits due again, their items waiting, and
    // times the first statement); then the whole service run that wakes all 1,000 (its pages).
    const page = WAITS_DEFAULTS.limit;
    const service = waitsService();
    const time = async (n: number, before: () => Promise<unknown>) => {
      const ms: number[] = [];
      const passMs: number[] = [];
      let woken = 0;
      for (let i = 0; i < n; i++) {
        await before();
        const t0 = performance.now();
        woken = (await expireWaits(sql, page)).woken;
        ms.push(performance.now() - t0);
        // The waits service reads only the pool of its context.
        woken += (await service.run({ sql } as unknown as MaintenanceContext)).waitsWoken;
        passMs.push(performance.now() - t0);
      }
      return { ms: median(ms), passMs: median(passMs), woken };
    };
    const idle = await time(20, async () => undefined);
    const due = await time(10, async () => {
      await sql`update leasehold_items set state = 'waiting' where batch_id = ${batch.id} and state <> 'waiting'`;
      await sql`insert into leasehold_waits (batch_id, key, id, kind, attempt, wake_at, timeout_at)
        select i.batch_id, i.key, gen_random_uuid(), 'callback', 1, now() - interval '1 minute', now() + interval '1 day'
        from leasehold_items i
        where i.batch_id = ${batch.id}
          and not exists (select 1 from leasehold_waits w where w.batch_id = i.batch_id and w.key = i.key)`;
      await sql`update leasehold_waits set wake_at = now() - interval '1 minute'
        where (batch_id, key) in (select batch_id, key from leasehold_waits order by wake_at limit 1000)`;
      await sql`update leasehold_batches set target = 0 where id = ${batch.id}`;
    });
    if (due.woken !== 1_000) throw new Error(`a pass with 1,000 due woke ${due.woken}`);
    const fmt = (n: number) => n.toLocaleString('en-US');
    console.log(
      `callbacks, ${fmt(WAITING)} waiting: invocations while waiting ${invocations}; expiry check ${idle.ms.toFixed(1)} ms (none due), ` +
        `${due.ms.toFixed(1)} ms (1,000 due) (one statement, finding and waking a page of ${page}; ` +
        `the pass waking all 1,000: ${due.passMs.toFixed(1)} ms; medians of 20 and 10)`,
    );
  } finally {
    await drop();
  }
}

const CALLBACKS = Number(process.env.BENCH_CALLBACKS ?? 1_000);

/** A `POST /callbacks/{token}/succeed` as API Gateway (payload 2.0) hands it to the API function. */
function succeedEvent(token: string, result: unknown): APIGatewayProxyEventV2 {
  const path = `/callbacks/${token}/succeed`;
  const body = JSON.stringify({ result });
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    requestContext: { stage: '$default', http: { method: 'POST', path } },
    body,
    isBase64Encoded: false,
  } as unknown as APIGatewayProxyEventV2;
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
};

/** `callback to next attempt: p50 M ms, p95 M ms` (over BENCH_CALLBACKS completions). */
export async function callbackLatencyBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_callbacks', 8);
  try {
    const tokens = new Map<string, string>();
    const woke = new Map<string, () => void>();
    const executor: Executor = {
      work: async (item) => {
        if (item.callback) {
          woke.get(item.key)?.();
          return null;
        }
        tokens.set(item.key, (await item.waitForCallback({ timeoutMs: 3_600_000 })).token);
        return null;
      },
      parallel: 16,
    };
    const options = { beatMs: 1_000, staleMs: 30_000, backoffMs: 0 };
    // Each invoke is a fresh process, as a worker invocation is; its run is awaited below.
    const runs: Promise<unknown>[] = [];
    const dispatcher = {
      invoke: async (e: WorkerEvent) => {
        const runner = new Runner(sql, options);
        if (await runner.takeOver(() => executor, e.batchId, { orFairer: true })) runs.push(runner.running(e.batchId!)!);
      },
    };
    const reserve = async (ids: string[]) => ids.map((): WorkerEvent => ({}));
    const workers: WorkerSender = {
      dispatcher,
      reserve,
      send: (batchId, n, o) => sendWorkers({ sql, dispatcher, reserve }, batchId, n, o),
    };
    const deps: ApiDeps = {
      sql,
      jobs: defaultRegistry(),
      config: { maxOpen: 10, maxBodyBytes: 1 << 20 },
      workers,
      log: silentLog,
    };

    const first = new Runner(sql, options);
    const { batch } = await first.start(batchOf(CALLBACKS), {}, executor);
    await first.running(batch.id);
    if (tokens.size !== CALLBACKS) throw new Error(`${tokens.size} of ${CALLBACKS} items waited`);
    const ms: number[] = [];
    for (const [key, token] of tokens) {
      const started = new Promise<number>((resolve) => woke.set(key, () => resolve(performance.now())));
      const t0 = performance.now();
      const answer = await handleApi(succeedEvent(token, { ok: true }), deps);
      if (answer.statusCode !== 200) throw new Error(`completion answered ${answer.statusCode}: ${String(answer.body)}`);
      ms.push((await started) - t0);
      // Idle again before the next one: the run finished the item and parked the batch.
      await Promise.all(runs.splice(0));
    }
    const [c] = await sql<{ done: number }[]>`
      select count(*)::int as done from leasehold_items where batch_id = ${batch.id} and state = 'done'`;
    if (c!.done !== CALLBACKS) throw new Error(`${c!.done} of ${CALLBACKS} items done after their completions`);
    console.log(
      `callback to next attempt: p50 ${quantile(ms, 0.5).toFixed(1)} ms, p95 ${quantile(ms, 0.95).toFixed(1)} ms ` +
        `(${ms.length.toLocaleString('en-US')} completions through the API route, each waking a parked batch; max ${Math.max(...ms).toFixed(1)} ms)`,
    );
  } finally {
    await drop();
  }
}

const SLEEPS = Number(process.env.BENCH_SLEEPS ?? 200);

/** How long the sleep bench waits for every sleeper to run again before it says they did not, ms. */
const SLEEP_GIVE_UP_MS = 20_000;

/**
 * `sleep 500 ms to next attempt, live run: p50 M ms, p95 M ms` (docs/design.md, "Waiting items:
 * callbacks and sleeps"): BENCH_SLEEPS (default 200) items of one batch, `parallel` 8, each
 * sleeping 500 ms in its first attempt; timed from the `sleep` call to the same attempt's next
 * run, with no scheduler pass at all (a live run wakes its own sleeps). Runner defaults (a 5 s
 * beat). Items not run again once the run ended (or after 20 s) are counted in the line.
 */
export async function sleepLatencyBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_sleeps', 8);
  try {
    const slept = new Map<string, number>();
    const ms: number[] = [];
    const executor: Executor = {
      work: async (item) => {
        if (item.slept) {
          ms.push(performance.now() - slept.get(item.key)!);
          return null;
        }
        slept.set(item.key, performance.now());
        await item.sleep(500);
        return null;
      },
      parallel: 8,
    };
    const runner = new Runner(sql, {});
    const { batch } = await runner.start(batchOf(SLEEPS), {}, executor);
    const t0 = performance.now();
    const ended = await Promise.race([
      runner.running(batch.id)!.then((r) => r.outcome),
      new Promise<string>((resolve) => setTimeout(() => resolve('still running'), SLEEP_GIVE_UP_MS).unref()),
    ]);
    const endedS = ((performance.now() - t0) / 1000).toFixed(1);
    await runner.close();
    const fmt = (n: number) => n.toLocaleString('en-US');
    const missing = SLEEPS - ms.length;
    console.log(
      ms.length === 0
        ? `sleep 500 ms to next attempt, live run: none of ${fmt(SLEEPS)} ran again with no scheduler pass ` +
            `(the run: ${ended} after ${endedS} s; they wait for the expiry pass)`
        : `sleep 500 ms to next attempt, live run: p50 ${quantile(ms, 0.5).toFixed(1)} ms, p95 ${quantile(ms, 0.95).toFixed(1)} ms ` +
            `(${fmt(ms.length)} sleeps, parallel 8, no scheduler pass; max ${Math.max(...ms).toFixed(1)} ms` +
            `${missing > 0 ? `; ${fmt(missing)} not run again within ${SLEEP_GIVE_UP_MS / 1000} s` : ''}; the run: ${ended})`,
    );
  } finally {
    await drop();
  }
}
