// POST /batches/{id}/redrive, GET /batches/{id}/items?state= and GET /batches/{id}/finished
// through the API handler, on batches run to their end by a real runner.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiDeps } from '../../src/api/index.js';
import { PermanentItemError, Runner, createBatch, type ItemInput } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { apiDeps, call, InvokeEndpoint, uniqueTenant } from '../support/api.js';

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let deps: ApiDeps;

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  deps = apiDeps(db.sql, endpoint, { maxOpen: 2 });
});
afterAll(async () => {
  await endpoint.close();
});

const keys = (n: number): ItemInput[] => Array.from({ length: n }, (_, i) => ({ key: `item-${String(i).padStart(3, '0')}` }));

/** A batch of `n` items run to its end; the items whose index is in `failing` fail with a message. */
async function finished(n: number, failing: number[], tenant = uniqueTenant()) {
  const runner = new Runner(db.connect({ max: 2 }), { beatMs: 50, staleMs: 5_000, parallel: 4 });
  const { batch } = await runner.start(
    { tenant, datasource: 'ds', job: 'test', params: {}, requestKey: `k-${tenant}-${Math.random()}`, items: keys(n) },
    { maxOpen: 100 },
    {
      attempts: 1,
      work: async ({ key }) => {
        if (failing.includes(Number(key.slice(5)))) throw new PermanentItemError(`${key}: no such record`);
        return { key };
      },
    },
  );
  await runner.running(batch.id);
  await runner.close();
  return batch;
}

describe('POST /batches/{id}/redrive', () => {
  it('reopens a failed batch with its failed items pending, counts the redrive and sends the batch to a worker', async () => {
    const batch = await finished(5, [1, 3]);
    const before = endpoint.invokes.length;
    const res = await call(deps, 'POST', `/batches/${batch.id}/redrive`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      id: batch.id,
      status: 'open',
      redrives: 1,
      counts: { pending: 2, running: 0, done: 3, failed: 0 },
      finishedAt: null,
      redriven: true,
      redrive: { number: 1, items: 2, idempotencyKey: null },
    });
    expect(new Date(res.body.redrive.at).toISOString()).toBe(res.body.redrive.at);
    expect(endpoint.invokes.slice(before)).toEqual([
      {
        functionName: 'leasehold-worker',
        invocationType: 'Event',
        payload: { batchId: batch.id, invocationId: expect.any(String) },
      },
    ]);
    const shown = await call(deps, 'GET', `/batches/${batch.id}`);
    expect(shown.body).toMatchObject({ status: 'open', redrives: 1 });
  });

  it('answers a repeated Idempotency-Key with the first redrive, sends nothing and changes nothing', async () => {
    const batch = await finished(3, [0]);
    const headers = { 'Idempotency-Key': 'redrive-once' };
    const first = await call(deps, 'POST', `/batches/${batch.id}/redrive`, { headers });
    const invokes = endpoint.invokes.length;
    const again = await call(deps, 'POST', `/batches/${batch.id}/redrive`, { headers });
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body.redriven).toBe(false);
    expect(again.body.redrive).toEqual(first.body.redrive);
    expect(again.body.redrive.idempotencyKey).toBe('redrive-once');
    expect(again.body.redrives).toBe(1);
    expect(endpoint.invokes.length).toBe(invokes);
  });

  it('answers 404 for an unknown batch, 409 for an open one or one without failures, 400 for a cancelled one, naming the rule', async () => {
    expect(await call(deps, 'POST', '/batches/00000000-0000-4000-8000-000000000000/redrive')).toMatchObject({
      status: 404,
      body: { error: { code: 'batch_not_found' } },
    });
    expect(await call(deps, 'POST', '/batches/nope/redrive')).toMatchObject({
      status: 404,
      body: { error: { code: 'batch_not_found' } },
    });

    const open = (
      await createBatch(db.sql, {
        tenant: uniqueTenant(),
        datasource: 'ds',
        job: 'test',
        params: {},
        requestKey: 'open',
        items: keys(1),
      })
    ).batch;
    const o = await call(deps, 'POST', `/batches/${open.id}/redrive`);
    expect(o).toMatchObject({ status: 409, body: { error: { code: 'batch_open' } } });
    expect(o.body.error.message).toMatch(/still open: only a finished batch can be redriven/);

    await call(deps, 'POST', `/batches/${open.id}/cancel`);
    const c = await call(deps, 'POST', `/batches/${open.id}/redrive`);
    expect(c).toMatchObject({ status: 400, body: { error: { code: 'batch_cancelled' } } });
    expect(c.body.error.message).toMatch(/cancelled, which is for good/);

    const clean = await finished(2, []);
    expect(await call(deps, 'POST', `/batches/${clean.id}/redrive`)).toMatchObject({
      status: 409,
      body: { error: { code: 'nothing_to_redrive' } },
    });
    expect(await call(deps, 'GET', `/batches/${clean.id}/redrive`)).toMatchObject({ status: 405, headers: { allow: 'POST' } });
  });

  it("answers 429 when the batch's datasource already has maxOpen open batches, as a start does", async () => {
    const tenant = uniqueTenant();
    const batch = await finished(2, [0], tenant);
    for (const key of ['a', 'b'])
      await createBatch(db.sql, { tenant, datasource: 'ds', job: 'test', params: {}, requestKey: key, items: keys(1) });
    const res = await call(deps, 'POST', `/batches/${batch.id}/redrive`);
    expect(res).toMatchObject({ status: 429, body: { error: { code: 'too_many_batches' } } });
    expect((await call(deps, 'GET', `/batches/${batch.id}`)).body).toMatchObject({ status: 'failed', redrives: 0 });
  });

  it('refuses an Idempotency-Key that is not a valid key', async () => {
    const batch = await finished(2, [0]);
    const res = await call(deps, 'POST', `/batches/${batch.id}/redrive`, { headers: { 'Idempotency-Key': 'x'.repeat(201) } });
    expect(res).toMatchObject({ status: 400, body: { error: { code: 'invalid_request' } } });
    expect(res.body.error.message).toMatch(/^Idempotency-Key: must be at most 200 characters/);
  });
});

describe('GET /batches/{id}/items?state=', () => {
  it('pages through the items of one state in key order', async () => {
    const batch = await finished(9, [1, 2, 4, 7, 8]);
    const first = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { state: 'failed', limit: '3' } });
    expect(first.status).toBe(200);
    expect(first.body.items.map((i: { key: string }) => i.key)).toEqual(['item-001', 'item-002', 'item-004']);
    expect(first.body.items[0]).toEqual({
      key: 'item-001',
      state: 'failed',
      attempts: 1,
      output: null,
      error: 'item-001: no such record',
      progress: null,
      heartbeatAt: null,
      wait: null,
    });
    expect(first.body.next).toBe('item-004');
    const second = await call(deps, 'GET', `/batches/${batch.id}/items`, {
      query: { state: 'failed', limit: '3', after: first.body.next },
    });
    expect(second.body.items.map((i: { key: string }) => i.key)).toEqual(['item-007', 'item-008']);
    expect(second.body.next).toBeNull();
    const done = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { state: 'done' } });
    expect(done.body.items.map((i: { key: string }) => i.key)).toEqual(['item-000', 'item-003', 'item-005', 'item-006']);
    const bad = await call(deps, 'GET', `/batches/${batch.id}/items`, { query: { state: 'broken' } });
    expect(bad).toMatchObject({
      status: 400,
      body: { error: { message: 'state: must be one of pending, running, waiting, done, failed' } },
    });
  });
});

describe('GET /batches/{id}/finished and the activity of a batch', () => {
  it('counts the items finished per bucket of the batch life, by the database clock', async () => {
    const batch = await finished(12, [0, 5]);
    const res = await call(deps, 'GET', `/batches/${batch.id}/finished`, { query: { buckets: '20' } });
    expect(res.status).toBe(200);
    expect(res.body.bucketMs).toBe(1000);
    expect(res.body.from).toBe(new Date(batch.createdAt).toISOString());
    expect(res.body.buckets.length).toBeGreaterThanOrEqual(1);
    expect(res.body.buckets.length).toBeLessThanOrEqual(20);
    expect(res.body.buckets[0].at).toBe(res.body.from);
    const sum = (k: 'done' | 'failed') => res.body.buckets.reduce((a: number, b: Record<string, number>) => a + b[k], 0);
    expect([sum('done'), sum('failed')]).toEqual([10, 2]);

    // Items whose last move is back-dated land in their own bucket: by updated_at, from created_at.
    await db.sql`update leasehold_batches set created_at = created_at - interval '10 minutes', finished_at = created_at - interval '10 minutes' + interval '9 minutes' where id = ${batch.id}`;
    await db.sql`update leasehold_items i set updated_at = b.created_at + case when i.key in ('item-001', 'item-002')
        then interval '125 seconds' else interval '30 seconds' end
      from leasehold_batches b where b.id = i.batch_id and i.batch_id = ${batch.id}`;
    const back = await call(deps, 'GET', `/batches/${batch.id}/finished`, { query: { buckets: '10' } });
    expect(back.body.bucketMs).toBe(60_000);
    const at = (minutes: number) => new Date(Date.parse(back.body.from) + minutes * 60_000).toISOString();
    expect(back.body.buckets).toEqual([
      { at: at(0), done: 8, failed: 2 },
      { at: at(1), done: 0, failed: 0 },
      { at: at(2), done: 2, failed: 0 },
      ...[3, 4, 5, 6, 7, 8].map((m) => ({ at: at(m), done: 0, failed: 0 })),
    ]);
    const bad = await call(deps, 'GET', `/batches/${batch.id}/finished`, { query: { buckets: '0' } });
    expect(bad).toMatchObject({ status: 400, body: { error: { message: 'buckets: must be an integer from 1 to 500' } } });
    expect(await call(deps, 'GET', '/batches/00000000-0000-4000-8000-000000000000/finished')).toMatchObject({ status: 404 });
  });

  it('shows ageMs and itemsPerSecond on GET /batches and GET /batches/{id}', async () => {
    const tenant = uniqueTenant();
    const batch = await finished(4, [], tenant);
    // Backdated: 20 s of life for 4 items.
    await db.sql`update leasehold_batches set created_at = now() - interval '30 seconds', finished_at = now() - interval '10 seconds' where id = ${batch.id}`;
    const shown = await call(deps, 'GET', `/batches/${batch.id}`);
    expect(shown.body.ageMs).toBeGreaterThanOrEqual(30_000);
    expect(shown.body.ageMs).toBeLessThan(40_000);
    expect(shown.body.itemsPerSecond).toBeCloseTo(0.2, 2);
    const open = (
      await createBatch(db.sql, { tenant, datasource: 'ds', job: 'test', params: {}, requestKey: 'open', items: keys(3) })
    ).batch;
    // Two items finished within the last 10 s of an open batch 60 s old: 0.2 items/s.
    await db.sql`update leasehold_batches set created_at = now() - interval '60 seconds' where id = ${open.id}`;
    await db.sql`update leasehold_items set state = 'done', updated_at = now() - interval '2 seconds' where batch_id = ${open.id} and key <> 'item-002'`;
    const list = await call(deps, 'GET', '/batches', { query: { tenant } });
    const byId = Object.fromEntries(list.body.batches.map((b: { id: string }) => [b.id, b]));
    expect(byId[open.id].itemsPerSecond).toBeCloseTo(0.2, 2);
    expect(byId[batch.id].itemsPerSecond).toBeCloseTo(0.2, 2);
    expect(byId[open.id].ageMs).toBeGreaterThanOrEqual(60_000);
  });
});
