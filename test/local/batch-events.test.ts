// The progress stream (docs/api.md, "Progress stream"; issue 41) as `leasehold dev` serves it:
// many listeners of one batch share one poller, which reads the batch at most once a second, and
// each listener gets its state, its progress and its end.
import { afterEach, describe, expect, it } from 'vitest';
import { BatchWatcher, Runner, createBatch, type ItemWork } from '../../src/batch/index.js';
import { batchEventsRoute } from '../../src/local/batch-events.js';
import { startHttpServer, type HttpServer } from '../../src/local/http-server.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();
const servers: HttpServer[] = [];
const pools: Sql[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(pools.splice(0).map((p) => p.end({ timeout: 5 })));
});

/** Every event of one stream, `[event, data]`, until it closes. */
async function listen(url: string): Promise<{ status: number; events: [string, unknown][] }> {
  const res = await fetch(url);
  const events: [string, unknown][] = [];
  if (res.status !== 200) return { status: res.status, events };
  let text = '';
  for await (const chunk of res.body!) text += Buffer.from(chunk).toString('utf8');
  for (const block of text.split('\n\n')) {
    const event = /^event: (.*)$/m.exec(block)?.[1];
    const data = /^data: (.*)$/m.exec(block)?.[1];
    if (event && data) events.push([event, JSON.parse(data)]);
  }
  return { status: res.status, events };
}

async function serve(watcher: BatchWatcher): Promise<HttpServer> {
  const server = await startHttpServer({
    port: 0,
    handler: async () => ({ statusCode: 404 }),
    assets: batchEventsRoute(watcher),
  });
  servers.push(server);
  return server;
}

describe('GET /batches/{id}/events', () => {
  it('100 listeners of a running batch share one poller: at most one read a second, and each gets state, progress and the end', async () => {
    const sql = db.connect({ max: 2 });
    pools.push(sql);
    // The watcher's own pool, so its reads are counted apart from the run's.
    let reads = 0;
    const watchPool = db.connect({ max: 2 });
    pools.push(watchPool);
    (watchPool.options as { debug?: unknown }).debug = () => void reads++;
    const watcher = new BatchWatcher(watchPool);
    const server = await serve(watcher);

    const { batch } = await createBatch(sql, {
      tenant: `stream-${process.pid}`,
      datasource: 'files',
      job: 'test',
      params: {},
      requestKey: `stream-${process.pid}-${Date.now()}`,
      items: Array.from({ length: 60 }, (_, i) => ({ key: `k${i}` })),
    });
    const listeners = Array.from({ length: 100 }, () => listen(`${server.url}/batches/${batch.id}/events`));
    // Items take 50 ms each, two at a time: about 1.5 s of work.
    const work: ItemWork = async () => (await sleep(50), 1);
    const runner = new Runner(sql, { parallel: 2 });
    const t0 = performance.now();
    await sleep(200);
    await runner.takeOver(() => ({ work }), batch.id);
    expect(await runner.running(batch.id)).toMatchObject({ outcome: 'succeeded' });
    const streams = await Promise.all(listeners);
    const seconds = (performance.now() - t0) / 1000;

    for (const s of streams) {
      expect(s.status).toBe(200);
      const names = s.events.map(([e]) => e);
      expect(names[0]).toBe('state');
      expect(names.at(-1)).toBe('end');
      expect(s.events.at(-1)![1]).toEqual({ status: 'succeeded' });
      const progress = s.events.filter(([e]) => e === 'progress').map(([, d]) => d as { counts: { done: number } });
      expect(progress.at(-1)!.counts.done).toBe(60);
    }
    // One poller for all 100: at most one read per started second (plus the first), whatever the listeners.
    expect(reads).toBeGreaterThanOrEqual(2);
    expect(reads).toBeLessThanOrEqual(Math.ceil(seconds) + 1);
    expect(watcher.watched()).toBe(0);
  });

  it('answers 404 for a batch that does not exist', async () => {
    const watcher = new BatchWatcher(db.sql);
    const server = await serve(watcher);
    const { status } = await listen(`${server.url}/batches/00000000-0000-4000-8000-000000000000/events`);
    expect(status).toBe(404);
  });
});
