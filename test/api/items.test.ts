// GET /batches/{id}/items shows what a running item's heartbeats report (docs/api.md): its
// progress and when it last beat, read through the API handler while a real runner runs it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiDeps } from '../../src/api/index.js';
import { createBatch, Runner } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { apiDeps, call, InvokeEndpoint, uniqueTenant } from '../support/api.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let deps: ApiDeps;

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  deps = apiDeps(db.sql, endpoint);
});
afterAll(async () => {
  await endpoint.close();
});

describe('GET /batches/{id}/items with heartbeats', () => {
  it("shows a running item's progress and last heartbeat, and keeps the last progress once it is done", async () => {
    const runner = new Runner(db.connect({ max: 2 }), { beatMs: 100, staleMs: 5_000 });
    const release = deferred();
    const tenant = uniqueTenant();
    const { batch } = await runner.start(
      { tenant, datasource: 'ds', job: 'test', params: {}, requestKey: `k-${tenant}`, items: [{ key: 'a' }, { key: 'b' }] },
      {},
      {
        attempts: 1,
        work: async (item) => {
          if (item.key === 'b') return 'quick';
          item.heartbeat({ done: 3, of: 10 });
          await release.promise;
          return 'slow';
        },
      },
    );
    const page = await waitFor('the progress of item a', async () => {
      const res = await call(deps, 'GET', `/batches/${batch.id}/items`);
      expect(res.status).toBe(200);
      const a = res.body.items.find((i: { key: string }) => i.key === 'a');
      return a.progress !== null && res.body;
    });
    const [a, b] = page.items;
    expect(a).toMatchObject({
      key: 'a',
      state: 'running',
      attempts: 1,
      output: null,
      error: null,
      progress: { done: 3, of: 10 },
    });
    expect(new Date(a.heartbeatAt).toISOString()).toBe(a.heartbeatAt);
    // The database's clock stamped it: within a minute of the database's now.
    const [{ ms }] = await db.sql<
      { ms: number }[]
    >`select extract(epoch from now() - ${a.heartbeatAt}::timestamptz) * 1000 as ms`;
    expect(Math.abs(ms)).toBeLessThan(60_000);
    // An item that never beat shows none.
    expect(b).toMatchObject({ key: 'b', progress: null, heartbeatAt: null });
    release.resolve();
    await runner.running(batch.id);
    await runner.close();
    const after = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { state: 'done' } });
    expect(after.body.items[0]).toMatchObject({ key: 'a', state: 'done', output: 'slow', progress: { done: 3, of: 10 } });
  });
});

describe('GET /batches/{id}/items over keys with control characters', () => {
  it('pages through keys holding a TAB or a CR with the next cursor it answered; a NUL after is refused', async () => {
    const tenant = uniqueTenant();
    const keys = ['a\tone', 'b\rtwo', 'c\u0001three', 'd four'];
    const { batch } = await createBatch(db.sql, {
      tenant,
      datasource: 'ds',
      job: 'test',
      params: {},
      requestKey: `k-${tenant}`,
      items: keys.map((key) => ({ key })),
    });
    const seen: string[] = [];
    let after: string | undefined;
    for (let page = 0; page < keys.length + 1; page++) {
      const res = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { limit: '1', ...(after ? { after } : {}) } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      seen.push(...res.body.items.map((i: { key: string }) => i.key));
      after = res.body.next ?? undefined;
      if (!after) break;
    }
    expect(seen).toEqual(keys);
    // The page that ends at the last item says so: no cursor to an empty page.
    const whole = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { limit: String(keys.length) } });
    expect(whole.body.items).toHaveLength(keys.length);
    expect(whole.body.next).toBeNull();
    const nul = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { after: 'a\u0000' } });
    expect(nul.status).toBe(400);
    expect(nul.body.error.message).toBe('after: must not contain a NUL character');
  });
});
