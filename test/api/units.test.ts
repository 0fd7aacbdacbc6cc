// The unit, process, concurrency and outbox routes; bad input is always a 4xx naming the field.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ApiDeps } from '../../src/api/index.js';
import { Leaser } from '../../src/lease/index.js';
import { defaultUnitJobs, defineUnitJob, outboxShard } from '../../src/units/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { apiDeps, call, InvokeEndpoint, uniqueTenant, type EventOptions } from './helpers.js';

let db: TestDatabase;
let endpoint: InvokeEndpoint;
let deps: ApiDeps;

/** A second unit job, with a config of its own and the default weight. */
const sync = defineUnitJob<{ everyMinutes?: number }>({
  name: 'sync',
  description: 'sync a tenant',
  config: z.object({ everyMinutes: z.number().int().positive().optional() }).strict(),
  intervalMs: 60_000,
  async run() {},
});

beforeAll(async () => {
  db = await testDatabase();
  endpoint = await InvokeEndpoint.start();
  deps = { ...apiDeps(db.sql, endpoint, { maxBodyBytes: 4096 }), unitJobs: defaultUnitJobs({ extra: [sync as never] }) };
});
afterAll(async () => {
  await endpoint.close();
  await db.close();
});

const hooks = ['https://hooks.example.com/a', 'http://127.0.0.1:9/b', 'https://c.example.org:8443/x?y=1'];
const putUnits = (tenant: string, body: unknown, d: ApiDeps = deps) => call(d, 'PUT', `/tenants/${encodeURIComponent(tenant)}/units`, { body });

describe('PUT /tenants/{tenant}/units', () => {
  it('registers outbox-delivery units with the endpoints as config, weighted by the endpoint count', async () => {
    const tenant = uniqueTenant();
    const res = await putUnits(tenant, { job: 'outbox-delivery', shards: 4, endpoints: hooks });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ tenant, job: 'outbox-delivery', shards: 4, weight: 3, added: 4, removed: 0 });
    const rows = await db.sql`select shard, job, weight, config, owner from leasehold_units where tenant = ${tenant} order by shard`;
    expect(rows).toEqual([0, 1, 2, 3].map((shard) => ({ shard, job: 'outbox-delivery', weight: 3, config: { endpoints: hooks }, owner: null })));
  });

  it('changes the shard count by adding or removing units, and takes an explicit weight', async () => {
    const tenant = uniqueTenant();
    await putUnits(tenant, { job: 'outbox-delivery', shards: 2, endpoints: hooks });
    const grown = await putUnits(tenant, { job: 'outbox-delivery', shards: 5, endpoints: hooks.slice(0, 1), weight: 7 });
    expect(grown.body).toMatchObject({ shards: 5, weight: 7, added: 3, removed: 0 });
    const shrunk = await putUnits(tenant, { job: 'outbox-delivery', shards: 1, endpoints: hooks.slice(0, 1) });
    expect(shrunk.body).toMatchObject({ shards: 1, weight: 1, added: 0, removed: 4 });
    const rows = await db.sql`select shard, weight from leasehold_units where tenant = ${tenant}`;
    expect(rows).toEqual([{ shard: 0, weight: 1 }]);
  });

  it('registers units of another unit job with any config its schema takes, weight 1 by default; weight 0 is allowed', async () => {
    const tenant = uniqueTenant();
    const res = await putUnits(tenant, { job: 'sync', shards: 3, config: { everyMinutes: 5 } });
    expect(res.body).toEqual({ tenant, job: 'sync', shards: 3, weight: 1, added: 3, removed: 0 });
    const paused = await putUnits(tenant, { job: 'sync', shards: 3, weight: 0 });
    expect(paused.body).toMatchObject({ weight: 0, added: 0, removed: 0 });
    expect(await db.sql`select distinct weight, config from leasehold_units where tenant = ${tenant}`).toEqual([{ weight: 0, config: {} }]);
    // Switching the tenant to another job replaces its units.
    const switched = await putUnits(tenant, { job: 'outbox-delivery', shards: 1, endpoints: hooks });
    expect(switched.body).toMatchObject({ added: 1, removed: 3 });
  });

  it('answers 404 unknown_job for a job that is not a unit job (a batch job included)', async () => {
    for (const job of ['nope', 'checksum']) {
      const res = await putUnits(uniqueTenant(), { job, shards: 1 });
      expect(res.status).toBe(404);
      expect(res.body.error).toEqual({ code: 'unknown_job', message: `job: unknown job "${job}"` });
    }
  });

  const bad: { name: string; body: unknown; tenant?: string; message: RegExp; status?: number; code?: string }[] = [
    { name: 'no body fields', body: {}, message: /^job: Required; shards: Required$/ },
    { name: 'shards 0', body: { job: 'sync', shards: 0 }, message: /^shards: must be a whole number from 1 to 10000$/ },
    { name: 'shards 10001', body: { job: 'sync', shards: 10_001 }, message: /^shards: must be a whole number from 1 to 10000$/ },
    { name: 'shards 1.5', body: { job: 'sync', shards: 1.5 }, message: /^shards: must be a whole number/ },
    { name: 'shards a string', body: { job: 'sync', shards: '3' }, message: /^shards: must be a whole number from 1 to 10000, got string$/ },
    { name: 'weight negative', body: { job: 'sync', shards: 1, weight: -1 }, message: /^weight: must be a whole number from 0 to/ },
    { name: 'weight null', body: { job: 'sync', shards: 1, weight: null }, message: /^weight: .*got null$/ },
    { name: 'endpoints missing', body: { job: 'outbox-delivery', shards: 1 }, message: /^endpoints: Required$/ },
    { name: 'endpoints empty', body: { job: 'outbox-delivery', shards: 1, endpoints: [] }, message: /^endpoints: must list at least one URL$/ },
    { name: 'endpoints a string', body: { job: 'outbox-delivery', shards: 1, endpoints: hooks[0] }, message: /^endpoints: must be an array of URLs, got string$/ },
    { name: 'endpoint not a URL', body: { job: 'outbox-delivery', shards: 1, endpoints: [hooks[0], 'not a url'] }, message: /^endpoints\[1\]: must be an absolute http:\/\/ or https:\/\/ URL$/ },
    { name: 'endpoint ftp', body: { job: 'outbox-delivery', shards: 1, endpoints: ['ftp://example.com/x'] }, message: /^endpoints\[0\]: must be an absolute http/ },
    { name: 'endpoint javascript:', body: { job: 'outbox-delivery', shards: 1, endpoints: ['javascript:alert(1)'] }, message: /^endpoints\[0\]: / },
    { name: 'endpoint a number', body: { job: 'outbox-delivery', shards: 1, endpoints: [42] }, message: /^endpoints\[0\]: must be a string, got number$/ },
    { name: 'too many endpoints', body: { job: 'outbox-delivery', shards: 1, endpoints: Array(33).fill(hooks[0]) }, message: /^endpoints: must list at most 32 URLs$/ },
    { name: 'endpoints in config, badly', body: { job: 'outbox-delivery', shards: 1, config: { endpoints: ['x'] } }, message: /^config\.endpoints\[0\]: / },
    { name: 'endpoints twice', body: { job: 'outbox-delivery', shards: 1, endpoints: hooks, config: { endpoints: hooks } }, message: /^endpoints: given twice/ },
    { name: 'unknown config field', body: { job: 'outbox-delivery', shards: 1, endpoints: hooks, config: { retries: 3 } }, message: /^config\.retries: unknown field$/ },
    { name: 'config of the wrong shape', body: { job: 'sync', shards: 1, config: { everyMinutes: 'often' } }, message: /^config\.everyMinutes: / },
    { name: 'config an array', body: { job: 'sync', shards: 1, config: [] }, message: /^config: must be a JSON object, got array$/ },
    { name: 'config with a NUL', body: { job: 'sync', shards: 1, config: { 'a\u0000': 1 } }, message: /^config: keys must not contain NUL/ },
    { name: 'unknown field', body: { job: 'sync', shards: 1, tenant: 'x' }, message: /^tenant: unknown field$/ },
    { name: 'job a number', body: { job: 5, shards: 1 }, message: /^job: must be a string, got number$/ },
    { name: 'body an array', body: [1], message: /^body: must be a JSON object, got array$/ },
    { name: 'tenant with a space', tenant: 'a b', body: { job: 'sync', shards: 1 }, message: /^tenant: may contain only/ },
    { name: 'tenant too long', tenant: 'x'.repeat(201), body: { job: 'sync', shards: 1 }, message: /^tenant: must be at most 200 characters$/ },
    { name: 'malformed JSON', body: '{"job":', message: /^body: malformed JSON/, code: 'invalid_json' },
  ];
  for (const c of bad) {
    it(`refuses ${c.name} with a 400 naming the field`, async () => {
      const res = await putUnits(c.tenant ?? uniqueTenant(), c.body);
      expect(res.status).toBe(c.status ?? 400);
      expect(res.body.error.code).toBe(c.code ?? 'invalid_request');
      expect(res.body.error.message).toMatch(c.message);
    });
  }
});

describe('DELETE /tenants/{tenant}/units and GET /units', () => {
  it("lists units with owner and claim time, filters by tenant, and deletes a tenant's units", async () => {
    const a = uniqueTenant('list');
    const b = uniqueTenant('list');
    await putUnits(a, { job: 'outbox-delivery', shards: 2, endpoints: hooks.slice(0, 2) });
    await putUnits(b, { job: 'sync', shards: 1 });
    const leaser = new Leaser(db.sql, { ttlMs: 5_000, heartbeatIntervalMs: 1_000 }, { unitsGained() {}, unitsLost() {}, inFlight: () => 0 });
    await leaser.heartbeat();
    await leaser.tick();
    try {
      const res = await call(deps, 'GET', '/units', { query: { tenant: a } });
      expect(res.status).toBe(200);
      expect(res.body.units).toEqual([0, 1].map((shard) => ({ tenant: a, shard, job: 'outbox-delivery', weight: 2, owner: leaser.processId, claimedAt: expect.any(String) })));
      expect(new Date(res.body.units[0].claimedAt).toISOString()).toBe(res.body.units[0].claimedAt);

      const all = await call(deps, 'GET', '/units');
      expect(all.body.units.map((u: { tenant: string }) => u.tenant)).toEqual(expect.arrayContaining([a, a, b]));
      const limited = await call(deps, 'GET', '/units', { query: { limit: '1' } });
      expect(limited.body.units).toHaveLength(1);

      const del = await call(deps, 'DELETE', `/tenants/${a}/units`);
      expect(del.status).toBe(200);
      expect(del.body).toEqual({ removed: 2 });
      expect((await call(deps, 'GET', '/units', { query: { tenant: a } })).body).toEqual({ units: [] });
      expect((await call(deps, 'DELETE', `/tenants/${a}/units`)).body).toEqual({ removed: 0 });
    } finally {
      await leaser.release();
      await leaser.deleteProcess();
    }
  });

  it('refuses a bad query with a 400 naming the field', async () => {
    for (const [query, message] of [
      [{ limit: '0' }, /^limit: must be an integer from 1 to 10000$/],
      [{ limit: 'ten' }, /^limit: /],
      [{ owner: 'x' }, /^owner: unknown field$/],
    ] as const) {
      const res = await call(deps, 'GET', '/units', { query });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(message);
    }
  });

  it('answers 405 with the allowed methods', async () => {
    const res = await call(deps, 'GET', '/tenants/x/units');
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe('PUT, DELETE');
  });
});

describe('GET /processes', () => {
  it('lists processes with role, liveness and the units and weight each owns, and the fleet against the fair share', async () => {
    const tenant = uniqueTenant('proc');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 3, endpoints: hooks.slice(0, 2) });
    const leaser = new Leaser(db.sql, { ttlMs: 5_000, heartbeatIntervalMs: 1_000, hostname: 'host-1', version: 'v9' }, { unitsGained() {}, unitsLost() {}, inFlight: () => 0 });
    await leaser.heartbeat();
    await leaser.tick();
    try {
      const res = await call(deps, 'GET', '/processes');
      expect(res.status).toBe(200);
      const mine = res.body.processes.find((p: { id: string }) => p.id === leaser.processId);
      expect(mine).toEqual({
        id: leaser.processId,
        role: 'fleet',
        retiring: false,
        hostname: 'host-1',
        version: 'v9',
        startedAt: expect.any(String),
        expiresAt: expect.any(String),
        live: true,
        units: leaser.owned().length,
        weight: leaser.owned().reduce((s, u) => s + u.weight, 0),
      });
      expect(mine.units).toBeGreaterThanOrEqual(3);
      expect(Date.parse(mine.expiresAt)).toBeGreaterThan(Date.parse(mine.startedAt));
      // The only live process: its fair share is all the weight, which it owns.
      expect(res.body.fleet).toEqual({
        desired: expect.any(Number),
        live: 1,
        coming: 0,
        retiring: 0,
        batch: 0,
        totalWeight: mine.weight,
        fairShare: mine.weight,
        minWeight: mine.weight,
        maxWeight: mine.weight,
        starving: 0,
      });
    } finally {
      await leaser.release();
      await leaser.deleteProcess();
      await call(deps, 'DELETE', `/tenants/${tenant}/units`);
    }
  });
});

describe('GET/PUT /concurrency', () => {
  it('reads and sets the desired count of live processes', async () => {
    // Against the fleet: nothing live, coming, retiring or sent for batches here.
    const none = { live: 0, coming: 0, retiring: 0, batch: 0 };
    expect((await call(deps, 'GET', '/concurrency')).body).toEqual({ desired: 3, ...none });
    const set = await call(deps, 'PUT', '/concurrency', { body: { desired: 7 } });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ desired: 7, ...none });
    expect((await call(deps, 'GET', '/concurrency')).body).toEqual({ desired: 7, ...none });
    expect((await call(deps, 'PUT', '/concurrency', { body: { desired: 0 } })).body).toEqual({ desired: 0, ...none });
    expect((await call(deps, 'PUT', '/concurrency', { body: { desired: 1000 } })).body).toEqual({ desired: 1000, ...none });
  });

  it('refuses a desired count outside 0..1000 or of the wrong type, changing nothing', async () => {
    await call(deps, 'PUT', '/concurrency', { body: { desired: 4 } });
    for (const [body, message] of [
      [{ desired: -1 }, /^desired: must be a whole number from 0 to 1000$/],
      [{ desired: 1001 }, /^desired: must be a whole number from 0 to 1000$/],
      [{ desired: 2.5 }, /^desired: must be a whole number/],
      [{ desired: '5' }, /^desired: must be a whole number from 0 to 1000, got string$/],
      [{}, /^desired: Required$/],
      [{ desired: 1, extra: true }, /^extra: unknown field$/],
      ['5', /^body: must be a JSON object, got number$/],
    ] as const) {
      const res = await call(deps, 'PUT', '/concurrency', { body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.message).toMatch(message);
    }
    expect((await call(deps, 'GET', '/concurrency')).body).toMatchObject({ desired: 4 });
  });
});

describe('POST /tenants/{tenant}/outbox', () => {
  const send = (tenant: string, body: unknown, options: Omit<EventOptions, 'body'> = {}) =>
    call(deps, 'POST', `/tenants/${encodeURIComponent(tenant)}/outbox`, { ...options, body });

  it('enqueues on the shard the key hashes to: 201 { id, shard }', async () => {
    const tenant = uniqueTenant('out');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 5, endpoints: hooks });
    const ids = new Set<number>();
    for (const key of ['order-1', 'order-2', 'customer/9', 'ключ']) {
      const payload = { key, nested: { list: [1, 'two', null] } };
      const res = await send(tenant, { key, payload });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({ id: expect.any(Number), shard: outboxShard(key, 5) });
      ids.add(res.body.id);
      const [row] = await db.sql`select tenant, shard, key, payload, attempts, delivered_at from leasehold_outbox where id = ${res.body.id}`;
      expect(row).toEqual({ tenant, shard: res.body.shard, key, payload, attempts: 0, delivered_at: null });
    }
    expect(ids.size).toBe(4);
    // Any JSON value is a payload, null and strings included.
    for (const payload of [null, 'text', 0, [1]]) {
      const res = await send(tenant, { key: 'k', payload });
      expect(res.status).toBe(201);
      const [row] = await db.sql<{ payload: unknown }[]>`select payload from leasehold_outbox where id = ${res.body.id}`;
      expect(row.payload).toEqual(payload);
    }
  });

  it('answers 404 no_outbox_units for a tenant without outbox-delivery units', async () => {
    const none = await send(uniqueTenant('out'), { key: 'k', payload: {} });
    expect(none.status).toBe(404);
    expect(none.body.error.code).toBe('no_outbox_units');
    expect(none.body.error.message).toMatch(/has no outbox-delivery units of weight > 0 \(nothing would deliver\): register them first with PUT \/tenants\/.*\/units/);
    const other = uniqueTenant('out');
    await putUnits(other, { job: 'sync', shards: 2 });
    expect((await send(other, { key: 'k', payload: {} })).body.error.code).toBe('no_outbox_units');
    // Units of weight 0 are never claimed: a message there would never be delivered.
    const idle = uniqueTenant('out');
    await putUnits(idle, { job: 'outbox-delivery', shards: 2, endpoints: hooks, weight: 0 });
    expect((await send(idle, { key: 'k', payload: {} })).body.error.code).toBe('no_outbox_units');
  });

  it('refuses bad input with a 4xx naming the field', async () => {
    const tenant = uniqueTenant('out');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 1, endpoints: hooks });
    for (const [body, status, message] of [
      [{ payload: {} }, 400, /^key: Required$/],
      [{ key: 'k' }, 400, /^payload: Required$/],
      [{ key: '', payload: 1 }, 400, /^key: must not be empty$/],
      [{ key: 'k'.repeat(201), payload: 1 }, 400, /^key: must be at most 200 characters$/],
      [{ key: 7, payload: 1 }, 400, /^key: must be a string, got number$/],
      [{ key: 'k', payload: { 'a\u0000': 1 } }, 400, /^payload: keys must not contain NUL/],
      [{ key: 'k', payload: 'a\u0000' }, 400, /^payload: must not contain NUL/],
      [{ key: 'k', payload: 1, extra: 2 }, 400, /^extra: unknown field$/],
      [{ key: 'k', payload: 'x'.repeat(5000) }, 413, /^body: .* over the limit/],
    ] as const) {
      const res = await send(tenant, body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(status);
      expect(res.body.error.message).toMatch(message);
    }
    const badTenant = await send('a/b', { key: 'k', payload: 1 });
    expect(badTenant.status).toBe(400);
    expect(badTenant.body.error.message).toMatch(/^tenant: /);
  });

  it('never answers 5xx to random bodies on the new routes', async () => {
    const tenant = uniqueTenant('fuzz');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 2, endpoints: hooks });
    const values: unknown[] = [null, true, 0, -1, 1e308, 'x', '', [], {}, [null], { a: [] }, 'http://x', ['http://x'], 10_001, 2 ** 53, NaN];
    const pick = () => values[Math.floor(Math.random() * values.length)];
    const fields = ['job', 'shards', 'weight', 'endpoints', 'config', 'key', 'payload', 'desired', 'tenant'];
    for (let i = 0; i < 150; i++) {
      const body: Record<string, unknown> = {};
      for (const f of fields) if (Math.random() < 0.5) body[f] = pick();
      for (const [method, path] of [
        ['PUT', `/tenants/${tenant}-${i}/units`],
        ['POST', `/tenants/${tenant}/outbox`],
        ['PUT', '/concurrency'],
      ]) {
        const res = await call(deps, method, path, { body });
        expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).toBeLessThan(500);
      }
    }
    await call(deps, 'PUT', '/concurrency', { body: { desired: 3 } });
  });

  it('has a route per new path and a 404 for unknown ones', async () => {
    expect((await call(deps, 'GET', `/tenants/x/${randomUUID()}`)).status).toBe(404);
    expect((await call(deps, 'GET', '/tenants/x/outbox')).status).toBe(405);
  });
});
