// Tenant-scoped batch routes (`/tenants/{tenant}/batches…`, docs/api.md) and `toleratedFailures`
// through the API handler.
import { describe, expect, it } from 'vitest';

import { PermanentItemError, Runner } from '../../src/batch/index.js';

import { call, uniqueTenant, apiSuite } from '../support/api.js';

const suite = apiSuite({ 'a.txt': 'alpha', 'b.txt': 'beta', 'c.txt': 'gamma' }, { maxOpen: 20 });

const startBody = (extra: Record<string, unknown> = {}) => ({
  datasource: 'files',
  job: 'checksum',
  params: { dir: suite.dir },
  ...extra,
});

describe('toleratedFailures on POST /batches', () => {
  it('is stored and shown with the allowed count; a percent is of the items', async () => {
    const tenant = uniqueTenant();
    const byCount = await call(suite.deps, 'POST', '/batches', { body: startBody({ tenant, toleratedFailures: { count: 1 } }) });
    expect(byCount.status).toBe(201);
    expect(byCount.body).toMatchObject({ toleratedFailures: { count: 1 }, allowedFailures: 1, total: 3 });
    const byPercent = await call(suite.deps, 'POST', '/batches', {
      body: startBody({ tenant, toleratedFailures: { percent: 66.7 } }),
    });
    expect(byPercent.body).toMatchObject({ toleratedFailures: { percent: 66.7 }, allowedFailures: 2 });
    const none = await call(suite.deps, 'POST', '/batches', { body: startBody({ tenant }) });
    expect(none.body).toMatchObject({ toleratedFailures: null, allowedFailures: null });
    const nullGiven = await call(suite.deps, 'POST', '/batches', { body: startBody({ tenant, toleratedFailures: null }) });
    expect(nullGiven.body).toMatchObject({ toleratedFailures: null, allowedFailures: null });

    const shown = await call(suite.deps, 'GET', `/batches/${byPercent.body.id}`);
    expect(shown.body).toMatchObject({ toleratedFailures: { percent: 66.7 }, allowedFailures: 2 });
    const listed = await call(suite.deps, 'GET', '/batches', { query: { tenant } });
    expect(listed.body.batches.map((b: { toleratedFailures: unknown }) => b.toleratedFailures)).toEqual([
      null,
      null,
      { percent: 66.7 },
      { count: 1 },
    ]);
  });

  it('refuses a tolerance out of range with a 400 naming the field, and stores nothing', async () => {
    const tenant = uniqueTenant();
    const cases: [unknown, string][] = [
      [{ count: -1 }, 'toleratedFailures.count: must be a whole number from 0 to 2147483647'],
      [{ count: 1.5 }, 'toleratedFailures.count: must be a whole number from 0 to 2147483647'],
      [{ count: '3' }, 'toleratedFailures.count: must be a whole number from 0 to 2147483647, got string'],
      [{ percent: 101 }, 'toleratedFailures.percent: must be a number from 0 to 100'],
      [{ percent: -1 }, 'toleratedFailures.percent: must be a number from 0 to 100'],
      [{ count: 1, percent: 5 }, 'toleratedFailures: must be { count } or { percent }: give exactly one'],
      [{}, 'toleratedFailures: must be { count } or { percent }: give exactly one'],
      [{ counts: 1 }, 'toleratedFailures.counts: unknown field'],
      [5, 'toleratedFailures: must be { count } or { percent }, got number'],
    ];
    for (const [t, message] of cases) {
      const res = await call(suite.deps, 'POST', '/batches', { body: startBody({ tenant, toleratedFailures: t }) });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toContain(message);
    }
    expect((await call(suite.deps, 'GET', '/batches', { query: { tenant } })).body.batches).toEqual([]);
  });

  it('a batch over its tolerance ends failed with the reason; within it, succeeded with its failed items listed', async () => {
    const run = async (toleratedFailures: unknown) => {
      const tenant = uniqueTenant();
      const created = await call(suite.deps, 'POST', `/tenants/${tenant}/batches`, { body: startBody({ toleratedFailures }) });
      expect(created.status).toBe(201);
      const runner = new Runner(suite.db.sql, { beatMs: 50, staleMs: 5_000, parallel: 1 });
      await runner.takeOver(
        () => ({
          attempts: 1,
          work: async ({ key }) => {
            if (key !== 'a.txt') throw new PermanentItemError(`${key} unreadable`);
            return 'ok';
          },
        }),
        created.body.id,
      );
      await runner.running(created.body.id);
      await runner.close();
      return { tenant, id: created.body.id as string };
    };
    const within = await run({ count: 2 });
    const ok = await call(suite.deps, 'GET', `/tenants/${within.tenant}/batches/${within.id}`);
    expect(ok.body).toMatchObject({ status: 'succeeded', reason: null, counts: { done: 1, failed: 2 }, allowedFailures: 2 });
    const failed = await call(suite.deps, 'GET', `/tenants/${within.tenant}/batches/${within.id}/items`, {
      query: { state: 'failed' },
    });
    expect(failed.body.items.map((i: { key: string }) => i.key)).toEqual(['b.txt', 'c.txt']);

    const over = await run({ count: 0 });
    const bad = await call(suite.deps, 'GET', `/batches/${over.id}`);
    expect(bad.body).toMatchObject({ status: 'failed', counts: { done: 1, failed: 1, pending: 1, running: 0 } });
    expect(bad.body.reason).toBe('more items failed than tolerated: 1 failed, 0 tolerated (count 0)');
  });
});

describe('tenant-scoped batch routes', () => {
  it('start, list, show, items, finished, cancel and redrive on /tenants/{tenant}/batches…', async () => {
    const tenant = uniqueTenant('acme');
    const created = await call(suite.deps, 'POST', `/tenants/${tenant}/batches`, {
      body: startBody(),
      headers: { 'Idempotency-Key': 'scoped-1' },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ tenant, requestKey: 'scoped-1', created: true, total: 3 });
    const id = created.body.id as string;
    expect(created.headers.location).toBe(`/tenants/${tenant}/batches/${id}`);
    // The same key answers the same batch, on either route; the body may name the tenant too.
    const again = await call(suite.deps, 'POST', `/tenants/${tenant}/batches`, {
      body: startBody({ tenant, requestKey: 'scoped-1' }),
    });
    expect(again).toMatchObject({ status: 200, body: { id, created: false } });
    const unscoped = await call(suite.deps, 'POST', '/batches', { body: startBody({ tenant, requestKey: 'scoped-1' }) });
    expect(unscoped).toMatchObject({ status: 200, body: { id, created: false } });

    const list = await call(suite.deps, 'GET', `/tenants/${tenant}/batches`, { query: { status: 'open' } });
    expect(list.status).toBe(200);
    expect(list.body.batches.map((b: { id: string }) => b.id)).toEqual([id]);
    const shown = await call(suite.deps, 'GET', `/tenants/${tenant}/batches/${id}`);
    expect(shown).toMatchObject({ status: 200, body: { id, tenant, status: 'open' } });
    expect(typeof shown.body.ageMs).toBe('number');
    const items = await call(suite.deps, 'GET', `/tenants/${tenant}/batches/${id}/items`, { query: { limit: '2' } });
    expect(items.body).toMatchObject({ items: [{ key: 'a.txt' }, { key: 'b.txt' }], next: 'b.txt' });
    const finished = await call(suite.deps, 'GET', `/tenants/${tenant}/batches/${id}/finished`, { query: { buckets: '5' } });
    expect(finished.status).toBe(200);
    expect(finished.body.buckets.length).toBeGreaterThan(0);
    const cancelled = await call(suite.deps, 'POST', `/tenants/${tenant}/batches/${id}/cancel`);
    expect(cancelled).toMatchObject({ status: 200, body: { id, status: 'cancelled' } });
    const redrive = await call(suite.deps, 'POST', `/tenants/${tenant}/batches/${id}/redrive`);
    expect(redrive).toMatchObject({ status: 400, body: { error: { code: 'batch_cancelled' } } });
  });

  it("another tenant's batch answers 404 on every scoped route and is left as it was", async () => {
    const owner = uniqueTenant('owner');
    const other = uniqueTenant('other');
    const created = await call(suite.deps, 'POST', `/tenants/${owner}/batches`, { body: startBody() });
    const id = created.body.id as string;
    const routes: [string, string][] = [
      ['GET', `/tenants/${other}/batches/${id}`],
      ['GET', `/tenants/${other}/batches/${id}/items`],
      ['GET', `/tenants/${other}/batches/${id}/finished`],
      ['POST', `/tenants/${other}/batches/${id}/cancel`],
      ['POST', `/tenants/${other}/batches/${id}/redrive`],
    ];
    for (const [method, path] of routes) {
      const res = await call(suite.deps, method, path);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error).toEqual({ code: 'batch_not_found', message: `no batch ${id}` });
    }
    expect((await call(suite.deps, 'GET', `/batches/${id}`)).body.status).toBe('open');
    expect((await call(suite.deps, 'GET', `/tenants/${other}/batches`)).body.batches).toEqual([]);
    // An unknown id and a malformed one answer the same.
    expect((await call(suite.deps, 'GET', `/tenants/${owner}/batches/00000000-0000-4000-8000-000000000000`)).status).toBe(404);
    expect((await call(suite.deps, 'GET', `/tenants/${owner}/batches/nope`)).status).toBe(404);
  });

  it("refuses a body or query tenant that differs from the path's, and a method the route does not take", async () => {
    const tenant = uniqueTenant();
    const start = await call(suite.deps, 'POST', `/tenants/${tenant}/batches`, { body: startBody({ tenant: 'someone-else' }) });
    expect(start.status).toBe(400);
    expect(start.body.error.message).toBe(`tenant: differs from the path's tenant "${tenant}"; leave it out or make them equal`);
    const list = await call(suite.deps, 'GET', `/tenants/${tenant}/batches`, { query: { tenant: 'someone-else' } });
    expect(list.status).toBe(400);
    const same = await call(suite.deps, 'GET', `/tenants/${tenant}/batches`, { query: { tenant } });
    expect(same.status).toBe(200);
    const wrong = await call(suite.deps, 'DELETE', `/tenants/${tenant}/batches`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST, GET');
    // A path tenant the API would refuse to store answers 400 naming it.
    const bad = await call(suite.deps, 'POST', `/tenants/${encodeURIComponent('a\u0001b')}/batches`, { body: startBody() });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^tenant: /);
  });
});
