import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  InvalidBatchError,
  TooManyBatchesError,
  cancelBatch,
  createBatch,
  getBatch,
  type NewBatch,
} from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { newBatch } from './helpers.js';

const CLIENTS = 20;
const ROUNDS = 5;

let db: TestDatabase;
let sql: Sql;

beforeAll(async () => {
  db = await testDatabase({ max: CLIENTS });
  sql = db.sql;
  // Open every connection now, so the starts below run on separate connections at once.
  await Promise.all(Array.from({ length: CLIENTS }, () => sql`select pg_sleep(0.02)`));
});
afterAll(() => db.close());

/** Settle every promise; split into values and errors. */
async function settle<T>(ps: Promise<T>[]): Promise<{ ok: T[]; errors: unknown[] }> {
  const all = await Promise.allSettled(ps);
  return {
    ok: all.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : [])),
    errors: all.flatMap((r) => (r.status === 'rejected' ? [r.reason] : [])),
  };
}

async function batchesWithKey(tenant: string, requestKey: string) {
  return sql<{ id: string; total: number; items: number }[]>`select b.id, b.total,
      (select count(*) from leasehold_items i where i.batch_id = b.id) as items
    from leasehold_batches b where tenant = ${tenant} and request_key = ${requestKey}`;
}

describe('starting a batch', () => {
  it('starts one batch per request key when 20 clients start it at once', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const b = newBatch(50, { datasource: `same-key-${round}` });
      const { ok, errors } = await settle(
        Array.from({ length: CLIENTS }, () => createBatch(sql, b, { maxOpen: 1 })),
      );
      expect(errors).toEqual([]);
      const rows = await batchesWithKey(b.tenant, b.requestKey);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ total: 50, items: 50 });
      expect(new Set(ok.map((r) => r.batch.id))).toEqual(new Set([rows[0].id]));
      expect(ok.filter((r) => r.created)).toHaveLength(1);
    }
  });

  it('starts one batch per request key even when the racing starts name different datasources', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const b = newBatch(10);
      const { ok, errors } = await settle(
        Array.from({ length: CLIENTS }, (_, i) =>
          createBatch(sql, { ...b, datasource: `split-${round}-${i % 4}` }, { maxOpen: 1 }),
        ),
      );
      expect(errors).toEqual([]);
      const rows = await batchesWithKey(b.tenant, b.requestKey);
      expect(rows).toHaveLength(1);
      expect(rows[0].items).toBe(10);
      expect(new Set(ok.map((r) => r.batch.id))).toEqual(new Set([rows[0].id]));
      expect(ok.filter((r) => r.created)).toHaveLength(1);
    }
  });

  it('answers an earlier request key with its batch, even when the datasource is full', async () => {
    const b = newBatch(3, { datasource: 'replay' });
    const first = await createBatch(sql, b, { maxOpen: 1 });
    const again = await createBatch(sql, { ...b, items: [{ key: 'other' }] }, { maxOpen: 1 });
    expect(first.created).toBe(true);
    expect(again.created).toBe(false);
    expect(again.batch.id).toBe(first.batch.id);
    expect(again.batch.total).toBe(3);
    // And a finished batch's key never starts a second one.
    await cancelBatch(sql, first.batch.id);
    const third = await createBatch(sql, b, { maxOpen: 1 });
    expect(third).toMatchObject({ created: false, batch: { id: first.batch.id, status: 'cancelled' } });
    expect(await batchesWithKey(b.tenant, b.requestKey)).toHaveLength(1);
  });

  it('refuses all but one of 5 concurrent starts on a datasource with 2 of maxOpen 3 open', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const datasource = `max-open-${round}`;
      for (let i = 0; i < 2; i++) await createBatch(sql, newBatch(2, { datasource }), { maxOpen: 3 });
      const { ok, errors } = await settle(
        Array.from({ length: 5 }, () => createBatch(sql, newBatch(2, { datasource }), { maxOpen: 3 })),
      );
      expect(ok.filter((r) => r.created)).toHaveLength(1);
      expect(ok).toHaveLength(1);
      expect(errors).toHaveLength(4);
      for (const e of errors) {
        expect(e).toBeInstanceOf(TooManyBatchesError);
        expect(e).toMatchObject({ code: 'too_many_batches', datasource, maxOpen: 3 });
      }
      expect(await openCount('acme', datasource)).toBe(3);
    }
  });

  it('never opens more than maxOpen batches on a datasource under 20 concurrent starts', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const datasource = `burst-${round}`;
      const { ok, errors } = await settle(
        Array.from({ length: CLIENTS }, () => createBatch(sql, newBatch(1, { datasource }), { maxOpen: 3 })),
      );
      expect(ok).toHaveLength(3);
      expect(errors).toHaveLength(CLIENTS - 3);
      for (const e of errors) expect(e).toBeInstanceOf(TooManyBatchesError);
      expect(await openCount('acme', datasource)).toBe(3);
    }
  });

  it('counts only open batches against maxOpen, per tenant and datasource', async () => {
    const datasource = 'recycled';
    const a = await createBatch(sql, newBatch(1, { datasource }), { maxOpen: 1 });
    await expect(createBatch(sql, newBatch(1, { datasource }), { maxOpen: 1 })).rejects.toBeInstanceOf(
      TooManyBatchesError,
    );
    // Another tenant's datasource of the same name is not the same datasource.
    const other = await createBatch(sql, newBatch(1, { datasource, tenant: 'globex' }), { maxOpen: 1 });
    expect(other.created).toBe(true);
    await cancelBatch(sql, a.batch.id);
    const b = await createBatch(sql, newBatch(1, { datasource }), { maxOpen: 1 });
    expect(b.created).toBe(true);
    expect(await openCount('acme', datasource)).toBe(1);
  });

  it('rejects a batch without items or with a duplicate item key, storing nothing', async () => {
    const empty: NewBatch = newBatch(0);
    await expect(createBatch(sql, empty)).rejects.toBeInstanceOf(InvalidBatchError);
    const dup = newBatch(2, { items: [{ key: 'a' }, { key: 'a' }] });
    await expect(createBatch(sql, dup)).rejects.toMatchObject({ code: 'invalid_batch' });
    expect(await batchesWithKey(empty.tenant, empty.requestKey)).toHaveLength(0);
    expect(await batchesWithKey(dup.tenant, dup.requestKey)).toHaveLength(0);
  });

  it('stores the batch with its items pending and unowned', async () => {
    const b = newBatch(4, { params: { dir: '/data' } });
    const { batch } = await createBatch(sql, b);
    expect(await getBatch(sql, batch.id)).toMatchObject({
      status: 'open',
      total: 4,
      params: { dir: '/data' },
      counts: { pending: 4, running: 0, done: 0, failed: 0 },
      ownerProcess: null,
      runs: 0,
      beatAt: null,
      finishedAt: null,
    });
    const items = await sql`select key, input, attempts from leasehold_items where batch_id = ${batch.id} order by key`;
    expect(items).toEqual(b.items.map((i) => ({ key: i.key, input: i.input, attempts: 0 })));
  });
});

async function openCount(tenant: string, datasource: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*) as n from leasehold_batches
    where tenant = ${tenant} and datasource = ${datasource} and status = 'open'`;
  return r.n;
}
