import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  BatchTooLargeError,
  DEFAULT_START_LIMITS,
  InvalidBatchError,
  MAX_KEY_BYTES,
  TooManyBatchesError,
  cancelBatch,
  createBatch,
  getBatch,
  type ItemInput,
  type ItemSource,
  type NewBatch,
} from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';

const CLIENTS = 20;
const ROUNDS = 5;

const db = useTestDatabase({ max: CLIENTS });
let sql: Sql;

beforeAll(async () => {
  sql = db.sql;
  // Open every connection now, so the starts below run on separate connections at once.
  await Promise.all(Array.from({ length: CLIENTS }, () => sql`select pg_sleep(0.02)`));
});

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
      const { ok, errors } = await settle(Array.from({ length: CLIENTS }, () => createBatch(sql, b, { maxOpen: 1 })));
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
    await expect(createBatch(sql, newBatch(1, { datasource }), { maxOpen: 1 })).rejects.toBeInstanceOf(TooManyBatchesError);
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

/** A batch of `items` on a datasource of its own. */
function startOf<T extends ItemSource>(items: T): NewBatch & { items: T } {
  return { ...newBatch(0, { datasource: randomUUID() }), items };
}

/** Items as an async stream, so the start reads them while it writes, piece by piece. */
async function* streamed(items: Iterable<ItemInput>): AsyncGenerator<ItemInput> {
  for (const item of items) yield item;
}

/** `n` items with keys `s000000`, … and the given input. */
function* numbered(n: number, input?: unknown): Generator<ItemInput> {
  for (let i = 0; i < n; i++) yield { key: `s${String(i).padStart(6, '0')}`, ...(input === undefined ? {} : { input }) };
}

/** Rows a start left behind: its batch (by request key) and items of batches with that key. */
async function leftBehind(tenant: string, requestKey: string): Promise<{ batches: number; items: number }> {
  const [r] = await sql<{ batches: number; items: number }[]>`select
      (select count(*) from leasehold_batches where tenant = ${tenant} and request_key = ${requestKey}) as batches,
      (select count(*) from leasehold_items i join leasehold_batches b on b.id = i.batch_id
        where b.tenant = ${tenant} and b.request_key = ${requestKey}) as items`;
  return r;
}

/** Start `b`, expecting a refusal; checks that it stored nothing and returns the error. */
async function refusedStart(
  b: NewBatch,
  limits?: Parameters<typeof createBatch>[2],
): Promise<Error & { code?: string; limit?: string; max?: number }> {
  const error = await createBatch(sql, b, limits).then(
    () => undefined,
    (e: Error) => e,
  );
  expect(error).toBeDefined();
  expect(await leftBehind(b.tenant, b.requestKey)).toEqual({ batches: 0, items: 0 });
  return error!;
}

describe('start limits', () => {
  const limits = { maxItems: 10, maxInputBytes: 40, maxTotalBytes: 400 };

  it.each([
    ['an array', (items: ItemInput[]) => items],
    ['a stream', (items: ItemInput[]) => streamed(items)],
  ])('accepts %s of items at each limit and refuses one past it, naming the limit and storing nothing', async (_name, source) => {
    const at = (items: ItemInput[]) => startOf(source(items));
    // Item count: 10 items, then 11.
    const count = at([...numbered(10)]);
    expect((await createBatch(sql, count, { limits })).batch.total).toBe(10);
    const tooMany = await refusedStart(at([...numbered(11)]), { limits });
    expect(tooMany).toBeInstanceOf(BatchTooLargeError);
    expect(tooMany).toMatchObject({ code: 'batch_too_large', limit: 'items', max: 10 });
    expect(tooMany.message).toMatch(/^item count: .*the limit is 10$/);

    // Key bytes: 1,024 bytes (S3's longest object key) of two-byte characters, then one byte more.
    const longKey = 'é'.repeat(MAX_KEY_BYTES / 2);
    const key = at([{ key: longKey }]);
    const roomy = { ...limits, maxTotalBytes: 10_000 };
    const { batch } = await createBatch(sql, key, { limits: roomy });
    expect((await sql`select key from leasehold_items where batch_id = ${batch.id}`)[0].key).toBe(longKey);
    const tooLong = await refusedStart(at([{ key: 'a' }, { key: `${longKey}x` }]), { limits: roomy });
    expect(tooLong).toMatchObject({ code: 'batch_too_large', limit: 'keyBytes', max: MAX_KEY_BYTES });
    expect(tooLong.message).toMatch(/^key bytes: the key of item "éé.*" is 1025 bytes; the limit is 1024$/);

    // Input bytes: JSON text of exactly 40 bytes, then 41.
    const input40 = { s: 'x'.repeat(40 - '{"s":""}'.length) };
    expect(Buffer.byteLength(JSON.stringify(input40))).toBe(40);
    const input = at([{ key: 'k', input: input40 }]);
    const stored = await createBatch(sql, input, { limits });
    expect((await sql`select input from leasehold_items where batch_id = ${stored.batch.id}`)[0].input).toEqual(input40);
    const bigInput = await refusedStart(at([{ key: 'k', input: { s: `${input40.s}x` } }]), { limits });
    expect(bigInput).toMatchObject({ code: 'batch_too_large', limit: 'inputBytes', max: 40 });
    expect(bigInput.message).toMatch(/^input bytes: the input of item "k" is 41 bytes of JSON; the limit is 40$/);

    // Total bytes: 10 items of a 10-byte key and a 30-byte input are 400 bytes; one byte more is refused.
    const full = (last: string) =>
      Array.from({ length: 10 }, (_, i) => ({
        key: `key-${String(i).padStart(6, '0')}${i === 9 ? last : ''}`,
        input: 'y'.repeat(28),
      }));
    const total = at(full(''));
    expect((await createBatch(sql, total, { limits })).batch.total).toBe(10);
    const tooBig = await refusedStart(at(full('z')), { limits });
    expect(tooBig).toMatchObject({ code: 'batch_too_large', limit: 'totalBytes', max: 400 });
    expect(tooBig.message).toMatch(/^total bytes: .*the limit is 400$/);
  });

  it('refuses a stream that goes past a limit after pieces were written, leaving no rows', async () => {
    // The first 10,000 items are written as one piece before the 10,002nd is refused.
    const b = startOf(streamed(numbered(10_002)));
    const error = await refusedStart(b, { limits: { maxItems: 10_001 } });
    expect(error).toMatchObject({ code: 'batch_too_large', limit: 'items', max: 10_001 });
  });

  it('stores nothing when the item stream fails part way', async () => {
    async function* failing(): AsyncGenerator<ItemInput> {
      yield* numbered(15_000);
      throw new Error('the listing failed');
    }
    const error = await refusedStart(startOf(failing()));
    expect(error.message).toBe('the listing failed');
  });

  it('refuses two items with one key in different pieces, naming the key and storing nothing', async () => {
    const items = [...numbered(12_000), { key: 's000042' }];
    const error = await refusedStart(startOf(streamed(items)));
    expect(error).toBeInstanceOf(InvalidBatchError);
    expect(error.message).toBe('duplicate item key "s000042"');
  });

  it.each([
    ['a NUL in a key', { key: 'a\u0000b' }, /key of item 1 .*NUL/],
    ['an unpaired surrogate in a key', { key: 'a\ud800' }, /key of item 1 .*unpaired surrogate/],
    ['a NUL in an input', { key: 'k', input: { s: 'a\u0000' } }, /input of item "k" .*NUL/],
    ['an unpaired surrogate in an input', { key: 'k', input: ['\udc00'] }, /input of item "k" .*unpaired surrogate/],
    ['an input that is not JSON', { key: 'k', input: { n: 10n } }, /input of item "k" is not JSON/],
    ['a key that is not a string', { key: 42 }, /item 1: key must be a string/],
  ])('refuses %s as invalid_batch, storing nothing', async (_name, item, message) => {
    const error = await refusedStart(startOf([item as ItemInput]));
    expect(error).toMatchObject({ code: 'invalid_batch' });
    expect(error.message).toMatch(message);
  });

  it('stores inputs whose text only looks like an escape (an escaped backslash before u0000)', async () => {
    const b = startOf([{ key: 'back\\slash', input: { s: '\\u0000 and \\ud800' } }]);
    const { batch } = await createBatch(sql, b);
    const [row] = await sql`select key, input from leasehold_items where batch_id = ${batch.id}`;
    expect(row).toEqual({ key: 'back\\slash', input: { s: '\\u0000 and \\ud800' } });
  });

  it(
    'starts the 200,000 items of 1,000-byte keys and 500-byte inputs that used to fail as one JSON value over 256 MiB',
    { timeout: 300_000 },
    async () => {
      const input = 'i'.repeat(498); // 500 bytes of JSON text with its quotes
      const b = startOf(
        Array.from({ length: 200_000 }, (_, i) => ({ key: `${String(i).padStart(6, '0')}${'k'.repeat(994)}`, input })),
      );
      expect(Buffer.byteLength(b.items[0].key)).toBe(1000);
      // Within the default limits: 200,000 items, 300,000,000 bytes of keys and inputs.
      expect(DEFAULT_START_LIMITS.maxItems).toBeGreaterThanOrEqual(200_000);
      expect(DEFAULT_START_LIMITS.maxTotalBytes).toBeGreaterThanOrEqual(300_000_000);
      const { batch, created } = await createBatch(sql, b);
      expect(created).toBe(true);
      expect(batch).toMatchObject({ total: 200_000, counts: { pending: 200_000 } });
      const [last] = await sql`select key, input from leasehold_items where batch_id = ${batch.id} order by key desc limit 1`;
      expect(last).toEqual({ key: b.items[199_999].key, input });
      await sql`delete from leasehold_batches where id = ${batch.id}`;
    },
  );

  it('starts one batch per request key when 10 clients start it at once with streams of several pieces', async () => {
    for (let round = 0; round < 3; round++) {
      const b = newBatch(0, { datasource: `streams-${round}` });
      // A start that waits past the lock timeout behind the one inserting gets 55P03, the
      // retryable answer (the API's 503 with Retry-After); like a client, it tries again.
      const start = async (): Promise<Awaited<ReturnType<typeof createBatch>>> => {
        for (let tries = 1; ; tries++) {
          try {
            return await createBatch(sql, { ...b, items: streamed(numbered(25_000)) }, { maxOpen: 1 });
          } catch (e) {
            if ((e as { code?: string }).code !== '55P03' || tries >= 20) throw e;
          }
        }
      };
      const { ok, errors } = await settle(Array.from({ length: 10 }, start));
      expect(errors).toEqual([]);
      const rows = await batchesWithKey(b.tenant, b.requestKey);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ total: 25_000, items: 25_000 });
      expect(ok.filter((r) => r.created)).toHaveLength(1);
      expect(new Set(ok.map((r) => r.batch.id))).toEqual(new Set([rows[0].id]));
    }
  });
});
