import { afterEach, describe, expect, it } from 'vitest';
import { startSink, type Sink } from '../../src/local/sink.js';

let sink: Sink | undefined;
afterEach(async () => {
  await sink?.close();
  sink = undefined;
});

const post = (url: string, body: unknown, key?: string) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: JSON.stringify(body),
  });

describe('local sink', () => {
  it('accepts POSTs at any path on 127.0.0.1 and counts them per path, with distinct idempotency keys', async () => {
    sink = await startSink();
    expect(sink.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    for (const [path, key] of [
      ['/a', 'k1'],
      ['/a', 'k1'],
      ['/a', 'k2'],
      ['/b/c', 'k1'],
    ]) {
      const res = await post(`${sink.url}${path}`, { path }, key);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ ok: true });
    }
    const stats = sink.stats();
    expect(stats).toMatchObject({ received: 4, accepted: 4, failed: 0, distinctKeys: 2 });
    expect(stats.paths['/a']).toEqual({ received: 3, accepted: 3, failed: 0, distinctKeys: 2, failing: false, delayMs: 0 });
    expect(stats.paths['/b/c']).toMatchObject({ received: 1, distinctKeys: 1 });
    expect(stats.perSecond).toBeGreaterThan(0);
    expect([...sink.keys('/a')].sort()).toEqual(['k1', 'k2']);
    expect(sink.recent().map((d) => d.body)).toEqual([{ path: '/a' }, { path: '/a' }, { path: '/a' }, { path: '/b/c' }]);

    const served = await (await fetch(`${sink.url}/_stats`)).json();
    expect(served).toMatchObject({ received: 4, accepted: 4, distinctKeys: 2 });
  });

  it('fails a path while told to, over HTTP or by method, and counts failures apart from deliveries', async () => {
    sink = await startSink({ failing: ['down'] });
    expect((await post(`${sink.url}/down`, {}, 'x')).status).toBe(503);
    const toggled = await (await fetch(`${sink.url}/_fail/down`, { method: 'POST' })).json();
    expect(toggled).toEqual({ path: '/down', failing: false });
    expect((await post(`${sink.url}/down`, {}, 'x')).status).toBe(200);
    expect(sink.fail('/down')).toBe(true);
    expect((await post(`${sink.url}/down`, {}, 'y')).status).toBe(503);
    await fetch(`${sink.url}/_fail/down?on=false`, { method: 'POST' });
    expect(sink.stats().paths['/down']).toMatchObject({ received: 3, accepted: 1, failed: 2, distinctKeys: 1, failing: false });
    expect([...sink.keys()]).toEqual(['x']);
  });

  it('fails the deliveries a predicate picks, and delays answers on a slow path', async () => {
    sink = await startSink({ failWhen: (d) => (d.body as { key?: string }).key === 'poison' });
    expect((await post(`${sink.url}/p`, { key: 'poison' })).status).toBe(503);
    expect((await post(`${sink.url}/p`, { key: 'fine' })).status).toBe(200);
    sink.delay('/slow', 200);
    const started = Date.now();
    expect((await post(`${sink.url}/slow`, {})).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
  });

  it('answers 405 to other methods and 413 to oversized bodies', async () => {
    sink = await startSink({ maxBodyBytes: 100 });
    expect((await fetch(`${sink.url}/x`)).status).toBe(405);
    expect((await post(`${sink.url}/x`, { big: 'x'.repeat(200) })).status).toBe(413);
    expect(sink.stats().received).toBe(0);
  });
});
