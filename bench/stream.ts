// The progress stream's cost to the database (issue 41's goal: 100 listeners on one batch's stream
// add at most one database read a second): on a fresh schema of its own, `leasehold dev`'s
// `GET /batches/{id}/events` (src/local/batch-events.ts) on a local server, 100 listeners of one
// batch whose items take BENCH_STREAM_SECONDS (default 5) in all; the stream's reads are counted
// on its own pool (postgres.js's `debug` hook: every statement it sends), over the time from the
// first read to the last (reads − 1 intervals). Prints `stream, 100 listeners: R database reads/s`.
import { randomUUID } from 'node:crypto';
import { BatchWatcher, Runner, createBatch } from '../src/batch/index.js';
import { batchEventsRoute, startHttpServer } from '../src/local/index.js';
import { connect, migrate } from '../src/store/index.js';
import { batchOf } from './runs.js';

const LISTENERS = 100;
const SECONDS = Number(process.env.BENCH_STREAM_SECONDS ?? 5);

/** Reads one stream to its end; resolves to the number of `progress` events it got. */
async function listen(url: string): Promise<number> {
  const res = await fetch(url);
  if (res.status !== 200) throw new Error(`stream answered ${res.status}`);
  let n = 0;
  for await (const chunk of res.body!)
    n += (
      Buffer.from(chunk)
        .toString('utf8')
        .match(/^event: progress$/gm) ?? []
    ).length;
  return n;
}

export async function streamBench(url: string): Promise<void> {
  const schema = `bench_stream_${process.pid}_${randomUUID().slice(0, 8)}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create schema if not exists ${schema}`);
  const sql = connect(url, { schema, max: 4 });
  const watchPool = connect(url, { schema, max: 2 });
  const reads: number[] = [];
  const watcher = new BatchWatcher(watchPool);
  const server = await startHttpServer({
    port: 0,
    handler: async () => ({ statusCode: 404 }),
    assets: batchEventsRoute(watcher),
  });
  try {
    await migrate(sql);
    // 20 ms items, 4 at a time: 200 per second.
    const n = SECONDS * 200;
    const { batch } = await createBatch(sql, batchOf(n));
    await watchPool`select 1`;
    (watchPool.options as { debug?: unknown }).debug = () => void reads.push(performance.now());
    const t0 = performance.now();
    const listeners = Array.from({ length: LISTENERS }, () => listen(`${server.url}/batches/${batch.id}/events`));
    const runner = new Runner(sql, { parallel: 4 });
    await runner.takeOver(() => ({ work: () => new Promise((r) => setTimeout(() => r(null), 20)), parallel: 4 }), batch.id);
    const result = await runner.running(batch.id)!;
    if (result.outcome !== 'succeeded') throw new Error(`bench run ended ${result.outcome}`);
    const got = await Promise.all(listeners);
    const seconds = (performance.now() - t0) / 1000;
    const span = (reads.at(-1)! - reads[0]!) / 1000;
    console.log(
      `stream, ${LISTENERS} listeners: ${((reads.length - 1) / span).toFixed(2)} database reads/s ` +
        `(${reads.length} reads, ${span.toFixed(1)} s from the first to the last; ${seconds.toFixed(1)} s in all, one batch of ${n} items; ` +
        `each listener got ${Math.min(...got)}–${Math.max(...got)} progress events; goal at most 1)`,
    );
  } finally {
    await server.close();
    await watchPool.end();
    await sql.end();
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}

/** The bench's credentials: what the function URL stand-in knows and the dashboard signs with. */
const RELAY_CREDENTIALS = { accessKeyId: 'AKIDLEASEHOLDBENCH01', secretAccessKey: 'leasehold/bench/secret' };

/**
 * The same on AWS's side, through `leasehold dashboard --events` (src/local/events-relay.ts): a
 * function URL stand-in (test/support/function-url.ts) that verifies SigV4 for `lambda` and serves
 * each stream with a poller of its own, as Lambda gives each concurrent stream its own instance;
 * 100 listeners on the dashboard. Prints `stream via the dashboard relay, 100 listeners: R
 * database reads/s (U upstream streams …)`.
 */
export async function relayStreamBench(url: string): Promise<void> {
  const { startDashboard } = await import('../src/local/dashboard-proxy.js');
  const { startFunctionUrl } = await import('../test/support/function-url.js');
  const schema = `bench_relay_${process.pid}_${randomUUID().slice(0, 8)}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create schema if not exists ${schema}`);
  const sql = connect(url, { schema, max: 4 });
  const watchPool = connect(url, { schema, max: 4 });
  const reads: number[] = [];
  const fn = await startFunctionUrl({
    credentials: RELAY_CREDENTIALS,
    region: 'eu-west-1',
    watcher: () => new BatchWatcher(watchPool),
  });
  const dashboard = await startDashboard({
    apiUrl: 'http://127.0.0.1:9',
    eventsUrl: fn.url,
    port: 0,
    region: 'eu-west-1',
    credentials: async () => RELAY_CREDENTIALS,
  });
  try {
    await migrate(sql);
    const n = SECONDS * 200;
    const { batch } = await createBatch(sql, batchOf(n));
    await watchPool`select 1`;
    (watchPool.options as { debug?: unknown }).debug = () => void reads.push(performance.now());
    const t0 = performance.now();
    const listeners = Array.from({ length: LISTENERS }, () => listen(`${dashboard.url}/batches/${batch.id}/events`));
    const runner = new Runner(sql, { parallel: 4 });
    await runner.takeOver(() => ({ work: () => new Promise((r) => setTimeout(() => r(null), 20)), parallel: 4 }), batch.id);
    const result = await runner.running(batch.id)!;
    if (result.outcome !== 'succeeded') throw new Error(`bench run ended ${result.outcome}`);
    const got = await Promise.all(listeners);
    const seconds = (performance.now() - t0) / 1000;
    const span = (reads.at(-1)! - reads[0]!) / 1000;
    console.log(
      `stream via the dashboard relay, ${LISTENERS} listeners: ${((reads.length - 1) / span).toFixed(2)} database reads/s ` +
        `(${fn.records.length} upstream stream${fn.records.length === 1 ? '' : 's'}, all signed: ${fn.records.every((r) => r.verified)}; ` +
        `${reads.length} reads, ${span.toFixed(1)} s from the first to the last; ${seconds.toFixed(1)} s in all; ` +
        `each listener got ${Math.min(...got)}–${Math.max(...got)} progress events; goal at most 1)`,
    );
  } finally {
    await dashboard.close();
    await fn.close();
    await watchPool.end();
    await sql.end();
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}
