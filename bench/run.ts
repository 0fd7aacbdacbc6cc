// `npm run bench`: the batch runner's throughput on a real PostgreSQL (bench/runs.ts) and the time
// of a start, then the lease benchmarks (bench/lease.ts). BENCH_ONLY=batch|lease runs one part.
// DATABASE_URL when set, else a throw-away embedded database (in the OS temp dir, removed after).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBatch } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { leaseBench } from './lease.js';
import { batchOf, runBench } from './runs.js';

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
  const only = process.env.BENCH_ONLY;
  if (only !== undefined && only !== 'batch' && only !== 'lease') throw new Error(`BENCH_ONLY must be batch or lease, got ${only}`);
  let url = process.env.DATABASE_URL;
  let stop: (() => Promise<void>) | undefined;
  if (!url) {
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
    if (only !== 'lease') await batchBench(url);
    if (only !== 'batch') await leaseBench(url);
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
