import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';

import { answer, apiDeps, apiEvent, call, removeTree, tempTree, uniqueTenant, apiSuite } from '../support/api.js';
import { memoryLog } from '../support/log.js';

const suite = apiSuite({ 'a.txt': 'alpha', 'b.txt': 'beta', 'sub/c.txt': 'gamma' });

function start(body: Record<string, unknown>, headers?: Record<string, string>) {
  return call(suite.deps, 'POST', '/batches', { body, headers });
}

describe('POST /batches', () => {
  it('takes notify: { url } where the address policy allows it and a webhook secret is set, and refuses it otherwise', async () => {
    const withSecret = {
      ...suite.deps,
      config: { ...suite.deps.config, events: { webhookSecret: 'a-secret-of-enough-length' } },
    };
    const body = (url: unknown) => ({
      tenant: uniqueTenant(),
      datasource: 'files',
      job: 'checksum',
      params: { dir: suite.dir },
      notify: { url },
    });
    const ok = await call(withSecret, 'POST', '/batches', { body: body('https://8.8.8.8/hook') });
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({ notify: { url: 'https://8.8.8.8/hook' } });
    const stored = await suite.db.sql<
      { notify_url: string }[]
    >`select notify_url from leasehold_batches where id = ${(ok.body as { id: string }).id}`;
    expect(stored[0].notify_url).toBe('https://8.8.8.8/hook');
    // Loopback is not public (outbox delivery's address policy).
    const loop = await call(withSecret, 'POST', '/batches', { body: body('http://127.0.0.1:9/hook') });
    expect(loop.status).toBe(400);
    expect(JSON.stringify(loop.body)).toMatch(/notify\.url/);
    const ftp = await call(withSecret, 'POST', '/batches', { body: body('ftp://8.8.8.8/x') });
    expect(ftp.status).toBe(400);
    const noSecret = { ...suite.deps, config: { ...suite.deps.config, events: { webhookSecret: undefined } } };
    const refused = await call(noSecret, 'POST', '/batches', { body: body('https://8.8.8.8/hook') });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body)).toMatch(/LEASEHOLD_WEBHOOK_SECRET/);
    // Nothing was stored for the refused starts.
    const [n] = await suite.db.sql<
      { n: number }[]
    >`select count(*)::int as n from leasehold_batches where notify_url is not null`;
    expect(n.n).toBe(1);
  });

  it('starts a batch: 201 with the batch, its items stored and the batch sent to a worker at once', async () => {
    const tenant = uniqueTenant();
    const res = await start({ tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'first' });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      tenant,
      datasource: 'files',
      job: 'checksum',
      requestKey: 'first',
      status: 'open',
      total: 3,
      counts: { pending: 3, running: 0, done: 0, failed: 0 },
      ownerProcess: null,
      runs: 0,
      beatAt: null,
      finishedAt: null,
      created: true,
    });
    expect(res.body.params.dir).toMatch(/^\//);
    expect(new Date(res.body.createdAt).toISOString()).toBe(res.body.createdAt);
    expect(res.headers.location).toBe(`/batches/${res.body.id}`);

    const items = await suite.db.sql<
      { key: string }[]
    >`select key from leasehold_items where batch_id = ${res.body.id} order by key`;
    expect(items.map((i) => i.key)).toEqual(['a.txt', 'b.txt', 'sub/c.txt']);
    const invoke = suite.endpoint.invokes.find((i) => (i.payload as { batchId: string }).batchId === res.body.id);
    expect(invoke).toEqual({
      functionName: 'leasehold-worker',
      invocationType: 'Event',
      payload: { batchId: res.body.id, invocationId: expect.any(String) },
    });
    const [row] = await suite.db.sql<{ dispatched: boolean }[]>`select dispatched_at is not null as dispatched
      from leasehold_batches where id = ${res.body.id}`;
    expect(row.dispatched).toBe(true);
  });

  it('answers 200 with the original batch for a repeated request key, and starts nothing new', async () => {
    const tenant = uniqueTenant();
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'again' };
    const first = await start(body);
    const invokesBefore = suite.endpoint.invokes.length;
    const second = await start(body);
    expect(first.status).toBe(201);
    expect(second.status).toBe(200);
    expect(second.body.id).toBe(first.body.id);
    expect(second.body.created).toBe(false);
    expect(suite.endpoint.invokes.length).toBe(invokesBefore);
    const [{ n }] = await suite.db.sql<{ n: number }[]>`select count(*) as n from leasehold_batches where tenant = ${tenant}`;
    expect(n).toBe(1);
  });

  it('answers a repeated key with the original batch even when its params would no longer expand', async () => {
    const tenant = uniqueTenant();
    const gone = await tempTree({ 'x.txt': 'x' });
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: gone }, requestKey: 'k' };
    const first = await start(body);
    await removeTree(gone);
    const second = await start(body);
    expect([first.status, second.status]).toEqual([201, 200]);
    expect(second.body.id).toBe(first.body.id);
  });

  it('starts one batch for many concurrent requests with one key: one 201, the rest 200 with it', async () => {
    const tenant = uniqueTenant();
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'race' };
    for (let round = 0; round < 3; round++) {
      const key = `race-${round}`;
      const invokesBefore = suite.endpoint.invokes.length;
      const answers = await Promise.all(Array.from({ length: 12 }, () => start({ ...body, requestKey: key })));
      expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
      expect(new Set(answers.map((a) => a.body.id)).size).toBe(1);
      const rows = await suite.db.sql`select id from leasehold_batches where tenant = ${tenant} and request_key = ${key}`;
      expect(rows.length).toBe(1);
      expect(suite.endpoint.batchIds().slice(invokesBefore)).toEqual([answers[0].body.id]);
    }
  });

  it('takes the request key from the Idempotency-Key header', async () => {
    const tenant = uniqueTenant();
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir } };
    const first = await start(body, { 'Idempotency-Key': 'hdr-1' });
    const second = await start(body, { 'idempotency-key': 'hdr-1' });
    const same = await start({ ...body, requestKey: 'hdr-1' }, { 'idempotency-key': 'hdr-1' });
    expect([first.status, second.status, same.status]).toEqual([201, 200, 200]);
    expect(first.body.requestKey).toBe('hdr-1');
    expect(second.body.id).toBe(first.body.id);
    expect(same.body.id).toBe(first.body.id);
  });

  it('refuses a body request key that differs from the Idempotency-Key header', async () => {
    const res = await start(
      { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'a' },
      { 'idempotency-key': 'b' },
    );
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(res.body.error.message).toMatch(/^requestKey: .*Idempotency-Key/);
  });

  it('starts a new batch for every request without a request key', async () => {
    const tenant = uniqueTenant();
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir } };
    const a = await start(body);
    const b = await start(body);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(a.body.id).not.toBe(b.body.id);
    expect(a.body.requestKey).not.toBe(b.body.requestKey);
  });

  it('answers 429 once the datasource has maxOpen open batches, and accepts again after a cancel', async () => {
    const tenant = uniqueTenant();
    const limited = { ...suite.deps, config: { ...suite.deps.config, maxOpen: 2 } };
    const body = (k: string, datasource = 'files') => ({
      body: { tenant, datasource, job: 'checksum', params: { dir: suite.dir }, requestKey: k },
    });
    const a = await call(limited, 'POST', '/batches', body('1'));
    const b = await call(limited, 'POST', '/batches', body('2'));
    const c = await call(limited, 'POST', '/batches', body('3'));
    expect([a.status, b.status, c.status]).toEqual([201, 201, 429]);
    expect(c.body.error.code).toBe('too_many_batches');
    expect(c.body.error.message).toContain('files');
    expect(c.body.error.message).toMatch(/LEASEHOLD_MAX_OPEN\): start it once one has finished, or under another datasource$/);
    // Other datasources have their own budget; a repeated key is still answered.
    expect((await call(limited, 'POST', '/batches', body('4', 'other'))).status).toBe(201);
    expect((await call(limited, 'POST', '/batches', body('1'))).status).toBe(200);

    expect((await call(limited, 'POST', `/batches/${a.body.id}/cancel`)).status).toBe(200);
    expect((await call(limited, 'POST', '/batches', body('3'))).status).toBe(201);
  });

  it('still answers 201 when the worker invoke fails, logging a warning', async () => {
    const { log, entries } = memoryLog();
    suite.endpoint.failing = true;
    try {
      const res = await call({ ...suite.deps, log }, 'POST', '/batches', {
        body: { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } },
      });
      expect(res.status).toBe(201);
      expect(res.body.status).toBe('open');
      expect(entries).toContainEqual(
        expect.objectContaining({ level: 'warn', fields: expect.objectContaining({ batchId: res.body.id }) }),
      );
    } finally {
      suite.endpoint.failing = false;
    }
  });

  it('refuses a suite.dir outside the allowed roots with 400 naming params.dir', async () => {
    const confined = apiDeps(suite.db.sql, suite.endpoint, { allowedRoots: [suite.dir] });
    for (const outside of ['/', '/etc']) {
      const res = await call(confined, 'POST', '/batches', {
        body: { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: outside } },
      });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_params');
      expect(res.body.error.message).toMatch(/^params\.dir: .*not under an allowed root \(.*; LEASEHOLD_ALLOWED_ROOTS sets them/);
    }
    const inside = await call(confined, 'POST', '/batches', {
      body: { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: `${suite.dir}/sub` } },
    });
    expect(inside.status).toBe(201);
    expect(inside.body.total).toBe(1);
  });

  it('answers 404 for an unknown job, naming the job field', async () => {
    const res = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'no-such-job', params: {} });
    expect(res.status).toBe(404);
    // Naming the jobs there are, so a typo shows what was meant.
    expect(res.body.error).toEqual({
      code: 'unknown_job',
      message: `job: unknown job "no-such-job" (this app's jobs: ${suite.deps.jobs.names().join(', ')})`,
    });
    expect(suite.deps.jobs.names()).toContain('checksum');
  });

  it('answers 413 naming the item count limit for a directory of more files than maxItems, and stores nothing', async () => {
    const limited = { ...suite.deps, config: { ...suite.deps.config, maxItems: 2 } };
    const tenant = uniqueTenant();
    const res = await call(limited, 'POST', '/batches', {
      body: { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'big' },
    });
    expect(res.status).toBe(413);
    expect(res.body.error).toEqual({ code: 'batch_too_large', message: 'params: item count: more than 2 items; the limit is 2' });
    expect(await suite.db.sql`select id from leasehold_batches where tenant = ${tenant}`).toHaveLength(0);
    // At the limit it starts.
    const fits = await call({ ...suite.deps, config: { ...suite.deps.config, maxItems: 3 } }, 'POST', '/batches', {
      body: { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir }, requestKey: 'big' },
    });
    expect(fits.status).toBe(201);
    expect(fits.body.total).toBe(3);
  });

  it('answers 400 for an empty directory (a batch needs items)', async () => {
    const empty = await tempTree({});
    try {
      const res = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: empty } });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/^params: /);
    } finally {
      await removeTree(empty);
    }
  });
});

describe('GET /batches/{id}', () => {
  it('shows a batch with its counts per item state', async () => {
    const created = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } });
    await suite.db.sql`update leasehold_items set state = 'done' where batch_id = ${created.body.id} and key = 'a.txt'`;
    const res = await call(suite.deps, 'GET', `/batches/${created.body.id}`);
    expect(res.status).toBe(200);
    const { created: _created, ...batch } = created.body;
    // 1 item finished in a batch younger than 1 s: 1 item/s (the rate's window is at least 1 s).
    expect(res.body).toEqual({
      ...batch,
      counts: { pending: 2, running: 0, waiting: 0, done: 1, failed: 0 },
      ageMs: expect.any(Number),
      itemsPerSecond: 1,
      // No run has ended yet: nothing recorded, nothing to pay (docs/design.md, "Usage and cost").
      usage: {
        workerMs: 0,
        gbSeconds: 0,
        runs: 0,
        diedRuns: 0,
        invocations: 0,
        items: 0,
        s3Requests: { get: 0, put: 0, list: 0 },
        estimatedCost: { currency: 'USD', total: 0, lambda: 0, s3: 0, region: 'us-east-1', overridden: false },
      },
    });
    expect(res.body.ageMs).toBeGreaterThanOrEqual(0);
  });

  it('answers 404 for an unknown id and for an id that is not a UUID', async () => {
    for (const id of [randomUUID(), 'not-a-uuid', "1'; drop table leasehold_batches; --", '%E0%A4%A']) {
      const res = await call(suite.deps, 'GET', `/batches/${id}`);
      expect(res.status, id).toBe(404);
      expect(['batch_not_found', 'not_found']).toContain(res.body.error.code);
    }
  });
});

describe('GET /batches', () => {
  let tenant: string;
  let ids: string[];
  beforeAll(async () => {
    tenant = uniqueTenant('list');
    ids = [];
    for (const k of ['1', '2', '3']) {
      const res = await start({ tenant, datasource: `ds${k}`, job: 'checksum', params: { dir: suite.dir }, requestKey: k });
      ids.push(res.body.id);
    }
    await call(suite.deps, 'POST', `/batches/${ids[0]}/cancel`);
  });

  it("lists a tenant's batches newest first", async () => {
    const res = await call(suite.deps, 'GET', '/batches', { query: { tenant } });
    expect(res.status).toBe(200);
    expect(res.body.batches.map((b: { id: string }) => b.id)).toEqual([...ids].reverse());
    expect(res.body.batches[0]).toHaveProperty('counts');
  });

  it('filters by status and limits the count', async () => {
    const open = await call(suite.deps, 'GET', '/batches', { query: { tenant, status: 'open' } });
    expect(open.body.batches.map((b: { id: string }) => b.id).sort()).toEqual([ids[1], ids[2]].sort());
    const cancelled = await call(suite.deps, 'GET', '/batches', { query: { tenant, status: 'cancelled' } });
    expect(cancelled.body.batches.map((b: { id: string }) => b.id)).toEqual([ids[0]]);
    const one = await call(suite.deps, 'GET', '/batches', { query: { tenant, limit: '1' } });
    expect(one.body.batches.map((b: { id: string }) => b.id)).toEqual([ids[2]]);
    const none = await call(suite.deps, 'GET', '/batches', { query: { tenant: uniqueTenant('nobody') } });
    expect(none.body).toEqual({ batches: [], retentionDays: 30 });
    const odd = await call(suite.deps, 'GET', '/batches', { query: { tenant: 'a tenant/with ünusual chars' } });
    expect(odd.status).toBe(200);
    expect(odd.body).toEqual({ batches: [], retentionDays: 30 });
  });

  it('reads the raw query string when API Gateway gives no parsed parameters', async () => {
    const event = apiEvent('GET', '/batches');
    event.rawQueryString = `tenant=${tenant}&status=cancelled`;
    const res = answer(await handleApi(event, suite.deps));
    expect(res.body.batches.map((b: { id: string }) => b.id)).toEqual([ids[0]]);
  });

  it.each([
    [{ status: 'done' }, /^status: must be one of open, running, paused, succeeded, failed, cancelled/],
    [{ limit: '0' }, /^limit: /],
    [{ limit: '-1' }, /^limit: /],
    [{ limit: '1001' }, /^limit: /],
    [{ limit: 'ten' }, /^limit: /],
    [{ limit: '1.5' }, /^limit: /],
    [{ tenant: 'a\u0000b' }, /^tenant: /],
    [{ tenant: 'x'.repeat(201) }, /^tenant: /],
    [{ colour: 'blue' }, /^colour: unknown field/],
  ])('answers 400 for query %j', async (query, message) => {
    const res = await call(suite.deps, 'GET', '/batches', { query });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(res.body.error.message).toMatch(message);
  });
});

describe('PATCH /batches/{id}', () => {
  it("changes an open batch's rate limit (shown as the batch's rateLimit), with maxConcurrency or alone, and refuses bad bodies naming the field", async () => {
    const created = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } });
    expect(created.body.rateLimit).toBeNull();
    const id = created.body.id as string;
    const rated = await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { rateLimit: { perSecond: 20 } } });
    expect(rated.status).toBe(200);
    expect(rated.body).toMatchObject({ id, rateLimit: { perSecond: 20 } });
    const both = await call(suite.deps, 'PATCH', `/batches/${id}`, {
      body: { rateLimit: { perSecond: 2.5 }, maxConcurrency: 3 },
    });
    expect(both.status).toBe(200);
    expect(both.body).toMatchObject({ rateLimit: { perSecond: 2.5 }, maxConcurrency: 3 });
    expect((await call(suite.deps, 'GET', `/batches/${id}`)).body.rateLimit).toEqual({ perSecond: 2.5 });
    for (const [body, field] of [
      [{}, 'must set at least one of maxConcurrency, rateLimit, deadline, deadlineMs'],
      [{ rateLimit: { perSecond: 0 } }, 'rateLimit.perSecond'],
      [{ rateLimit: { perSecond: 1e-300 } }, 'rateLimit.perSecond'],
      [{ rateLimit: 5 }, 'rateLimit'],
      [{ rateLimit: { perSecond: 5, burst: 2 } }, 'rateLimit'],
    ] as const) {
      const res = await call(suite.deps, 'PATCH', `/batches/${id}`, { body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toContain(field);
    }
    await call(suite.deps, 'POST', `/batches/${id}/cancel`);
    const late = await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { rateLimit: { perSecond: 5 } } });
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe('batch_finished');
    expect((await call(suite.deps, 'PATCH', `/batches/${randomUUID()}`, { body: { rateLimit: { perSecond: 5 } } })).status).toBe(
      404,
    );
  });
});

describe('POST /batches/{id}/pause and /resume, and the deadline', () => {
  it('pauses a batch (shown paused, target 0, nothing sent), resumes it with a worker sent, on both routes; 409 once finished', async () => {
    const tenant = uniqueTenant();
    const created = await start({ tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir } });
    const id = created.body.id as string;
    expect(created.body).toMatchObject({ paused: false, pausedAt: null, deadline: null, target: 1 });
    const sent = () => suite.endpoint.invokes.filter((i) => (i.payload as { batchId?: string }).batchId === id).length;
    const before = sent();
    const paused = await call(suite.deps, 'POST', `/batches/${id}/pause`);
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ id, status: 'open', paused: true, target: 0 });
    expect(new Date(paused.body.pausedAt).toISOString()).toBe(paused.body.pausedAt);
    expect((await call(suite.deps, 'GET', `/batches/${id}`)).body).toMatchObject({ paused: true });
    // Not waiting for workers: its tenant counts no waiting batch.
    expect((await call(suite.deps, 'GET', `/tenants/${tenant}`)).body).toMatchObject({ waiting: 0 });
    const resumed = await call(suite.deps, 'POST', `/tenants/${tenant}/batches/${id}/resume`);
    expect(resumed.status).toBe(200);
    expect(resumed.body).toMatchObject({ paused: false, pausedAt: null, target: 1 });
    expect(sent()).toBe(before + 1);
    expect((await call(suite.deps, 'POST', `/tenants/${tenant}/batches/${id}/pause`)).body).toMatchObject({ paused: true });
    expect((await call(suite.deps, 'POST', `/tenants/other-${tenant}/batches/${id}/pause`)).status).toBe(404);
    await call(suite.deps, 'POST', `/batches/${id}/cancel`);
    const late = await call(suite.deps, 'POST', `/batches/${id}/resume`);
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe('batch_finished');
    expect((await call(suite.deps, 'POST', `/batches/${randomUUID()}/pause`)).status).toBe(404);
  });

  it('lists paused and running batches apart: status paused or running, as the list shows them', async () => {
    const tenant = uniqueTenant();
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir: suite.dir } };
    const [a, b] = [(await start(body)).body.id as string, (await start(body)).body.id as string];
    await call(suite.deps, 'POST', `/batches/${a}/pause`);
    const list = async (status: string) =>
      (await call(suite.deps, 'GET', '/batches', { query: { tenant, status } })).body.batches.map((x: { id: string }) => x.id);
    expect(await list('paused')).toEqual([a]);
    expect(await list('running')).toEqual([b]);
    expect(await list('open')).toEqual([b, a]);
    // The tenant-scoped list takes it too.
    const scoped = await call(suite.deps, 'GET', `/tenants/${tenant}/batches`, { query: { status: 'paused' } });
    expect(scoped.body.batches.map((x: { id: string }) => x.id)).toEqual([a]);
    await call(suite.deps, 'POST', `/batches/${a}/cancel`);
    await call(suite.deps, 'POST', `/batches/${b}/cancel`);
    expect(await list('paused')).toEqual([]);
  });

  it('takes deadline or deadlineMs at start and by PATCH (null clears it), never both', async () => {
    const body = { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } };
    const byMs = await start({ ...body, deadlineMs: 60_000 });
    expect(byMs.status).toBe(201);
    expect(Date.parse(byMs.body.deadline) - Date.parse(byMs.body.createdAt)).toBe(60_000);
    const at = '2099-01-01T00:00:00.000Z';
    const id = byMs.body.id as string;
    expect((await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { deadline: at } })).body).toMatchObject({ deadline: at });
    expect((await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { deadline: null } })).body).toMatchObject({
      deadline: null,
    });
    for (const bad of [{ deadline: at, deadlineMs: 5 }, { deadline: 'tomorrow' }, { deadlineMs: 0 }]) {
      const res = await start({ ...body, ...bad });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error.message).toMatch(/deadline/);
    }
  });

  it('refuses an instant before 1970 with a 400: PostgreSQL has no year 0, the driver misreads years 1–99', async () => {
    // A breaker's find: year 0 reached the database, which refused it, and the API answered 500.
    const body = { tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } };
    const id = (await start(body)).body.id as string;
    for (const deadline of [
      '0000-01-01T00:00:00Z',
      '0001-01-01T00:30:00+01:00',
      '0001-01-01T00:00:00Z',
      '1969-12-31T23:59:59.999Z',
    ]) {
      for (const res of [
        await start({ ...body, tenant: uniqueTenant(), deadline }),
        await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { deadline } }),
      ]) {
        expect(res.status, deadline).toBe(400);
        expect(res.body.error.message).toMatch(/deadline.*from 1970-01-01T00:00:00Z on/);
      }
    }
    for (const field of ['createdAfter', 'createdBefore']) {
      const res = await call(suite.deps, 'POST', '/actions', {
        body: { action: 'pause', filter: { [field]: '0000-01-01T00:00:00Z' } },
        headers: { 'idempotency-key': `y0-${field}-${id}` },
      });
      expect(res.status, field).toBe(400);
      expect(res.body.error.message).toMatch(/from 1970-01-01T00:00:00Z on/);
    }
    // The epoch is stored and read back as it was sent (a deadline that passed: the batch ends).
    const first = '1970-01-01T00:00:00.000Z';
    expect((await call(suite.deps, 'PATCH', `/batches/${id}`, { body: { deadline: first } })).body).toMatchObject({
      deadline: first,
    });
  });
});

describe('POST /batches/{id}/cancel', () => {
  it('cancels an open batch for good: 200 with the cancelled batch, then 409', async () => {
    const created = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } });
    const res = await call(suite.deps, 'POST', `/batches/${created.body.id}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: created.body.id, status: 'cancelled' });
    expect(res.body.finishedAt).not.toBeNull();
    // Its items stay as they were (pending here), and will never run: they show as not run.
    expect(res.body.counts.pending).toBe(created.body.total);
    expect(res.body.notRun).toBe(created.body.total);
    expect(created.body.notRun).toBe(0);
    const again = await call(suite.deps, 'POST', `/batches/${created.body.id}/cancel`);
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('batch_finished');
    expect(again.body.error.message).toContain('cancelled');
    expect((await call(suite.deps, 'GET', `/batches/${created.body.id}`)).body.status).toBe('cancelled');
  });

  it('answers 409 for a batch that finished', async () => {
    const created = await start({ tenant: uniqueTenant(), datasource: 'files', job: 'checksum', params: { dir: suite.dir } });
    await suite.db.sql`update leasehold_items set state = 'done' where batch_id = ${created.body.id}`;
    await suite.db.sql`update leasehold_batches set status = 'succeeded', finished_at = now() where id = ${created.body.id}`;
    const res = await call(suite.deps, 'POST', `/batches/${created.body.id}/cancel`);
    expect(res.status).toBe(409);
    expect(res.body.error).toEqual({ code: 'batch_finished', message: `batch ${created.body.id} has already succeeded` });
  });

  it('answers 404 for an unknown batch', async () => {
    for (const id of [randomUUID(), 'nope']) {
      const res = await call(suite.deps, 'POST', `/batches/${id}/cancel`);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('batch_not_found');
    }
  });
});
