// A prefix source lists keys of up to S3's 1,024 bytes, and every one is an item key
// (docs/design.md, "Batches": keys of at most MAX_KEY_BYTES), against a real local
// S3-compatible server and the real PostgreSQL: a prefix holding one object whose key is 1,020
// bytes (a valid S3 key past the 1,000 bytes item keys used to allow) runs every object.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_KEY_BYTES } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('lk-bucket');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

describe('a prefix with an object key of S3 length', () => {
  it('runs every object, the 1,020-byte key included', async () => {
    // Segments of 200 bytes: s3rver keeps each object under a file name of its own.
    const long = 'p/' + Array.from({ length: 5 }, () => 'a'.repeat(200)).join('/') + '/' + 'z'.repeat(13);
    expect(Buffer.byteLength(long)).toBe(1_020);
    await s3.put('lk-bucket', 'p/short', 'x');
    await s3.put('lk-bucket', long, 'y');
    const { batch } = await startSourceBatch(db.sql, s3.client, {
      tenant: 'lk',
      datasource: 'd',
      job: 'echo',
      params: {},
      requestKey: 'lk',
      source: { s3: { bucket: 'lk-bucket', prefix: 'p/' } },
    });
    const end = await runUntilEnd(db.sql, batch.id, () => ({ work: async () => 1 }), {
      runner: { beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client },
      timeoutMs: 20_000,
    });
    expect(end.reason).toBeNull();
    expect(end.status).toBe('succeeded');
    const items = await db.sql<
      { key: string; state: string }[]
    >`select key, state from leasehold_items where batch_id = ${batch.id} order by key`;
    expect(items.map((i) => i.state)).toEqual(['done', 'done']);
    expect(items.map((i) => Buffer.byteLength(i.key)).sort()).toEqual([1_020, 7]);
    expect(MAX_KEY_BYTES).toBe(1_024);
  }, 60_000);
});
