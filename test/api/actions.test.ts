// POST /actions and GET /actions/{id} (docs/api.md, "Bulk actions"): a filter, a request key,
// the action's progress, and the refusals.
import { describe, expect, it } from 'vitest';

import { call, uniqueTenant, apiSuite } from '../support/api.js';

const suite = apiSuite({ 'a.txt': 'alpha' }, { maxOpen: 20 });

const start = (tenant: string) =>
  call(suite.deps, 'POST', '/batches', {
    body: { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir } },
  });

describe('POST /actions', () => {
  it('pauses every running batch of a tenant, answers the same action for its key, and GET follows it', async () => {
    const tenant = uniqueTenant();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await start(tenant)).body.id);
    const body = { action: 'pause', filter: { tenant, status: 'running' } };
    const made = await call(suite.deps, 'POST', '/actions', { body, headers: { 'idempotency-key': `k-${tenant}` } });
    expect(made.status).toBe(200);
    expect(made.body).toMatchObject({ action: 'pause', matched: 3, done: 3, skipped: 0, remaining: 0, created: true });
    expect(made.body.filter).toEqual({ tenant, status: ['running'] });
    for (const id of ids) expect((await call(suite.deps, 'GET', `/batches/${id}`)).body.paused).toBe(true);
    const again = await call(suite.deps, 'POST', '/actions', { body: { ...body, requestKey: `k-${tenant}` } });
    expect(again.body).toMatchObject({ id: made.body.id, created: false, done: 3 });
    const shown = await call(suite.deps, 'GET', `/actions/${made.body.id}`);
    expect(shown.status).toBe(200);
    expect(shown.body).toMatchObject({ id: made.body.id, matched: 3, finishedAt: expect.any(String) });
  });

  it('refuses an empty filter, a missing request key, an unknown action; 404 for an unknown id', async () => {
    const empty = await call(suite.deps, 'POST', '/actions', { body: { action: 'cancel', filter: {}, requestKey: 'x' } });
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toMatch(/^filter: give at least one/);
    const keyless = await call(suite.deps, 'POST', '/actions', { body: { action: 'cancel', filter: { tenant: 't' } } });
    expect(keyless.status).toBe(400);
    expect(keyless.body.error.message).toMatch(/^requestKey: Required/);
    const unknown = await call(suite.deps, 'POST', '/actions', {
      body: { action: 'delete', filter: { tenant: 't' }, requestKey: 'y' },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.message).toMatch(/^action: /);
    const missing = await call(suite.deps, 'GET', '/actions/00000000-0000-4000-8000-000000000000');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('action_not_found');
  });
});
