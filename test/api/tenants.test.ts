// GET /tenants/{tenant}, PUT /tenants/{tenant}/limits and batch priorities through the API
// (docs/design.md, "Tenant fairness").
import { describe, expect, it } from 'vitest';

import { call, uniqueTenant, apiSuite } from '../support/api.js';

const suite = apiSuite({ 'a.txt': 'alpha' }, { maxOpen: 20 });

const start = (tenant: string, extra: Record<string, unknown> = {}) =>
  call(suite.deps, 'POST', '/batches', {
    body: { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, ...extra },
  });

describe('batch priority', () => {
  it('is stored and shown by a start, GET /batches/{id} and GET /batches; 5 when not given', async () => {
    const tenant = uniqueTenant();
    const urgent = await start(tenant, { priority: 9 });
    expect(urgent.status).toBe(201);
    expect(urgent.body.priority).toBe(9);
    const plain = await start(tenant);
    expect(plain.body.priority).toBe(5);
    expect((await call(suite.deps, 'GET', `/batches/${urgent.body.id}`)).body.priority).toBe(9);
    const list = await call(suite.deps, 'GET', '/batches', { query: { tenant } });
    expect(list.body.batches.map((b: { priority: number }) => b.priority).sort()).toEqual([5, 9]);
  });

  it('refuses a priority that is not a whole number from 0 to 9, naming the field', async () => {
    for (const priority of [10, -1, 2.5, '3']) {
      const res = await start(uniqueTenant(), { priority });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/^priority: /);
    }
  });
});

describe('tenants', () => {
  it('shows waiting batches in the order they will run, the limit and the oldest wait', async () => {
    const tenant = uniqueTenant();
    const low = await start(tenant, { priority: 1 });
    const high = await start(tenant, { priority: 7 });
    const res = await call(suite.deps, 'GET', `/tenants/${tenant}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      tenant,
      running: 0,
      waiting: 2,
      maxRunning: null,
      effectiveMaxRunning: null,
      runningBatches: [],
    });
    expect(res.body.waitingBatches.map((b: { id: string; priority: number }) => [b.id, b.priority])).toEqual([
      [high.body.id, 7],
      [low.body.id, 1],
    ]);
    expect(res.body.oldestWaitMs).toBeGreaterThanOrEqual(0);
    expect(res.body.waitingBatches[0]).toMatchObject({ datasource: 'files', job: 'checksum' });
  });

  it('answers zeros for a tenant with no batch', async () => {
    const res = await call(suite.deps, 'GET', `/tenants/${uniqueTenant()}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ running: 0, waiting: 0, oldestWaitMs: null, waitingBatches: [], runningBatches: [] });
  });

  it('sets a tenant limit, shows it, and goes back to the default with null', async () => {
    const tenant = uniqueTenant();
    const set = await call(suite.deps, 'PUT', `/tenants/${tenant}/limits`, { body: { maxRunning: 2 } });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ tenant, maxRunning: 2, effectiveMaxRunning: 2 });
    expect((await call(suite.deps, 'GET', `/tenants/${tenant}`)).body.maxRunning).toBe(2);
    const withDefault = { ...suite.deps, config: { ...suite.deps.config, runner: { maxRunning: 3 } } };
    const reset = await call(withDefault, 'PUT', `/tenants/${tenant}/limits`, { body: { maxRunning: null } });
    expect(reset.body).toMatchObject({ maxRunning: null, effectiveMaxRunning: 3 });
  });

  it('refuses a limit that is not a whole number ≥ 0 or null, and unknown fields', async () => {
    const tenant = uniqueTenant();
    for (const body of [{ maxRunning: -1 }, { maxRunning: 1.5 }, { maxRunning: '2' }, {}, { maxRunning: 1, extra: true }]) {
      const res = await call(suite.deps, 'PUT', `/tenants/${tenant}/limits`, { body });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect((await call(suite.deps, 'GET', `/tenants/${tenant}/limits`)).status).toBe(405);
  });

  it('sends the next waiting batch to a worker when a running one is cancelled', async () => {
    const tenant = uniqueTenant();
    await call(suite.deps, 'PUT', `/tenants/${tenant}/limits`, { body: { maxRunning: 1 } });
    const first = await start(tenant);
    const second = await start(tenant);
    // The first runs (as if a worker took it).
    await suite.db
      .sql`insert into leasehold_runs (id, batch_id, process) values (gen_random_uuid(), ${first.body.id}, gen_random_uuid())`;
    await suite.db.sql`update leasehold_batches set live_runs = 1 where id = ${first.body.id}`;
    expect((await call(suite.deps, 'GET', `/tenants/${tenant}`)).body).toMatchObject({ running: 1, waiting: 1 });
    const before = suite.endpoint.invokes.filter((i) => (i.payload as { batchId?: string }).batchId === second.body.id).length;
    expect((await call(suite.deps, 'POST', `/batches/${first.body.id}/cancel`)).status).toBe(200);
    expect((await call(suite.deps, 'GET', `/tenants/${tenant}`)).body).toMatchObject({ running: 0, waiting: 1 });
    const after = suite.endpoint.invokes.filter((i) => (i.payload as { batchId?: string }).batchId === second.body.id).length;
    expect(after).toBe(before + 1);
  });
});

describe('tenant usage (docs/design.md, "Usage and cost")', () => {
  it('answers the usage recorded in [from, to), priced at the configured prices, and refuses a bad range', async () => {
    const tenant = uniqueTenant('usage');
    const { body: b } = await start(tenant);
    // Two runs of the batch as their ends record them: one an hour ago, one now (2 GB for 1.5 s, 3 GETs).
    const row = (id: string, process: string, ms: number) => suite.db.sql`insert into leasehold_run_usage
        (run_id, batch_id, tenant, process, worker_ms, memory_mb, architecture, items, s3_get)
      values (${id}, ${b.id}, ${tenant}, ${process}, ${ms}, 2048, 'arm64', 5, 3)`;
    const [p1, p2] = [crypto.randomUUID(), crypto.randomUUID()];
    await row(crypto.randomUUID(), p1, 1_500);
    await row(crypto.randomUUID(), p2, 4_000);
    await suite.db.sql`update leasehold_run_usage set recorded_at = now() - interval '1 hour' where process = ${p2}`;
    const prices = {
      region: 'test',
      overridden: true,
      table: {
        lambdaGbSecond: { x86_64: 1, arm64: 0.5 },
        lambdaRequest: { x86_64: 0, arm64: 0.25 },
        s3PerThousand: { get: 1000, put: 0, list: 0 },
      },
    };
    const deps = { ...suite.deps, config: { ...suite.deps.config, prices } };
    const from = new Date(Date.now() - 30 * 60_000).toISOString();
    const recent = await call(deps, 'GET', `/tenants/${tenant}`, { query: { from } });
    expect(recent.status).toBe(200);
    // 1.5 s × 2 GB = 3 GB-s at 0.5, one invocation at 0.25, 3 GETs at 1 each.
    expect(recent.body.usage).toEqual({
      from,
      to: expect.any(String),
      workerMs: 1_500,
      gbSeconds: 3,
      runs: 1,
      diedRuns: 0,
      invocations: 1,
      items: 5,
      s3Requests: { get: 3, put: 0, list: 0 },
      estimatedCost: { currency: 'USD', total: 4.75, lambda: 1.75, s3: 3, region: 'test', overridden: true },
    });
    const all = await call(deps, 'GET', `/tenants/${tenant}`);
    expect(all.body.usage).toMatchObject({ workerMs: 5_500, runs: 2, invocations: 2, items: 10 });
    // The batch itself sums both.
    expect((await call(deps, 'GET', `/batches/${b.id}`)).body.usage).toMatchObject({ workerMs: 5_500, runs: 2 });
    for (const query of [{ from: 'yesterday' }, { from, to: from }, { since: from }] as Record<string, string>[]) {
      const bad = await call(deps, 'GET', `/tenants/${tenant}`, { query });
      expect(bad.status, JSON.stringify(query)).toBe(400);
    }
  });
});
