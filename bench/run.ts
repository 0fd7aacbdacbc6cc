// `npm run bench`: every headline figure on a fresh schema and on a lived-in one side by side
// (bench/sides.ts: the lived-in schema is loaded with history once per run and shared by the
// parts), each on one line with the lived-in figure's ratio to the fresh one. In order: the batch
// runner's throughput (bench/runs.ts), a start of 200,000 items (bench/start.ts), the checksum job
// over 4,000 files (bench/checksum.ts), the lease benchmarks (bench/lease.ts), graphile-worker's
// batched mode beside leasehold's one run (bench/graphile.ts), the worker bundle's size and import
// cost (bench/bundle.ts), tenant fairness (bench/fairness.ts), then the README's demo twice on one
// embedded database folder (bench/demo.ts), then retention beside a running batch (bench/retention.ts),
// then fan-out: one batch over many runs (bench/fanout.ts), then fan-out at fleet scale: one
// batch over 256 and 1,024 runs in this process through one PgBouncer in transaction mode
// (bench/fleet.ts; without PgBouncer it prints what to install and the bench goes on), then one
// retry wave's spread over its backoff interval (bench/retries.ts), then the batch runner through PgBouncer in transaction mode
// beside direct connections (bench/pooler.ts; without PgBouncer it prints what to install and the
// bench goes on), then finish to event (bench/events.ts), then a fleet-wide rate limit against an endpoint that refuses past it (bench/rate.ts), then S3 sources
// and results on the local S3 (bench/s3.ts), then item batching: lambda-invoke with itemsPerCall
// 100 beside one item per invoke, against the local invoke endpoint (bench/batching.ts), then
// tracing on beside off (bench/traces.ts), then 100 listeners of one batch's progress stream
// (bench/stream.ts), served by `leasehold dev` and relayed by `leasehold dashboard --events`.
// Last, a bulk cancel of 5,000 open batches beside a running batch (bench/bulk.ts), and usage per batch against the
// workers' measured invocation times (bench/usage.ts).
// BENCH_ONLY=batch|start|checksum|lease|graphile|bundle|fairness|demo|retention|fanout|fleet|retries|pooler|events|rate|s3|batching|traces|stream|bulk|pools|pause|waits|usage runs one part.
// DATABASE_URL when set, else a throw-away embedded database (in the OS temp dir, removed after).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBatch } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { batchingBench } from './batching.js';
import { bulkBench } from './bulk.js';
import { bundleBench } from './bundle.js';
import { checksumBench } from './checksum.js';
import { demoBench } from './demo.js';
import { fairnessBench } from './fairness.js';
import { eventsBench } from './events.js';
import { fanoutBench } from './fanout.js';
import { fleetBench } from './fleet.js';
import { graphileBench } from './graphile.js';
import { leaseBench } from './lease.js';
import { poolerBench } from './pooler.js';
import { rateBench } from './rate.js';
import { pauseBench } from './pause.js';
import { poolsBench } from './pools.js';
import { retentionBench } from './retention.js';
import { retriesBench } from './retries.js';
import { batchOf, runBench } from './runs.js';
import { livedIn, median, type LivedIn } from './sides.js';
import { startBench } from './start.js';
import { s3Bench } from './s3.js';
import { callbackLatencyBench, sleepLatencyBench, waitsBench } from './waits.js';
import { relayStreamBench, streamBench } from './stream.js';
import { tracesBench } from './traces.js';
import { usageBench } from './usage.js';

// The AWS SDK warns on Node.js 20 that its 2027 releases will need Node.js 22, once per process
// that sends (the S3 parts and bench/s3-worker.ts, which inherits the variable): noise in the
// figures, as for the CLI (src/cli.ts). Set the variable to false to see it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** A start of ITEMS items: ms to insert the batch and its items. */
async function startOnce(sql: Sql): Promise<number> {
  const t0 = performance.now();
  await createBatch(sql, batchOf(ITEMS));
  return performance.now() - t0;
}

const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

async function main() {
  const t0 = performance.now();
  const parts = [
    'batch',
    'start',
    'checksum',
    'lease',
    'graphile',
    'bundle',
    'fairness',
    'demo',
    'retention',
    'fanout',
    'fleet',
    'retries',
    'pooler',
    'events',
    'rate',
    's3',
    'batching',
    'traces',
    'stream',
    'bulk',
    'pools',
    'pause',
    'waits',
    'usage',
  ];
  const only = process.env.BENCH_ONLY;
  if (only !== undefined && !parts.includes(only)) throw new Error(`BENCH_ONLY must be one of ${parts.join(', ')}, got ${only}`);
  const runs = (part: string) => only === undefined || only === part;
  let url = process.env.DATABASE_URL;
  let stop: (() => Promise<void>) | undefined;
  // The bundle and demo parts need no database of ours (the demo starts its own).
  if (!url && only !== 'bundle' && only !== 'demo') {
    const { startEmbedded } = await import('../src/local/embedded/index.js');
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-'));
    const db = await startEmbedded({ dir: join(dir, 'pgdata'), port: 0 });
    url = db.url;
    stop = async () => {
      await db.stop();
      await rm(dir, { recursive: true, force: true });
    };
  }
  let lived: LivedIn | undefined;
  try {
    if (['batch', 'start', 'checksum', 'lease', 'graphile'].some(runs)) {
      lived = await livedIn(url!, 8);
      console.log(lived.describe);
    }
    if (runs('batch')) await batchBench(url!, lived!);
    if (runs('start')) await startBench(url!, lived!);
    if (runs('checksum')) await checksumBench(url!, lived!);
    if (runs('lease')) await leaseBench(url!, lived!);
    if (runs('graphile')) await graphileBench(url!, lived!);
    if (runs('bundle')) await bundleBench();
    if (runs('fairness')) await fairnessBench(url!);
    if (runs('demo')) await demoBench();
    if (runs('retention')) await retentionBench(url!);
    if (runs('fanout')) await fanoutBench(url!);
    if (runs('fleet')) await fleetBench(url!);
    if (runs('retries')) await retriesBench(url!);
    if (runs('pooler')) await poolerBench(url!);
    if (runs('events')) await eventsBench(url!);
    if (runs('rate')) await rateBench(url!);
    if (runs('s3')) await s3Bench(url!);
    if (runs('batching')) await batchingBench(url!);
    if (runs('traces')) await tracesBench(url!);
    if (runs('stream')) {
      await streamBench(url!);
      await relayStreamBench(url!);
    }
    if (runs('bulk')) await bulkBench(url!);
    if (runs('pools')) await poolsBench(url!);
    if (runs('pause')) await pauseBench(url!);
    if (runs('waits')) {
      // BENCH_WAITS_LINES=waiting,latency,sleep picks the lines (default all three).
      const lines = (process.env.BENCH_WAITS_LINES ?? 'waiting,latency,sleep').split(',');
      if (lines.includes('waiting')) await waitsBench(url!);
      if (lines.includes('latency')) await callbackLatencyBench(url!);
      if (lines.includes('sleep')) await sleepLatencyBench(url!);
    }
    if (runs('usage')) await usageBench(url!);
  } finally {
    await lived?.close();
    await stop?.();
  }
  console.log(`bench took ${s(performance.now() - t0)} in all`);
}

/** The batch figures, in a fresh schema of their own and in the lived-in one. */
async function batchBench(url: string, lived: LivedIn) {
  const schema = `bench_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin`create schema ${admin(schema)}`;
  const sql = connect(url, { max: 4, schema });
  try {
    await migrate(sql);
    await runBench(url, [{ name: 'fresh', schema, sql }, lived]);
    const ins: number[] = [];
    for (let i = 0; i < ROUNDS; i++) ins.push(await startOnce(sql));
    console.log(`start (insert ${ITEMS} items, fresh schema only): ${Math.round(median(ins))} ms`);
  } finally {
    await sql.end();
    await admin`drop schema ${admin(schema)} cascade`;
    await admin.end();
  }
}

await main();
