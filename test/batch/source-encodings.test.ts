// What a source object holds is read as what it is (issue 37, "Encodings"; docs/design.md,
// "Sources and results"), against the local S3 server and the real PostgreSQL. A source that
// cannot be read ends its batch `failed` with a reason that can always be stored: a parse error
// quoting a binary object's bytes held NUL characters, PostgreSQL refused the reason, the end
// itself failed, and the runs read the same range again for ever (the batch stayed open with
// total 0).
import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
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
    // A gzip object is read as gzip: every line an item, never read for ever.
    await s3.put('enc-in', 'data.jsonl.gz', gzipSync(lines));
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'data.jsonl.gz', format: 'jsonl' } });
    expect(batch).toMatchObject({ status: 'succeeded', reading: false, total: 2_000 });
  }, 120_000);

  it.each([
    [
      'a PNG image',
      Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(3_000)]),
      'is a PNG image',
    ],
    ['a ZIP archive', Buffer.concat([Buffer.from('PK\x03\x04', 'latin1'), randomBytes(3_000)]), 'is a ZIP archive'],
    [
      'a PNG image in gzip',
      gzipSync(Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47]), randomBytes(3_000)])),
      'is a PNG image',
    ],
    ['NUL bytes', Buffer.alloc(3_000), 'holds a NUL byte at byte 0 (line 1): binary data'],
    ['UTF-16 without a byte order mark', Buffer.from('{"a":1}\n{"a":2}\n', 'utf16le'), 'UTF-16 without a byte order mark'],
    ['UTF-32', Buffer.from([0xff, 0xfe, 0, 0, 0x7b, 0, 0, 0]), 'is UTF-32 text'],
    ['bzip2', Buffer.concat([Buffer.from('BZh91AY&SY'), randomBytes(100)]), 'is bzip2-compressed data'],
  ])(
    '%s ends the batch failed at once, its reason naming what it is',
    async (name, body, says) => {
      const key = `not-text/${name.replace(/ /g, '-')}.jsonl`;
      await s3.put('enc-in', key, body);
      const { batch, storeErrors } = await runToEnd({ s3: { bucket: 'enc-in', key, format: 'jsonl' } });
      expect(batch).toMatchObject({ status: 'failed', reading: false, total: 0 });
      expect(batch.reason).toContain(says);
      expect(batch.reason).toContain(`s3://enc-in/${key}`);
      expect(storeErrors).toBe(0);
    },
    60_000,
  );

  it('a NUL byte pages into the object ends the batch failed naming its byte and line', async () => {
    const lines = Array.from({ length: 3_000 }, (_, i) => JSON.stringify({ n: i + 1 }));
    const text = lines.join('\n') + '\n';
    const at = text.indexOf('{"n":2500}');
    const body = Buffer.from(text);
    body[at + 5] = 0;
    await s3.put('enc-in', 'late-nul.jsonl', body);
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'late-nul.jsonl', format: 'jsonl' } }, 4_096);
    expect(batch).toMatchObject({ status: 'failed', sourceErrorLine: 2_500 });
    expect(batch.reason).toContain(`holds a NUL byte at byte ${at + 5} (line 2500)`);
    expect(batch.total).toBeGreaterThan(0);
  }, 60_000);
});

/**
 * The items of batch `id` by key, inputs as stored; a line or row number's zero padding
 * (numberedKey) taken off, once every such key is checked to have the one width (the order the
 * padding gives is test/batch/source-order.test.ts's).
 */
async function itemsOf(id: string): Promise<Map<string, unknown>> {
  const rows = await db.sql<{ key: string; input: unknown }[]>`select key, input from leasehold_items where batch_id = ${id}`;
  const numbered = rows.filter((r) => /^0\d/.test(r.key));
  if (numbered.length > 0) expect(new Set(rows.map((r) => r.key.length)).size).toBe(1);
  return new Map(rows.map((r) => [numbered.length > 0 ? r.key.replace(/^0+(?=\d)/, '') : r.key, r.input]));
}

const putWith = (key: string, body: Buffer | string, contentEncoding?: string) =>
  s3.client.send(new PutObjectCommand({ Bucket: 'enc-in', Key: key, Body: body, ContentEncoding: contentEncoding }));

// Values past ASCII and past the BMP (a surrogate pair in UTF-16), so a character cut between
// chunks or pages would show.
const values = (n: number) => Array.from({ length: n }, (_, i) => ({ n: i + 1, s: `é✓😀${'x'.repeat(i % 37)}` }));

describe('a gzip object', () => {
  it('JSON Lines by its magic bytes: decompressed as it streams, page after page, every line one item', async () => {
    const v = values(3_000);
    await s3.put('enc-in', 'gz/lines.jsonl.gz', gzipSync(v.map((x) => JSON.stringify(x)).join('\r\n') + '\n'));
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'gz/lines.jsonl.gz', format: 'jsonl' } }, 4_096);
    expect(batch).toMatchObject({ status: 'succeeded', total: 3_000 });
    expect(batch.sourcePages).toBeGreaterThan(20);
    const items = await itemsOf(batch.id);
    expect(items.size).toBe(3_000);
    v.forEach((x) => expect(items.get(String(x.n))).toEqual(x));
  }, 60_000);

  it('CSV by its Content-Encoding: quoted newlines kept across pages, keyed by its key column', async () => {
    const v = values(2_000);
    const csv = 'id,text\n' + v.map((x) => `${x.n},"${x.s}\nline ""two"""`).join('\n') + '\n';
    await putWith('gz/table.csv', gzipSync(csv), 'gzip');
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'gz/table.csv', format: 'csv', keyColumn: 'id' } }, 4_096);
    expect(batch).toMatchObject({ status: 'succeeded', total: 2_000 });
    expect(batch.sourcePages).toBeGreaterThan(20);
    const items = await itemsOf(batch.id);
    v.forEach((x) => expect(items.get(String(x.n))).toEqual({ id: String(x.n), text: `${x.s}\nline "two"` }));
  }, 60_000);

  it('that cannot be decompressed (cut short, or not gzip under Content-Encoding gzip) ends the batch failed', async () => {
    const whole = gzipSync(
      values(2_000)
        .map((x) => JSON.stringify(x))
        .join('\n'),
    );
    await s3.put('enc-in', 'gz/cut.jsonl.gz', whole.subarray(0, Math.floor(whole.length / 2)));
    await putWith('gz/plain.jsonl', '{"a":1}\n', 'gzip');
    for (const key of ['gz/cut.jsonl.gz', 'gz/plain.jsonl']) {
      const { batch, storeErrors } = await runToEnd({ s3: { bucket: 'enc-in', key, format: 'jsonl' } }, 4_096);
      expect(batch, key).toMatchObject({ status: 'failed', reading: false });
      expect(batch.reason, key).toContain(`s3://enc-in/${key} cannot be decompressed as gzip`);
      expect(storeErrors, key).toBe(0);
    }
  }, 60_000);

  it('another Content-Encoding is refused, naming it', async () => {
    await putWith('gz/brotli.jsonl', '{"a":1}\n', 'br');
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'gz/brotli.jsonl', format: 'jsonl' } });
    expect(batch).toMatchObject({ status: 'failed' });
    expect(batch.reason).toContain('has Content-Encoding br, which is not read (gzip is)');
  }, 60_000);
});

describe('byte order marks', () => {
  it('a UTF-8 BOM is skipped: the first line is JSON, the first column is named as written', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    await s3.put('enc-in', 'bom/a.jsonl', Buffer.concat([bom, Buffer.from('{"a":1}\n{"a":2}\n')]));
    await s3.put('enc-in', 'bom/a.csv', Buffer.concat([bom, Buffer.from('id,v\n1,x\n2,y\n')]));
    await s3.put('enc-in', 'bom/b.jsonl.gz', gzipSync(Buffer.concat([bom, Buffer.from('{"b":1}\n')])));
    const j = await runToEnd({ s3: { bucket: 'enc-in', key: 'bom/a.jsonl', format: 'jsonl' } });
    expect(j.batch).toMatchObject({ status: 'succeeded', total: 2 });
    expect(await itemsOf(j.batch.id)).toEqual(
      new Map([
        ['1', { a: 1 }],
        ['2', { a: 2 }],
      ]),
    );
    const c = await runToEnd({ s3: { bucket: 'enc-in', key: 'bom/a.csv', format: 'csv', keyColumn: 'id' } });
    expect(c.batch).toMatchObject({ status: 'succeeded', total: 2 });
    expect(await itemsOf(c.batch.id)).toEqual(
      new Map([
        ['1', { id: '1', v: 'x' }],
        ['2', { id: '2', v: 'y' }],
      ]),
    );
    const g = await runToEnd({ s3: { bucket: 'enc-in', key: 'bom/b.jsonl.gz', format: 'jsonl' } });
    expect(await itemsOf(g.batch.id)).toEqual(new Map([['1', { b: 1 }]]));
  }, 60_000);

  it.each(['utf-16le', 'utf-16be'] as const)(
    '%s is decoded, page after page, pairs and all',
    async (charset) => {
      const v = values(2_000);
      const text = '\ufeff' + v.map((x) => JSON.stringify(x)).join('\n') + '\n';
      const le = Buffer.from(text, 'utf16le');
      const body = charset === 'utf-16le' ? le : le.swap16();
      const key = `bom/${charset}.jsonl`;
      await s3.put('enc-in', key, body);
      const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key, format: 'jsonl' } }, 4_096);
      expect(batch).toMatchObject({ status: 'succeeded', total: 2_000 });
      expect(batch.sourcePages).toBeGreaterThan(20);
      const items = await itemsOf(batch.id);
      v.forEach((x) => expect(items.get(String(x.n))).toEqual(x));
      // CSV too, gzipped.
      const csv = Buffer.from(
        '\ufeffid;s\n' +
          v
            .slice(0, 50)
            .map((x) => `${x.n};${x.s}`)
            .join('\n'),
        'utf16le',
      );
      await s3.put('enc-in', `bom/${charset}.csv.gz`, gzipSync(charset === 'utf-16le' ? csv : csv.swap16()));
      const c = await runToEnd({
        s3: { bucket: 'enc-in', key: `bom/${charset}.csv.gz`, format: 'csv', delimiter: 'semicolon' },
      });
      expect(c.batch).toMatchObject({ status: 'succeeded', total: 50 });
      expect((await itemsOf(c.batch.id)).get('50')).toEqual({ id: '50', s: v[49].s });
    },
    60_000,
  );
});

describe('CSV options', () => {
  it.each([
    ['tab', '\t'],
    ['semicolon', ';'],
    ['pipe', '|'],
    ['space', ' '],
    ['comma', ','],
  ] as const)(
    'delimiter %s splits fields on it, a quoted one keeps it',
    async (delimiter, d) => {
      const key = `opts/${delimiter}.csv`;
      await s3.put('enc-in', key, [`id${d}a${d}b`, `1${d}"x${d}y"${d}z`, `2${d}p${d}q`].join('\n') + '\n');
      const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key, format: 'csv', delimiter } });
      expect(batch).toMatchObject({ status: 'succeeded', total: 2 });
      expect(await itemsOf(batch.id)).toEqual(
        new Map([
          ['1', { id: '1', a: `x${d}y`, b: 'z' }],
          ['2', { id: '2', a: 'p', b: 'q' }],
        ]),
      );
    },
    60_000,
  );

  it('a given header names the columns: the first row is data, keyed by a given column', async () => {
    await s3.put('enc-in', 'opts/given.csv', 'k1,alpha\nk2,beta\n');
    const { batch } = await runToEnd({
      s3: { bucket: 'enc-in', key: 'opts/given.csv', format: 'csv', header: ['id', 'name'], keyColumn: 'id' },
    });
    expect(batch).toMatchObject({ status: 'succeeded', total: 2 });
    expect(await itemsOf(batch.id)).toEqual(
      new Map([
        ['k1', { id: 'k1', name: 'alpha' }],
        ['k2', { id: 'k2', name: 'beta' }],
      ]),
    );
    // A row with another number of fields than the given header ends the batch failed.
    await s3.put('enc-in', 'opts/ragged.csv', 'k1,alpha\nk2,beta,extra\n');
    const r = await runToEnd({ s3: { bucket: 'enc-in', key: 'opts/ragged.csv', format: 'csv', header: ['id', 'name'] } });
    expect(r.batch).toMatchObject({ status: 'failed', sourceErrorLine: 2 });
    expect(r.batch.reason).toContain('line 2 has 3 fields; the given header has 2');
  }, 60_000);

  it("quote ' quotes fields (doubled within), newlines inside them kept across pages; a double quote is a character", async () => {
    const rows = Array.from({ length: 600 }, (_, i) => `${i + 1},'it''s\n"${i + 1}"'`);
    await s3.put('enc-in', 'opts/single.csv', 'id,v\n' + rows.join('\n') + '\n');
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'opts/single.csv', format: 'csv', quote: "'" } }, 4_096);
    expect(batch).toMatchObject({ status: 'succeeded', total: 600 });
    expect(batch.sourcePages).toBeGreaterThan(2);
    const items = await itemsOf(batch.id);
    expect(items.get('600')).toEqual({ id: '600', v: `it's\n"600"` });
  }, 60_000);

  it('quote null: no quoting, a double quote is part of its field', async () => {
    await s3.put('enc-in', 'opts/noquote.csv', 'id,v\n1,"a\n2,b"\n');
    const { batch } = await runToEnd({ s3: { bucket: 'enc-in', key: 'opts/noquote.csv', format: 'csv', quote: null } });
    expect(batch).toMatchObject({ status: 'succeeded', total: 2 });
    expect(await itemsOf(batch.id)).toEqual(
      new Map([
        ['1', { id: '1', v: '"a' }],
        ['2', { id: '2', v: 'b"' }],
      ]),
    );
  }, 60_000);
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
