// Concurrency pools and early completion through the API (docs/design.md, "Concurrency pools" and
// "End"; issue 39 items 4 and 5): PUT /pools/{name} sets or changes a pool, GET shows it with its
// items in flight, a start names it, and a start's completion is stored and shown.
import { describe, expect, it } from 'vitest';

import { call, uniqueTenant, apiSuite } from '../support/api.js';

const suite = apiSuite({ 'a.txt': 'alpha' }, { maxOpen: 20 });

const start = (tenant: string, extra: Record<string, unknown> = {}) =>
  call(suite.deps, 'POST', '/batches', {
    body: { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, ...extra },
  });

const uid = () => Math.random().toString(36).slice(2, 8);

describe('pools', () => {
  it('PUT /pools/{name} sets a limit, then changes it to per key; GET shows it, with none in flight', async () => {
    const name = `api-${uid()}`;
    const set = await call(suite.deps, 'PUT', `/pools/${name}`, { body: { limit: 20 } });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ name, limit: 20, perKey: null, total: 20, inFlight: 0, runs: 0, keys: [] });
    const keyed = await call(suite.deps, 'PUT', `/pools/${name}`, { body: { perKey: 2, total: 5 } });
    expect(keyed.body).toMatchObject({ name, limit: null, perKey: 2, total: 5 });
    expect((await call(suite.deps, 'GET', `/pools/${name}`)).body).toMatchObject({ name, perKey: 2, total: 5 });
    const list = await call(suite.deps, 'GET', '/pools');
    expect(list.body.pools.map((p: { name: string }) => p.name)).toContain(name);
  });

  it('refuses bad limits and answers 404 for a pool that does not exist', async () => {
    for (const body of [{ limit: 0 }, { limit: 1.5 }, { limit: 2, perKey: 1 }, {}, { total: 3 }, { perKey: 100_001 }]) {
      const res = await call(suite.deps, 'PUT', `/pools/bad-${uid()}`, { body });
      expect(res.status).toBe(400);
    }
    const missing = await call(suite.deps, 'GET', `/pools/missing-${uid()}`);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
  });

  it('a start names a pool that exists, and the batch shows it; an unknown pool is refused', async () => {
    const name = `start-${uid()}`;
    await call(suite.deps, 'PUT', `/pools/${name}`, { body: { limit: 3 } });
    const ok = await start(uniqueTenant(), { pool: name });
    expect(ok.status).toBe(201);
    expect(ok.body.pool).toBe(name);
    const refused = await start(uniqueTenant(), { pool: `nope-${uid()}` });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toMatch(/pool "nope-.*" does not exist/);
  });
});

describe('completion', () => {
  it('is stored and shown: minSucceeded, firstSucceeded as 1, none as null; a bad one is refused', async () => {
    expect((await start(uniqueTenant(), { completion: { minSucceeded: 3 } })).body.completion).toEqual({ minSucceeded: 3 });
    expect((await start(uniqueTenant(), { completion: 'firstSucceeded' })).body.completion).toEqual({ minSucceeded: 1 });
    expect((await start(uniqueTenant())).body.completion).toBeNull();
    for (const completion of [{ minSucceeded: 0 }, 'lastSucceeded', { minSucceeded: 2, x: 1 }]) {
      const res = await start(uniqueTenant(), { completion });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/^completion/);
    }
  });
});
