// The progress stream on AWS (docs/api.md, "Progress stream"; issue 41): the `events` handler of
// createHandlers, driven as the Lambda Node.js runtime drives a streaming function (its
// `awslambda` global stood in for: `streamifyResponse` passes the response stream through,
// `HttpResponseStream.from` writes the prelude as the runtime does), each response a real Node
// Writable, against a real PostgreSQL.
import { Writable } from 'node:stream';
import type { Context } from 'aws-lambda';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BatchWatcher, Runner, createBatch, type ItemWork } from '../../src/batch/index.js';
import { createHandlers } from '../../src/lambda.js';
import { resetRuntimeDeps } from '../../src/runtime/deps.js';
import { serveBatchEvents } from '../../src/runtime/stream.js';
import { StreamingUnavailableError, type StreamPrelude } from '../../src/runtime/streaming.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();
const pools: Sql[] = [];
afterEach(async () => {
  delete (globalThis as { awslambda?: unknown }).awslambda;
  vi.unstubAllEnvs();
  await resetRuntimeDeps();
  await Promise.all(pools.splice(0).map((p) => p.end({ timeout: 5 })));
});

/** The runtime's separator between the prelude (JSON) and the body. */
const PRELUDE_END = '\0'.repeat(8);

/** A streamed response as a client of the function URL would read it. */
class ResponseStream extends Writable {
  text = '';
  constructor() {
    super({ write: (chunk: Buffer, _enc, done) => ((this.text += chunk.toString('utf8')), done()) });
  }
  get prelude(): StreamPrelude {
    return JSON.parse(this.text.slice(0, this.text.indexOf(PRELUDE_END))) as StreamPrelude;
  }
  get body(): string {
    return this.text.slice(this.text.indexOf(PRELUDE_END) + PRELUDE_END.length);
  }
  get events(): [string, unknown][] {
    return this.body
      .split('\n\n')
      .map((block) => [/^event: (.*)$/m.exec(block)?.[1], /^data: (.*)$/m.exec(block)?.[1]] as const)
      .filter((e): e is [string, string] => e[0] !== undefined && e[1] !== undefined)
      .map(([e, d]) => [e, JSON.parse(d)]);
  }
}

/** Stands in for the Lambda Node.js runtime's `awslambda` global. */
function installLambdaRuntime(): void {
  (globalThis as { awslambda?: unknown }).awslambda = {
    streamifyResponse: (fn: unknown) => fn,
    HttpResponseStream: {
      from(stream: Writable, prelude: StreamPrelude) {
        stream.write(JSON.stringify(prelude) + PRELUDE_END);
        return stream;
      },
    },
  };
}

const context = (remainingMs = 60_000) =>
  ({ awsRequestId: 'req-1', functionName: 'events', getRemainingTimeInMillis: () => remainingMs }) as unknown as Context;

const eventFor = (path: string) => ({ rawPath: path, requestContext: { http: { method: 'GET' } } });

type Streaming = (event: unknown, stream: Writable, context: Context) => Promise<void>;

async function startBatch(sql: Sql, items = 40) {
  const { batch } = await createBatch(sql, {
    tenant: `fnstream-${process.pid}`,
    datasource: 'files',
    job: 'test',
    params: {},
    requestKey: `fnstream-${process.pid}-${Date.now()}-${Math.random()}`,
    items: Array.from({ length: items }, (_, i) => ({ key: `k${i}` })),
  });
  return batch;
}

describe('the events function (response streaming)', () => {
  it('streams a running batch to each listener: 200 event-stream, state, progress, end, then the response ends', async () => {
    installLambdaRuntime();
    for (const [k, v] of Object.entries(db.env)) vi.stubEnv(k, v);
    const { events } = createHandlers({ jobs: [] });
    const sql = db.connect({ max: 2 });
    pools.push(sql);
    const batch = await startBatch(sql);
    const responses = Array.from({ length: 5 }, () => new ResponseStream());
    const streams = responses.map((r) => (events as unknown as Streaming)(eventFor(`/batches/${batch.id}/events`), r, context()));
    const work: ItemWork = async () => (await sleep(40), 1);
    await sleep(300);
    await new Runner(sql, { parallel: 2 }).takeOver(() => ({ work }), batch.id);
    await Promise.all(streams);
    for (const r of responses) {
      expect(r.writableEnded).toBe(true);
      expect(r.prelude).toEqual({
        statusCode: 200,
        headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' },
      });
      expect(r.body.startsWith('retry: 2000\n\n')).toBe(true);
      const names = r.events.map(([e]) => e);
      expect(names[0]).toBe('state');
      expect(names).toContain('progress');
      expect(names.at(-1)).toBe('end');
      expect(r.events.at(-1)![1]).toEqual({ status: 'succeeded' });
      const last = r.events.filter(([e]) => e === 'progress').at(-1)![1] as { counts: { done: number } };
      expect(last.counts.done).toBe(40);
    }
  });

  it('answers 404 JSON for an unknown batch and for another route', async () => {
    installLambdaRuntime();
    for (const [k, v] of Object.entries(db.env)) vi.stubEnv(k, v);
    const { events } = createHandlers({ jobs: [] });
    const unknown = new ResponseStream();
    await (events as unknown as Streaming)(eventFor('/batches/00000000-0000-4000-8000-000000000000/events'), unknown, context());
    expect(unknown.prelude.statusCode).toBe(404);
    expect(JSON.parse(unknown.body)).toMatchObject({ error: { code: 'batch_not_found' } });
    const other = new ResponseStream();
    await (events as unknown as Streaming)(eventFor('/batches'), other, context());
    expect(other.prelude.statusCode).toBe(404);
    expect(JSON.parse(other.body)).toMatchObject({ error: { code: 'route_not_found' } });
  });

  it("closes an open batch's stream before the function would time out, without an end event", async () => {
    installLambdaRuntime();
    for (const [k, v] of Object.entries(db.env)) vi.stubEnv(k, v);
    const { events } = createHandlers({ jobs: [] });
    const sql = db.connect({ max: 1 });
    pools.push(sql);
    const batch = await startBatch(sql, 3);
    const r = new ResponseStream();
    const t0 = performance.now();
    // 4.5 s left, less the 3 s margin: the stream lasts about 1.5 s.
    await (events as unknown as Streaming)(eventFor(`/batches/${batch.id}/events`), r, context(4_500));
    const ms = performance.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(1_400);
    expect(ms).toBeLessThan(4_500);
    expect(r.writableEnded).toBe(true);
    const names = r.events.map(([e]) => e);
    expect(names[0]).toBe('state');
    expect(names).not.toContain('end');
  });

  it('outside the Lambda runtime the handler file loads, and invoking the stream says why it cannot run', async () => {
    const { events, api } = createHandlers({ jobs: [] });
    expect(typeof api).toBe('function');
    await expect(events()).rejects.toBeInstanceOf(StreamingUnavailableError);
    await expect(events()).rejects.toThrow(/awslambda\.streamifyResponse/);
  });
});

describe('serveBatchEvents with one watcher (a function instance)', () => {
  it('streams share one poller: 20 streams of one batch read it at most once a second', async () => {
    const sql = db.connect({ max: 2 });
    const watchPool = db.connect({ max: 2 });
    pools.push(sql, watchPool);
    const watcher = new BatchWatcher(watchPool);
    const batch = await startBatch(sql, 60);
    const responses = Array.from({ length: 20 }, () => new ResponseStream());
    const t0 = performance.now();
    const served = responses.map((r) =>
      serveBatchEvents({
        watcher,
        event: eventFor(`/batches/${batch.id}/events`),
        open: (prelude) => (r.write(JSON.stringify(prelude) + PRELUDE_END), r),
        maxMs: 60_000,
      }),
    );
    const work: ItemWork = async () => (await sleep(50), 1);
    await sleep(200);
    await new Runner(sql, { parallel: 2 }).takeOver(() => ({ work }), batch.id);
    expect(await Promise.all(served)).toEqual(responses.map(() => 'end'));
    const seconds = (performance.now() - t0) / 1000;
    expect(watcher.reads).toBeGreaterThanOrEqual(2);
    expect(watcher.reads).toBeLessThanOrEqual(Math.ceil(seconds) + 1);
    for (const r of responses) expect(r.events.map(([e]) => e).at(-1)).toBe('end');
  });

  it('answers 503 database_unavailable when no reading comes within the time, and stops reading', async () => {
    const sql = db.connect({ max: 1 });
    await sql.end();
    const watcher = new BatchWatcher(sql, { intervalMs: 100 });
    const r = new ResponseStream();
    const outcome = await serveBatchEvents({
      watcher,
      event: eventFor('/batches/00000000-0000-4000-8000-000000000000/events'),
      open: (prelude) => (r.write(JSON.stringify(prelude) + PRELUDE_END), r),
      maxMs: 500,
    });
    expect(outcome).toBe('unavailable');
    expect(watcher.reads).toBeGreaterThanOrEqual(2);
    expect(r.prelude.statusCode).toBe(503);
    expect(JSON.parse(r.body)).toMatchObject({ error: { code: 'database_unavailable' } });
    await vi.waitFor(() => expect(watcher.watched()).toBe(0));
  });

  it('a listener that goes away ends its stream and, when it was the last, the poller', async () => {
    const sql = db.connect({ max: 2 });
    pools.push(sql);
    const watcher = new BatchWatcher(sql);
    const batch = await startBatch(sql, 3);
    const r = new ResponseStream();
    const served = serveBatchEvents({
      watcher,
      event: eventFor(`/batches/${batch.id}/events`),
      open: (prelude) => (r.write(JSON.stringify(prelude) + PRELUDE_END), r),
      maxMs: 60_000,
    });
    await vi.waitFor(() => expect(r.events.length).toBeGreaterThan(0));
    expect(watcher.watched()).toBe(1);
    r.destroy();
    expect(await served).toBe('closed');
    await vi.waitFor(() => expect(watcher.watched()).toBe(0), { timeout: 3_000 });
  });
});
