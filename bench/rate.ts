// Rate-limit benchmark (part of `npm run bench`; `BENCH_ONLY=rate` runs only this; docs/design.md,
// "Rate limits"): one batch over 8 runs (8 runners, a pool each, as processes are) with `parallel`
// 16, its job limited to 50/s on one key, against a local HTTP endpoint that answers 429 to a
// request past 55 in its last second. It prints the most requests the endpoint saw in any one-second
// window, the rate reached and the 429s after the first second; then a no-op batch over the same
// 8 runs with a limit far above the load, beside the same batch without one (the limit's
// overhead). A fresh schema of its own.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Runner, createBatch, type Executor } from '../src/batch/index.js';
import { connect, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';
import { mostInWindow } from '../test/support/random.js';

const RATE = 50;
const SECONDS = Number(process.env.BENCH_RATE_SECONDS ?? 20);
const RUNS = 8;
const PARALLEL = 16;
const NOOP_ITEMS = Number(process.env.BENCH_RATE_NOOP_ITEMS ?? 20_000);

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

/** `rate limit 50/s: max W per 1 s window, N/s (P % of limit), 429s after 1 s: K` and the overhead line. */
export async function rateBench(url: string): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_rate', 2);
  const endpoint = await limitedEndpoint(Math.round(RATE * 1.1));
  try {
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

    const noop: Executor = { parallel: PARALLEL, work: async () => null };
    const free = await createBatch(sql, { ...batchOf(NOOP_ITEMS), job: 'noop', maxConcurrency: RUNS });
    const freeS = await runOn(url, schema, free.batch.id, noop);
    const high = await createBatch(sql, { ...batchOf(NOOP_ITEMS), job: 'noop-limited', maxConcurrency: RUNS });
    const highS = await runOn(url, schema, high.batch.id, { ...noop, rateLimit: { perSecond: 1_000_000 } });
    const perS = (s: number) => Math.round(NOOP_ITEMS / s).toLocaleString('en-US');
    console.log(
      `rate limit far above the load (1,000,000/s), no-op items over ${RUNS} runs: ${perS(highS)} items/s, ` +
        `without a limit ${perS(freeS)} items/s (${((100 * freeS) / highS).toFixed(0)} % of the unlimited rate)`,
    );
  } finally {
    endpoint.server.close();
    await drop();
  }
}
