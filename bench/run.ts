// `npm run bench`: the batch runner's throughput on a real PostgreSQL (bench/runs.ts), a start of
// 200,000 items (bench/start.ts), the checksum job over 4,000 files (bench/checksum.ts), then the
// lease benchmarks (bench/lease.ts), then the worker bundle's size and import cost
// (bench/bundle.ts), then tenant fairness (bench/fairness.ts).
// BENCH_ONLY=batch|start|checksum|lease|bundle|fairness runs one part.
// DATABASE_URL when set, else a throw-away embedded database (in the OS temp dir, removed after).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBatch } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { bundleBench } from './bundle.js';
import { checksumBench } from './checksum.js';
import { fairnessBench } from './fairness.js';
import { leaseBench } from './lease.js';
import { retentionBench } from './retention.js';
import { batchOf, runBench } from './runs.js';
import { startBench } from './start.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** A start of ITEMS items: ms to insert the batch and its items. */
async function startOnce(sql: Sql): Promise<number> {
  const t0 = performance.now();
  await createBatch(sql, batchOf(ITEMS));
  return performance.now() - t0;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const parts = ['batch', 'start', 'checksum', 'lease', 'bundle', 'fairness', 'retention'];
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
    if (runs('fairness')) await fairnessBench(url!);
    if (runs('retention')) await retentionBench(url!);
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
    await runBench(url, schema, sql);
    const ins: number[] = [];
    for (let i = 0; i < ROUNDS; i++) ins.push(await startOnce(sql));
    console.log(`start (insert ${ITEMS} items): ${Math.round(median(ins))} ms`);
  } finally {
    await sql.end();
    await admin`drop schema ${admin(schema)} cascade`;
    await admin.end();
  }
}

await main();
