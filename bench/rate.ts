// Rate-limit benchmark (part of `npm run bench`; `BENCH_ONLY=rate` runs only this; docs/design.md,
// "Rate limits"): one batch over 8 runs (8 runners, a pool each, as processes are) with `parallel`
// 16, its job limited to 50/s on one key, against a local HTTP endpoint that answers 429 to a
// request past 55 in its last second. It prints the most requests the endpoint saw in any one-second
// window, the rate reached and the 429s after the first second; a key at 500/s alone and beside
// the 50/s one (`another key …`); a Retry-After of 2 s on one of three keys (`retry-after: …`);
// then a no-op batch over the same
// 8 runs with a limit far above the load, beside the same batch without one (the limit's
// overhead; `BENCH_RATE_PART=overhead` runs only that line). A fresh schema of its own.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RetryAfterError, Runner, createBatch, type Executor } from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';
import { mostInWindow } from '../test/support/random.js';

const RATE = 50;
const SECONDS = Number(process.env.BENCH_RATE_SECONDS ?? 20);
const RUNS = 8;
const PARALLEL = 16;
const NOOP_ITEMS = Number(process.env.BENCH_RATE_NOOP_ITEMS ?? 20_000);
const OVERHEAD_ROUNDS = Number(process.env.BENCH_RATE_ROUNDS ?? 5);

/** An endpoint that answers 429 past `limit` requests in its last 1,000 ms, and records each arrival. */
async function limitedEndpoint(limit: number): Promise<{ url: string; seen: number[]; refused: number[]; server: Server }> {
  const seen: number[] = [];
  const refused: number[] = [];
  const server = createServer((req, res) => {
    const now = performance.now();
    let recent = 0;
    for (let i = seen.length - 1; i >= 0 && now - seen[i]! < 1_000; i--) recent++;
    seen.push(now);
    if (recent >= limit) {
      refused.push(now);
      res.writeHead(429, { 'retry-after': '1' }).end();
    } else {
      res.writeHead(200).end('ok');
    }
    req.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, seen, refused, server };
}

/** Run batch `id` on {@link RUNS} runners (a pool each) until it ends; resolves to the seconds it took. */
async function runOn(url: string, schema: string, id: string, executor: Executor): Promise<number> {
  const pools: Sql[] = Array.from({ length: RUNS }, () => connect(url, { max: 3, schema }));
  const runners = pools.map((p) => new Runner(p, { maxRuns: 1, parallel: PARALLEL, beatMs: 500, staleMs: 10_000 }));
  const t0 = performance.now();
  try {
    const first = runners[0]!;
    await first.takeOver(() => executor, id);
    const done = first.running(id)!;
    for (const r of runners.slice(1)) r.watch(() => executor, 20);
    const result = await done;
    if (result.outcome === 'failed' || result.outcome === 'store-error') {
      throw new Error(`bench rate run ended ${result.outcome}`, { cause: result.error });
    }
    // The last run to finish ends the batch (a run that finds it ended as it leaves reads 'lost').
    const admin = pools[0]!;
    for (;;) {
      const [b] = await admin<{ status: string }[]>`select status from leasehold_batches where id = ${id}`;
      if (b!.status === 'succeeded') break;
      if (b!.status !== 'open') throw new Error(`bench rate batch ended ${b!.status}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return (performance.now() - t0) / 1000;
  } finally {
    await Promise.all(runners.map((r) => r.close()));
    await Promise.all(pools.map((p) => p.end()));
  }
}

/** Items per second of sorted start times `t` (ms) between `from` and `to`. */
function rateIn(t: number[], from: number, to: number): number {
  return (t.filter((x) => x >= from && x < to).length * 1_000) / (to - from);
}

/** Items of the given keys, interleaved by position, each `{ k }`. */
function keyedItems(counts: Record<string, number>): { key: string; input: { k: string } }[] {
  const items: { key: string; input: { k: string }; at: number }[] = [];
  for (const [k, n] of Object.entries(counts)) {
    for (let i = 0; i < n; i++) items.push({ key: `${k}${String(i).padStart(7, '0')}`, input: { k }, at: i / n });
  }
  return items.sort((a, b) => a.at - b.at).map(({ key, input }) => ({ key, input }));
}

/**
 * `another key 500/s: alone N/s, beside a 50/s key M/s (±P %)`: a key at 500/s in a batch of its
 * own, then the same key beside one at 50/s in one batch (each key's own rate: `perSecond` a
 * function of the key).
 */
async function anotherKeyBench(url: string, schema: string, sql: Sql): Promise<void> {
  const seconds = 6;
  const fastRate = 500;
  const rateByKey = (k: string) => (k === 'slow' ? RATE : fastRate);
  const measure = async (counts: Record<string, number>, job: string) => {
    const starts: Record<string, number[]> = {};
    const executor: Executor = {
      parallel: PARALLEL,
      rateLimit: { key: (item) => (item.input as { k: string }).k, perSecond: rateByKey },
      work: async ({ input }) => {
        (starts[(input as { k: string }).k] ??= []).push(performance.now());
        return null;
      },
    };
    const b = await createBatch(sql, { ...batchOf(0), items: keyedItems(counts), job, maxConcurrency: RUNS });
    await runOn(url, schema, b.batch.id, executor);
    const fast = starts.fast!.sort((x, y) => x - y);
    return ((fast.length - 1) / (fast.at(-1)! - fast[0]!)) * 1_000;
  };
  const alone = await measure({ fast: fastRate * seconds }, 'fast-alone');
  const beside = await measure({ fast: fastRate * seconds, slow: RATE * seconds }, 'fast-beside');
  const diff = (100 * (beside - alone)) / alone;
  console.log(
    `another key ${fastRate}/s: alone ${alone.toFixed(1)}/s, beside a ${RATE}/s key ${beside.toFixed(1)}/s ` +
      `(${diff >= 0 ? '+' : ''}${diff.toFixed(1)} %)`,
  );
}

/**
 * `retry-after: paused key S s, other keys ±P %`: three keys at 50/s each over {@link RUNS} runs;
 * 4 s in, one item of key `a` throws `RetryAfterError(2000)`. The line gives key a's longest gap
 * between starts, the other keys' rate during the pause against the 2 s before it (by then every run
 * has joined and the first bursts are spent), and the attempts used.
 */
async function retryAfterBench(url: string, schema: string, sql: Sql): Promise<void> {
  const seconds = 8;
  const starts: Record<string, number[]> = { a: [], b: [], c: [] };
  let t0 = 0;
  let pausedAt = 0;
  const executor: Executor = {
    parallel: PARALLEL,
    rateLimit: { key: (item) => (item.input as { k: string }).k, perSecond: RATE },
    work: async ({ input }) => {
      const now = performance.now();
      const k = (input as { k: string }).k;
      starts[k]!.push(now);
      t0 ||= now;
      if (k === 'a' && pausedAt === 0 && now - t0 > 4_000) {
        pausedAt = now;
        throw new RetryAfterError(2_000);
      }
      return null;
    },
  };
  const counts = { a: RATE * seconds, b: RATE * seconds, c: RATE * seconds };
  const b = await createBatch(sql, { ...batchOf(0), items: keyedItems(counts), job: 'retry-after', maxConcurrency: RUNS });
  await runOn(url, schema, b.batch.id, executor);
  const a = starts.a!.sort((x, y) => x - y);
  let gap = 0;
  for (let i = 1; i < a.length; i++) gap = Math.max(gap, a[i]! - a[i - 1]!);
  const others = [...starts.b!, ...starts.c!].sort((x, y) => x - y);
  // Before: the 2 s ahead of the pause, once the runs have all joined and the buckets' first
  // bursts are spent (a window from the first start held that start-up: 87/s against 100/s).
  const before = rateIn(others, pausedAt - 2_000, pausedAt);
  const during = rateIn(others, pausedAt + 100, pausedAt + 1_900);
  const diff = (100 * (during - before)) / before;
  const [used] = await sql<{ extra: number }[]>`select coalesce(sum(attempts - 1), 0)::int as extra
    from leasehold_items where batch_id = ${b.batch.id}`;
  console.log(
    `retry-after: paused key ${(gap / 1000).toFixed(2)} s, other keys ${diff >= 0 ? '+' : ''}${diff.toFixed(1)} % ` +
      `(${before.toFixed(1)}/s before, ${during.toFixed(1)}/s during), attempts used by the wait: ${used!.extra}`,
  );
}

/** `rate limit 50/s: max W per 1 s window, N/s (P % of limit), 429s after 1 s: K` and the overhead line. */
export async function rateBench(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_rate', 2);
  const endpoint = await limitedEndpoint(Math.round(RATE * 1.1));
  try {
    if (process.env.BENCH_RATE_PART !== 'overhead') await limitBenches(url, schema, sql, endpoint);
    await overheadBench(url, schema, sql);
  } finally {
    endpoint.server.close();
    await drop();
  }
}

/** `rate limit 50/s: …`, then the other key's and the Retry-After lines. */
async function limitBenches(
  url: string,
  schema: string,
  sql: Sql,
  endpoint: Awaited<ReturnType<typeof limitedEndpoint>>,
): Promise<void> {
  const n = RATE * SECONDS;
  const limited = await createBatch(sql, { ...batchOf(n), job: 'rated', maxConcurrency: RUNS });
  const executor: Executor = {
    parallel: PARALLEL,
    rateLimit: { perSecond: RATE },
    work: async () => {
      const res = await fetch(endpoint.url);
      await res.arrayBuffer();
      if (res.status === 429) throw new Error('429');
      return null;
    },
  };
  await runOn(url, schema, limited.batch.id, executor);
  const seen = [...endpoint.seen].sort((a, b) => a - b);
  const rate = ((seen.length - 1) / (seen.at(-1)! - seen[0]!)) * 1_000;
  const late429 = endpoint.refused.filter((t) => t - seen[0]! > 1_000).length;
  console.log(
    `rate limit ${RATE}/s: max ${mostInWindow(seen, 1_000)} per 1 s window, ${rate.toFixed(1)}/s ` +
      `(${((100 * rate) / RATE).toFixed(1)} % of limit), 429s after 1 s: ${late429} ` +
      `(${RUNS} runs, parallel ${PARALLEL}, ${n.toLocaleString('en-US')} items)`,
  );

  await anotherKeyBench(url, schema, sql);
  await retryAfterBench(url, schema, sql);
}

/** The overhead line: no-op items under a limit far above the load against none. */
async function overheadBench(url: string, schema: string, sql: Sql): Promise<void> {
  // One round is a few seconds on 2 cores and varies by a quarter from round to round: the two
  // batches alternate for OVERHEAD_ROUNDS rounds and the medians are compared.
  const noop: Executor = { parallel: PARALLEL, work: async () => null };
  const freeS: number[] = [];
  const highS: number[] = [];
  for (let round = 0; round < OVERHEAD_ROUNDS; round++) {
    const free = await createBatch(sql, { ...batchOf(NOOP_ITEMS), job: 'noop', maxConcurrency: RUNS });
    freeS.push(await runOn(url, schema, free.batch.id, noop));
    const high = await createBatch(sql, { ...batchOf(NOOP_ITEMS), job: 'noop-limited', maxConcurrency: RUNS });
    highS.push(await runOn(url, schema, high.batch.id, { ...noop, rateLimit: { perSecond: 1_000_000 } }));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const perS = (s: number) => Math.round(NOOP_ITEMS / s).toLocaleString('en-US');
  console.log(
    `rate limit far above the load (1,000,000/s), no-op items over ${RUNS} runs: ${perS(median(highS))} items/s, ` +
      `without a limit ${perS(median(freeS))} items/s (${((100 * median(freeS)) / median(highS)).toFixed(0)} % of the unlimited rate; ` +
      `medians of ${OVERHEAD_ROUNDS} alternating rounds of ${NOOP_ITEMS.toLocaleString('en-US')} items, ` +
      `limited ${highS.map(perS).join('/')}, unlimited ${freeS.map(perS).join('/')})`,
  );
}
