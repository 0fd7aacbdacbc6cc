// What a source object holds is read as what it is (issue 37, "Encodings"; docs/design.md,
// "Sources and results"), against the local S3 server and the real PostgreSQL. A source that
// cannot be read ends its batch `failed` with a reason that can always be stored: a parse error
// quoting a binary object's bytes held NUL characters, PostgreSQL refused the reason, the end
// itself failed, and the runs read the same range again for ever (the batch stayed open with
// total 0).
import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getBatch, redriveBatch, type BatchInfo, type BatchSource } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('enc-in');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

/** Start a batch over `source`, run it with one runner, and answer it once it ended. */
async function runToEnd(source: BatchSource, rangeBytes?: number): Promise<{ batch: BatchInfo; storeErrors: number }> {
  seq += 1;
  const { batch } = await startSourceBatch(db.sql, s3.client, {
    tenant: 'enc',
    datasource: `ds${seq}`,
    job: 'echo',
    params: {},
    requestKey: `enc-${seq}`,
    source,
  });
  let storeErrors = 0;
  const ended = await runUntilEnd(db.sql, batch.id, () => ({ work: async (item) => item.input }), {
    runner: {
      parallel: 4,
      beatMs: 200,
      staleMs: 2_000,
      backoffMs: 0,
      s3: () => s3.client,
      ...(rangeBytes === undefined ? {} : { sourceRangeBytes: rangeBytes }),
      onEvent: (e) => {
        if (e.type === 'store-error') storeErrors++;
      },
    },
    watchMs: 50,
    timeoutMs: 30_000,
  });
  return { batch: ended, storeErrors };
}

describe('a source object that is not text', () => {
  it('ends its batch failed at once with a storable reason (no store error, no second read)', async () => {
    const lines = Array.from({ length: 2_000 }, (_, i) => JSON.stringify({ n: i + 1 })).join('\n');
    const binary = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]), randomBytes(4_000)]);
    for (const [key, body] of [
      ['random.jsonl', binary],
      ['binary.csv', binary],
      ['zeros.jsonl', Buffer.alloc(3_000)],
    ] as const) {
      await s3.put('enc-in', key, body);
      const format = key.endsWith('.csv') ? 'csv' : 'jsonl';
      const { batch, storeErrors } = await runToEnd({ s3: { bucket: 'enc-in', key, format } });
      expect(batch, key).toMatchObject({ status: 'failed', reading: false, total: 0 });
      expect(batch.reason, key).not.toContain('\u0000');
      expect(storeErrors, key).toBe(0);
    }
    // A gzip object is not yet read as gzip here: it ends failed too, never read for ever.
    await s3.put('enc-in', 'data.jsonl.gz', gzipSync(lines));
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'data.jsonl.gz', format: 'jsonl' } });
    expect(batch).toMatchObject({ status: 'failed', reading: false });
  }, 120_000);
});

describe('a batch whose source could not be read', () => {
  it('is not redriven: its items are only the pages read before the bad line (409 source_failed)', async () => {
    const lines = Array.from({ length: 2_000 }, (_, i) => (i === 1_499 ? '{"n": oops}' : JSON.stringify({ n: i + 1 })));
    await s3.put('enc-in', 'bad-line.jsonl', lines.join('\n') + '\n');
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'bad-line.jsonl', format: 'jsonl' } }, 4_096);
    expect(batch).toMatchObject({ status: 'failed', sourceErrorLine: 1_500, reading: false });
    expect(batch.total).toBeGreaterThan(0);
    // Reopened, it ended `succeeded` over the first pages, the rest of the source never read.
    await expect(redriveBatch(db.sql, batch.id)).rejects.toMatchObject({ code: 'source_failed' });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'failed', total: batch.total });
  }, 60_000);
});
