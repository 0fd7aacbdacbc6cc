// The unit, process, concurrency and outbox routes; bad input is always a 4xx naming the field.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ApiDeps } from '../../src/api/index.js';
import { Leaser } from '../../src/lease/index.js';
import {
  defaultUnitJobs,
  defineUnitJob,
  outboxDelivery,
  outboxShard,
  UnitJobRegistry,
  type AddressLookup,
} from '../../src/units/index.js';
import { startRun } from '../../src/units/sql/runs.js';
import { testDatabase } from '../support/db.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { apiDeps, call, InvokeEndpoint, uniqueTenant, type EventOptions } from '../support/api.js';

const db = useTestDatabase();
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

/**
 * A resolver of fixed answers, so registrations never wait on the machine's DNS: names not in
 * the table do not resolve (`ENOTFOUND`), as they would not on the open internet.
 */
const names: Record<string, string[]> = {
  'public.test': ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
  'private.test': ['10.1.2.3'],
  'metadata.test': ['169.254.169.254'],
  'mixed.test': ['93.184.215.14', '172.20.0.9'],
  'ula.test': ['fd00:ec2::254'],
};
const lookup: AddressLookup = async (host) => {
  const found = names[host];
  if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};
const units = (outbox: Parameters<typeof outboxDelivery>[0] = {}) =>
  defaultUnitJobs({ outbox: outboxDelivery({ lookup, ...outbox }) as never, extra: [sync as never] });

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  deps = { ...apiDeps(db.sql, endpoint, { maxBodyBytes: 4096 }), unitJobs: units() };
});
afterAll(async () => {
  await endpoint.close();
});

const hooks = ['https://hooks.example.com/a', 'http://93.184.215.14:9/b', 'https://public.test:8443/x?y=1'];
const putUnits = (tenant: string, body: unknown, d: ApiDeps = deps) =>
  call(d, 'PUT', `/tenants/${encodeURIComponent(tenant)}/units`, { body });

describe('PUT /tenants/{tenant}/units', () => {
  it('registers outbox-delivery units with the endpoints as config, weighted by the endpoint count', async () => {
    const tenant = uniqueTenant();
    const res = await putUnits(tenant, { job: 'outbox-delivery', shards: 4, endpoints: hooks });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ tenant, job: 'outbox-delivery', shards: 4, weight: 3, added: 4, removed: 0 });
    const rows =
      await db.sql`select shard, job, weight, config, owner from leasehold_units where tenant = ${tenant} order by shard`;
    expect(rows).toEqual(
      [0, 1, 2, 3].map((shard) => ({ shard, job: 'outbox-delivery', weight: 3, config: { endpoints: hooks }, owner: null })),
    );
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
    expect(await db.sql`select distinct weight, config from leasehold_units where tenant = ${tenant}`).toEqual([
      { weight: 0, config: {} },
    ]);
    // Switching the tenant to another job replaces its units.
    const switched = await putUnits(tenant, { job: 'outbox-delivery', shards: 1, endpoints: hooks });
    expect(switched.body).toMatchObject({ added: 1, removed: 3 });
  });

  it('answers 404 unknown_job for a job that is not a unit job (a batch job included), naming the unit jobs there are', async () => {
    for (const job of ['nope', 'checksum']) {
      const res = await putUnits(uniqueTenant(), { job, shards: 1 });
      expect(res.status).toBe(404);
      expect(res.body.error).toEqual({
        code: 'unknown_job',
        message: `job: unknown unit job "${job}" (this app's unit jobs: outbox-delivery, sync)`,
      });
    }
  });

  it('hints at outboxDelivery() when an app without it is asked for outbox-delivery units', async () => {
    const only = (jobs: UnitJobRegistry) => ({ ...deps, unitJobs: jobs });
    const withSync = await putUnits(
      uniqueTenant(),
      { job: 'outbox-delivery', shards: 1, endpoints: hooks },
      only(new UnitJobRegistry([sync as never])),
    );
    expect(withSync.status).toBe(404);
    expect(withSync.body.error).toEqual({
      code: 'unknown_job',
      message:
        `job: unknown unit job "outbox-delivery" (this app's unit jobs: sync); ` +
        "add outboxDelivery() (from 'leasehold') to createHandlers' unitJobs to deliver outboxes",
    });
    const none = await putUnits(uniqueTenant(), { job: 'outbox-delivery', shards: 1 }, only(new UnitJobRegistry([])));
    expect(none.body.error.message).toMatch(
      /^job: unknown unit job "outbox-delivery" \(this app has no unit jobs\); add outboxDelivery\(\)/,
    );
    // Other names get no hint.
    const other = await putUnits(uniqueTenant(), { job: 'outbox', shards: 1 }, only(new UnitJobRegistry([])));
    expect(other.body.error.message).toBe('job: unknown unit job "outbox" (this app has no unit jobs)');
  });

  it('lists the unit jobs next to the batch jobs on GET /jobs', async () => {
    const res = await call(deps, 'GET', '/jobs');
    expect(res.status).toBe(200);
    expect(res.body.unitJobs).toEqual([
      { name: 'outbox-delivery', description: expect.any(String) },
      { name: 'sync', description: 'sync a tenant' },
    ]);
    const bare = await call({ ...deps, unitJobs: new UnitJobRegistry([]) }, 'GET', '/jobs');
    expect(bare.body.unitJobs).toEqual([]);
  });

  const bad: { name: string; body: unknown; tenant?: string; message: RegExp; status?: number; code?: string }[] = [
    { name: 'no body fields', body: {}, message: /^job: Required; shards: Required$/ },
    { name: 'shards 0', body: { job: 'sync', shards: 0 }, message: /^shards: must be a whole number from 1 to 10000$/ },
    { name: 'shards 10001', body: { job: 'sync', shards: 10_001 }, message: /^shards: must be a whole number from 1 to 10000$/ },
    { name: 'shards 1.5', body: { job: 'sync', shards: 1.5 }, message: /^shards: must be a whole number/ },
    {
      name: 'shards a string',
      body: { job: 'sync', shards: '3' },
      message: /^shards: must be a whole number from 1 to 10000, got string$/,
    },
    {
      name: 'weight negative',
      body: { job: 'sync', shards: 1, weight: -1 },
      message: /^weight: must be a whole number from 0 to/,
    },
    { name: 'weight null', body: { job: 'sync', shards: 1, weight: null }, message: /^weight: .*got null$/ },
    { name: 'endpoints missing', body: { job: 'outbox-delivery', shards: 1 }, message: /^endpoints: Required$/ },
    {
      name: 'endpoints empty',
      body: { job: 'outbox-delivery', shards: 1, endpoints: [] },
      message: /^endpoints: must list at least one URL$/,
    },
    {
      name: 'endpoints a string',
      body: { job: 'outbox-delivery', shards: 1, endpoints: hooks[0] },
      message: /^endpoints: must be an array of URLs, got string$/,
    },
    {
      name: 'endpoint not a URL',
      body: { job: 'outbox-delivery', shards: 1, endpoints: [hooks[0], 'not a url'] },
      message: /^endpoints\[1\]: must be an absolute http:\/\/ or https:\/\/ URL$/,
    },
    {
      name: 'endpoint ftp',
      body: { job: 'outbox-delivery', shards: 1, endpoints: ['ftp://example.com/x'] },
      message: /^endpoints\[0\]: must be an absolute http/,
    },
    {
      name: 'endpoint javascript:',
      body: { job: 'outbox-delivery', shards: 1, endpoints: ['javascript:alert(1)'] },
      message: /^endpoints\[0\]: /,
    },
    {
      name: 'endpoint a number',
      body: { job: 'outbox-delivery', shards: 1, endpoints: [42] },
      message: /^endpoints\[0\]: must be a string, got number$/,
    },
    {
      name: 'too many endpoints',
      body: { job: 'outbox-delivery', shards: 1, endpoints: Array(33).fill(hooks[0]) },
      message: /^endpoints: must list at most 32 URLs$/,
    },
    {
      name: 'endpoints in config, badly',
      body: { job: 'outbox-delivery', shards: 1, config: { endpoints: ['x'] } },
      message: /^config\.endpoints\[0\]: /,
    },
    {
      name: 'endpoints twice',
      body: { job: 'outbox-delivery', shards: 1, endpoints: hooks, config: { endpoints: hooks } },
      message: /^endpoints: given twice/,
    },
    {
      name: 'unknown config field',
      body: { job: 'outbox-delivery', shards: 1, endpoints: hooks, config: { retries: 3 } },
      message: /^config\.retries: unknown field$/,
    },
    {
      name: 'config of the wrong shape',
      body: { job: 'sync', shards: 1, config: { everyMinutes: 'often' } },
      message: /^config\.everyMinutes: /,
    },
    {
      name: 'config an array',
      body: { job: 'sync', shards: 1, config: [] },
      message: /^config: must be a JSON object, got array$/,
    },
    {
      name: 'config with a NUL',
      body: { job: 'sync', shards: 1, config: { 'a\u0000': 1 } },
      message: /^config: keys must not contain NUL/,
    },
    { name: 'unknown field', body: { job: 'sync', shards: 1, tenant: 'x' }, message: /^tenant: unknown field$/ },
    { name: 'job a number', body: { job: 5, shards: 1 }, message: /^job: must be a string, got number$/ },
    { name: 'body an array', body: [1], message: /^body: must be a JSON object, got array$/ },
    { name: 'tenant with a space', tenant: 'a b', body: { job: 'sync', shards: 1 }, message: /^tenant: may contain only/ },
    {
      name: 'tenant too long',
      tenant: 'x'.repeat(201),
      body: { job: 'sync', shards: 1 },
      message: /^tenant: must be at most 200 characters$/,
    },
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

describe('PUT /tenants/{tenant}/units: outbox endpoints must point at public addresses', () => {
  // Every way to write an address that is not public, as tenants' endpoints. WHATWG URL parsing
  // turns some spellings into others (0x7f000001 and 2130706433 into 127.0.0.1, full-width
  // digits into ASCII, [::ffff:127.0.0.1] into [::ffff:7f00:1]); each goes through the route.
  const refused: [string, RegExp][] = [
    // The inputs of issue 9, item 9: each answered 200 before.
    ['http://169.254.169.254/latest/meta-data/', /link-local/],
    ['http://10.0.0.5/', /private address \(RFC 1918\)/],
    ['http://[::ffff:127.0.0.1]:9/', /IPv4-mapped/],
    ['http://0x7f000001:9/', /127\.0\.0\.1 is a loopback address/],
    ['http://2130706433:9/', /127\.0\.0\.1 is a loopback address/],
    // Loopback, spelled otherwise.
    ['http://127.0.0.1/', /loopback/],
    ['http://127.1/', /loopback/],
    ['http://0177.0.0.1/', /loopback/],
    ['http://%31%32%37.0.0.1/', /loopback/],
    ['http://127.0.0.1./', /loopback/],
    ['http://[::1]/', /loopback/],
    ['http://[0:0:0:0:0:0:0:1]/', /loopback/],
    ['http://localhost:8080/', /special-use name/],
    ['http://LOCALHOST./', /special-use name/],
    ['http://api.localhost/', /special-use name/],
    // The metadata address, spelled otherwise, and its IPv6 forms (AWS: fd00:ec2::254).
    ['http://169.254.169.254./', /link-local/],
    ['http://2852039166/', /link-local/],
    ['http://0xa9.0xfe.0xa9.0xfe/', /link-local/],
    ['http://0251.0376.0251.0376/', /link-local/],
    ['http://169.254.43518/', /link-local/],
    ['http://\uff11\uff16\uff19.\uff12\uff15\uff14.\uff11\uff16\uff19.\uff12\uff15\uff14/', /link-local/],
    ['http://[::ffff:169.254.169.254]/', /IPv4-mapped/],
    ['http://[::ffff:a9fe:a9fe]/', /IPv4-mapped/],
    ['http://[fd00:ec2::254]/', /unique-local/],
    ['http://metadata.google.internal/computeMetadata/v1/', /special-use name/],
    // Private, CGNAT, unique-local, link-local IPv6.
    ['http://172.16.0.1/', /private/],
    ['http://172.31.255.255:8443/', /private/],
    ['https://192.168.1.1/', /private/],
    ['http://100.64.0.1/', /carrier-grade NAT/],
    ['http://100.127.255.254/', /carrier-grade NAT/],
    ['http://[fd12:3456::1]/', /unique-local/],
    ['http://[fe80::1]/', /link-local/],
    // IPv4 reached through IPv6 transition forms.
    ['http://[::127.0.0.1]/', /outside the global unicast block/],
    ['http://[64:ff9b::a9fe:a9fe]/', /NAT64/],
    ['http://[2002:a9fe:a9fe::]/', /6to4/],
    ['http://[2001::a9fe:a9fe]/', /Teredo/],
    ['http://[::ffff:0:a9fe:a9fe]/', /IPv4-translated/],
    // Unspecified, multicast, broadcast, reserved and documentation ranges.
    ['http://0/', /unspecified/],
    ['http://0.0.0.0:80/', /unspecified/],
    ['http://[::]/', /unspecified/],
    ['http://224.0.0.1/', /multicast/],
    ['http://[ff02::1]/', /multicast/],
    ['http://255.255.255.255/', /broadcast/],
    ['http://240.0.0.1/', /reserved/],
    ['http://192.0.2.10/', /reserved or documentation/],
    ['http://198.18.0.1/', /reserved|benchmarking/],
    ['http://[2001:db8::1]/', /reserved or documentation/],
    ['http://[100::1]/', /discard-only/],
    ['http://[fec0::1]/', /site-local/],
    // Names that resolve to such addresses (checked by resolving at registration).
    ['https://private.test/hook', /private\.test resolves to 10\.1\.2\.3 is a private address/],
    ['https://metadata.test/', /metadata\.test resolves to 169\.254\.169\.254/],
    ['https://mixed.test/', /mixed\.test resolves to 172\.20\.0\.9/],
    ['https://ula.test/', /ula\.test resolves to fd00:ec2::254/],
  ];
  for (const [url, why] of refused) {
    it(`refuses ${url} with a 400 naming endpoints[i]`, async () => {
      const tenant = uniqueTenant('ssrf');
      const res = await putUnits(tenant, { job: 'outbox-delivery', shards: 1, endpoints: [hooks[0], url] });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toMatch(/^endpoints\[1\]: /);
      expect(res.body.error.message).toMatch(why);
      expect(res.body.error.message).toMatch(/not a public address \(allow it with LEASEHOLD_OUTBOX_ALLOW/);
      expect(await db.sql`select 1 from leasehold_units where tenant = ${tenant}`).toEqual([]);
    });
  }

  it('refuses an IPv6 zone id as no URL, and names config.endpoints[i] and every bad endpoint', async () => {
    const zone = await putUnits(uniqueTenant('ssrf'), {
      job: 'outbox-delivery',
      shards: 1,
      endpoints: ['http://[fe80::1%25eth0]/'],
    });
    expect(zone.body.error.message).toMatch(/^endpoints\[0\]: must be an absolute http/);
    const both = await putUnits(uniqueTenant('ssrf'), {
      job: 'outbox-delivery',
      shards: 1,
      config: { endpoints: ['http://10.0.0.5/', hooks[0], 'http://[::1]/'] },
    });
    expect(both.status).toBe(400);
    expect(both.body.error.message).toMatch(
      /^config\.endpoints\[0\]: 10\.0\.0\.5 is a private address.*; config\.endpoints\[2\]: ::1 is a loopback address/,
    );
  });

  it('refuses the same endpoint twice, however it is spelled', async () => {
    const res = await putUnits(uniqueTenant('dup'), {
      job: 'outbox-delivery',
      shards: 1,
      endpoints: ['https://public.test/a', 'HTTPS://PUBLIC.test:443/a'],
    });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toBe('endpoints[1]: the same URL as endpoints[0]');
  });

  it('accepts public addresses, and names that do not resolve now (delivery checks them again)', async () => {
    const tenant = uniqueTenant('ok');
    const endpoints = [
      'https://public.test/hook',
      'http://93.184.215.14/',
      'http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:8080/x',
      'https://not-yet.example/hook',
    ];
    const res = await putUnits(tenant, { job: 'outbox-delivery', shards: 2, endpoints });
    expect(res.status).toBe(200);
    const [row] = await db.sql`select config from leasehold_units where tenant = ${tenant} and shard = 0`;
    expect(row.config).toEqual({ endpoints });
  });

  it('accepts what the allow-list names: hosts, addresses and CIDR ranges, from the option or LEASEHOLD_OUTBOX_ALLOW', async () => {
    const allowed = [
      'http://10.0.0.5/',
      'http://10.200.1.1:8080/x',
      'http://sink.internal:4000/hook',
      'http://[::1]:9/',
      'https://private.test/',
    ];
    const withOption = { ...deps, unitJobs: units({ allow: ['10.0.0.0/8', 'sink.internal', '::1'] }) };
    const res = await putUnits(uniqueTenant('allow'), { job: 'outbox-delivery', shards: 1, endpoints: allowed }, withOption);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    // Not listed: still refused.
    const other = await putUnits(
      uniqueTenant('allow'),
      { job: 'outbox-delivery', shards: 1, endpoints: ['http://192.168.0.1/'] },
      withOption,
    );
    expect(other.body.error.message).toMatch(/^endpoints\[0\]: 192\.168\.0\.1 is a private address/);

    // The default job reads the variable when it checks, not when it was made.
    const before = process.env.LEASEHOLD_OUTBOX_ALLOW;
    process.env.LEASEHOLD_OUTBOX_ALLOW = '10.0.0.0/8, sink.internal,::1';
    try {
      expect((await putUnits(uniqueTenant('allow'), { job: 'outbox-delivery', shards: 1, endpoints: allowed })).status).toBe(200);
    } finally {
      if (before === undefined) delete process.env.LEASEHOLD_OUTBOX_ALLOW;
      else process.env.LEASEHOLD_OUTBOX_ALLOW = before;
    }
    expect((await putUnits(uniqueTenant('allow'), { job: 'outbox-delivery', shards: 1, endpoints: allowed })).status).toBe(400);
  });
});

describe('GET /tenants/{tenant}/outbox', () => {
  it("shows each endpoint's backlog and oldest undelivered message, in config order; 404 without outbox units", async () => {
    const tenant = uniqueTenant('status');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 3, endpoints: hooks });
    const first = await call(deps, 'POST', `/tenants/${tenant}/outbox`, { body: { key: 'a', payload: 1 } });
    for (const key of ['b', 'c', 'd']) await call(deps, 'POST', `/tenants/${tenant}/outbox`, { body: { key, payload: 1 } });
    const res = await call(deps, 'GET', `/tenants/${tenant}/outbox`);
    expect(res.status).toBe(200);
    // No process runs here: every message waits for its unit's owner to assign it, to every endpoint.
    expect(res.body).toEqual({
      tenant,
      shards: 3,
      endpoints: hooks.map((url) => ({
        url,
        backlog: 4,
        oldest: { id: first.body.id, enqueuedAt: expect.any(String), ageMs: expect.any(Number) },
        failures: 0,
        lastError: null,
        lastDeliveredAt: null,
        pause: null,
      })),
    });
    expect(res.body.endpoints[0].oldest.ageMs).toBeGreaterThanOrEqual(0);
    expect(new Date(res.body.endpoints[0].oldest.enqueuedAt).toISOString()).toBe(res.body.endpoints[0].oldest.enqueuedAt);

    const none = await call(deps, 'GET', `/tenants/${uniqueTenant('status')}/outbox`);
    expect(none.status).toBe(404);
    expect(none.body.error.code).toBe('no_outbox_units');
  });
});

describe('DELETE /tenants/{tenant}/units and GET /units', () => {
  it("lists units with owner and claim time, filters by tenant, and deletes a tenant's units", async () => {
    const a = uniqueTenant('list');
    const b = uniqueTenant('list');
    await putUnits(a, { job: 'outbox-delivery', shards: 2, endpoints: hooks.slice(0, 2) });
    await putUnits(b, { job: 'sync', shards: 1 });
    const leaser = new Leaser(
      db.sql,
      { ttlMs: 5_000, heartbeatIntervalMs: 1_000 },
      { unitsGained() {}, unitsLost() {}, inFlight: () => 0 },
    );
    await leaser.heartbeat();
    await leaser.tick();
    try {
      const res = await call(deps, 'GET', '/units', { query: { tenant: a } });
      expect(res.status).toBe(200);
      expect(res.body.units).toEqual(
        [0, 1].map((shard) => ({
          tenant: a,
          shard,
          job: 'outbox-delivery',
          weight: 2,
          owner: leaser.processId,
          claimedAt: expect.any(String),
          runningSince: null,
          crashes: 0,
          quarantines: 0,
          quarantinedUntil: null,
        })),
      );
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

describe('POST /tenants/{tenant}/units/{shard}/release', () => {
  it('lifts the quarantine of a unit whose owner died in its run, shown in GET /units; 404 for no such unit, 400 for a bad shard', async () => {
    // A schema of its own: the claims below must see this tenant's unit alone.
    const own = await testDatabase();
    const d = { ...deps, sql: own.sql };
    const tenant = uniqueTenant();
    await putUnits(tenant, { job: 'sync', shards: 1 }, d);
    const settings = { ttlMs: 300, heartbeatIntervalMs: 100, maxUnitCrashes: 1, quarantineMs: 60_000 };
    const idle = { unitsGained() {}, unitsLost() {}, inFlight: () => 0 };
    const dying = new Leaser(own.sql, settings, idle);
    await dying.heartbeat();
    await dying.tick();
    // Its job's run starts (the unit runner's statement), then the process dies: no more heartbeats.
    expect(await startRun(own.sql, { tenant, shard: 0 }, dying.processId)).toBeDefined();
    await sleep(400);
    const next = new Leaser(own.sql, settings, idle);
    await next.heartbeat();
    expect((await next.tick()).claimed).toBe(0);
    try {
      const listed = await call(d, 'GET', '/units', { query: { tenant } });
      expect(listed.body.units).toEqual([
        expect.objectContaining({
          owner: null,
          runningSince: null,
          crashes: 1,
          quarantines: 1,
          quarantinedUntil: expect.any(String),
        }),
      ]);
      expect(Date.parse(listed.body.units[0].quarantinedUntil)).toBeGreaterThan(Date.now() + 50_000);

      const res = await call(d, 'POST', `/tenants/${tenant}/units/0/release`);
      expect(res.status).toBe(200);
      expect(res.body.unit).toMatchObject({ tenant, shard: 0, crashes: 0, quarantines: 0, quarantinedUntil: null });
      expect((await next.tick()).claimed).toBe(1);

      expect((await call(d, 'POST', `/tenants/${tenant}/units/1/release`)).body.error.code).toBe('unit_not_found');
      expect((await call(d, 'POST', `/tenants/${tenant}/units/1/release`)).status).toBe(404);
      for (const shard of ['x', '-1', '10000', '1.5']) {
        const bad = await call(d, 'POST', `/tenants/${tenant}/units/${shard}/release`);
        expect(bad.status).toBe(400);
        expect(bad.body.error.message).toMatch(/^shard: must be a whole number from 0 to 9999/);
      }
    } finally {
      await next.release();
      await next.deleteProcess();
      await own.close();
    }
  });
});

describe('PUT and DELETE /tenants/{tenant}/units at once', () => {
  it('registrations of one tenant at the same moment all succeed, one after another, the last one winning (3 rounds of 12)', async () => {
    for (let round = 0; round < 3; round++) {
      const tenant = uniqueTenant('race');
      const bodies = Array.from({ length: 12 }, (_, i) => ({ job: 'sync', shards: 10 * (i + 1), weight: i + 1 }));
      const answers = await Promise.all([
        ...bodies.map((body) => putUnits(tenant, body)),
        call(deps, 'DELETE', `/tenants/${tenant}/units`),
      ]);
      expect(answers.map((a) => a.status)).toEqual(Array(13).fill(200));
      // Whatever order they ran in, the units are exactly one registration's.
      const [{ shards, low, high }] = await db.sql<{ shards: number; low: number | null; high: number | null }[]>`select
          count(*) as shards, min(weight) as low, max(weight) as high from leasehold_units where tenant = ${tenant}`;
      expect(low).toBe(high);
      if (shards > 0) expect(bodies).toContainEqual({ job: 'sync', shards, weight: low });
      await call(deps, 'DELETE', `/tenants/${tenant}/units`);
    }
  });
});

describe('GET /processes', () => {
  it('lists processes with role, liveness and the units and weight each owns, and the fleet against the fair share', async () => {
    const tenant = uniqueTenant('proc');
    await putUnits(tenant, { job: 'outbox-delivery', shards: 3, endpoints: hooks.slice(0, 2) });
    const leaser = new Leaser(
      db.sql,
      { ttlMs: 5_000, heartbeatIntervalMs: 1_000, hostname: 'host-1', version: 'v9' },
      { unitsGained() {}, unitsLost() {}, inFlight: () => 0 },
    );
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
        // The first of a chain of its own (docs/design.md, "Process chains").
        replaces: null,
        chainId: leaser.processId,
        chainStartedAt: mine.startedAt,
        replacements: 0,
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
        evenShare: mine.weight,
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

describe('GET /processes with heavy units', () => {
  it('answers a weight owned by one process past 2^31 exactly', async () => {
    const tenant = uniqueTenant('heavy');
    await putUnits(tenant, { job: 'sync', shards: 2_500, weight: 1_000_000 });
    const leaser = new Leaser(
      db.sql,
      { ttlMs: 5_000, heartbeatIntervalMs: 1_000 },
      { unitsGained() {}, unitsLost() {}, inFlight: () => 0 },
    );
    await leaser.heartbeat();
    try {
      // Ownership set directly: this checks the view, not how claims spread the weight.
      await db.sql`update leasehold_units set owner = ${leaser.processId}, claimed_at = now() where tenant = ${tenant}`;
      const res = await call(deps, 'GET', '/processes');
      expect(res.status).toBe(200);
      const mine = res.body.processes.find((p: { id: string }) => p.id === leaser.processId);
      expect(mine).toMatchObject({ units: 2_500, weight: 2_500_000_000 });
    } finally {
      await db.sql`update leasehold_units set owner = null where tenant = ${tenant}`;
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
      expect(res.body).toEqual({ id: expect.stringMatching(/^[1-9]\d*$/), shard: outboxShard(key, 5) });
      ids.add(res.body.id);
      const [row] = await db.sql`select tenant, shard, key, payload, assigned_at from leasehold_outbox where id = ${res.body.id}`;
      expect(row).toEqual({ tenant, shard: res.body.shard, key, payload, assigned_at: null });
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
    expect(none.body.error.message).toMatch(
      /has no outbox-delivery units of weight > 0 \(nothing would deliver\): register them first with PUT \/tenants\/.*\/units/,
    );
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
    const values: unknown[] = [
      null,
      true,
      0,
      -1,
      1e308,
      'x',
      '',
      [],
      {},
      [null],
      { a: [] },
      'http://x',
      ['http://x'],
      10_001,
      2 ** 53,
      NaN,
    ];
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
    const wrong = await call(deps, 'DELETE', '/tenants/x/outbox');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST, GET');
  });
});
