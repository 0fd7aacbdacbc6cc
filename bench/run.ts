// `npm run bench`: no-op item throughput of the batch runner on a real PostgreSQL, a start of
// 200,000 items (bench/start.ts), the checksum job over 4,000 files (bench/checksum.ts), then the
// lease benchmarks (bench/lease.ts), then the worker bundle's size and import cost
// (bench/bundle.ts). BENCH_ONLY=batch|start|checksum|lease|bundle runs one part.
// DATABASE_URL when set, else a throw-away embedded database (in the OS temp dir, removed after).
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Runner, type NewBatch } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { bundleBench } from './bundle.js';
import { checksumBench } from './checksum.js';
import { leaseBench } from './lease.js';
import { startBench } from './start.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

function batchOf(n: number): NewBatch {
  return {
    tenant: 'bench',
    datasource: randomUUID(),
    job: 'noop',
    params: {},
    requestKey: randomUUID(),
    items: Array.from({ length: n }, (_, i) => ({ key: String(i).padStart(6, '0') })),
  };
}

const noop = { work: async () => null, parallel: 64 };

/** One run, parallel 64, over one batch of ITEMS items: items/s from takeover to finish. */
async function oneRun(sql: Sql): Promise<{ rate: number; insertMs: number }> {
  const runner = new Runner(sql, { parallel: 64 });
  const t0 = performance.now();
  const { batch } = await (await import('../src/batch/index.js')).createBatch(sql, batchOf(ITEMS));
  const t1 = performance.now();
  await runner.takeOver(() => noop, batch.id);
  const result = await runner.running(batch.id)!;
  const t2 = performance.now();
  if (result.outcome !== 'succeeded' || result.finishedItems !== ITEMS) throw new Error(`bench run ended ${result.outcome}`);
  await runner.close();
  return { rate: ITEMS / ((t2 - t1) / 1000), insertMs: t1 - t0 };
}

/** Four runners, each with its own pool, each running its own batch of ITEMS items at once. */
async function fourRuns(url: string, schema: string | undefined): Promise<number> {
  const pools = Array.from({ length: 4 }, () => connect(url, { max: 4, schema }));
  const { createBatch } = await import('../src/batch/index.js');
  const batches = await Promise.all(pools.map((p) => createBatch(p, batchOf(ITEMS)).then((r) => r.batch.id)));
  const runners = pools.map((p) => new Runner(p, { parallel: 64 }));
  const t1 = performance.now();
  await Promise.all(runners.map((r, i) => r.takeOver(() => noop, batches[i])));
  const results = await Promise.all(runners.map((r, i) => r.running(batches[i])!));
  const t2 = performance.now();
  for (const r of results) if (r.outcome !== 'succeeded') throw new Error(`bench run ended ${r.outcome}`);
  await Promise.all(pools.map((p) => p.end()));
  return (4 * ITEMS) / ((t2 - t1) / 1000);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const parts = ['batch', 'start', 'checksum', 'lease', 'bundle'];
  const only = process.env.BENCH_ONLY;
  if (only !== undefined && !parts.includes(only)) throw new Error(`BENCH_ONLY must be one of ${parts.join(', ')}, got ${only}`);
  const runs = (part: string) => only === undefined || only === part;
  let url = process.env.DATABASE_URL;
  let stop: (() => Promise<void>) | undefined;
  // The bundle part needs no database.
  if (!url && only !== 'bundle') {
    const { startEmbedded } = await import('../src/local/embedded.js');
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-'));
    const db = await startEmbedded({ dir: join(dir, 'pgdata'), port: 0 });
    url = db.url;
    stop = async () => {
      await db.stop();
      await rm(dir, { recursive: true, force: true });
    };
  }
  try {
    if (runs('batch')) await batchBench(url!);
    if (runs('start')) await startBench(url!);
    if (runs('checksum')) await checksumBench(url!);
    if (runs('lease')) await leaseBench(url!);
    if (runs('bundle')) await bundleBench();
  } finally {
    await stop?.();
  }
}

/** The batch figures, in a schema of their own. */
async function batchBench(url: string) {
  const schema = `bench_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin`create schema ${admin(schema)}`;
  const sql = connect(url, { max: 4, schema });
  try {
    await migrate(sql);
    const [{ version }] = await sql<{ version: string }[]>`select current_setting('server_version') as version`;
    console.log(`PostgreSQL ${version}; ${ITEMS} no-op items per batch; ${ROUNDS} rounds; median (best)`);
    const one: number[] = [];
    const ins: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const r = await oneRun(sql);
      one.push(r.rate);
      ins.push(r.insertMs);
    }
    console.log(`start (insert ${ITEMS} items): ${Math.round(median(ins))} ms`);
    console.log(`one run, parallel 64: ${Math.round(median(one))} items/s (best ${Math.round(Math.max(...one))} items/s)`);
    const four: number[] = [];
    for (let i = 0; i < ROUNDS; i++) four.push(await fourRuns(url, schema));
    console.log(`4 concurrent runs, parallel 64 each: ${Math.round(median(four))} items/s (best ${Math.round(Math.max(...four))} items/s)`);
  } finally {
    await sql.end();
    await admin`drop schema ${admin(schema)} cascade`;
    await admin.end();
  }
}

await main();
