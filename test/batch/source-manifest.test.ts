// An S3 Inventory report as a source (issue 37, item 4; docs/api.md, "source"), against the local
// S3 server and the real PostgreSQL: a manifest.json and its gzip CSV parts, each row one item
// keyed by the object's key (URL-encoded in the report, decoded), read page by page across the
// parts with no listing call at all; a report that is not CSV (ORC, Parquet) refused at start.
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getBatch, readPage, SourceError, type SourceCursor, type StoredSource } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;
/** The S3 commands the test's client sent, by name. */
const commands: string[] = [];

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('inv-src');
  await s3.createBucket('inv-dest');
  s3.client.middlewareStack.add(
    (next, context) => (args) => {
      commands.push(context.commandName as string);
      return next(args);
    },
    { step: 'initialize', name: 'countCommands' },
  );
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

const SCHEMA = 'Bucket, Key, Size, LastModifiedDate, ETag, StorageClass';

/** A key as S3 Inventory writes it: URL-encoded, a space as `+`. */
const encoded = (key: string) => encodeURIComponent(key).replace(/%20/g, '+');

/** The object keys of the report: spaces, `+`, `%`, a comma, a quote, non-ASCII. */
const keyOf = (i: number) =>
  [`plain/${i}.txt`, `with space/${i} a.txt`, `plus+sign/${i}+1`, `pct%20/${i}`, `comma,"q"/${i}`, `ünï/日本${i}`][i % 6];

/** The CSV rows of objects `from` to `to` (exclusive), every field quoted as S3 Inventory writes them. */
function csvPart(from: number, to: number): string {
  let out = '';
  for (let i = from; i < to; i++) {
    out += `"inv-src","${encoded(keyOf(i))}","${i * 10}","2024-01-0${(i % 9) + 1}T00:00:00.000Z","e${i}","STANDARD"\n`;
  }
  return out;
}

/** Put a report of `n` objects in `parts` gzip CSV parts under `dir`, and its manifest; answers the manifest's key. */
async function putReport(dir: string, n: number, parts: number, manifest: Record<string, unknown> = {}): Promise<string> {
  const files = [];
  for (let p = 0; p < parts; p++) {
    const body = gzipSync(csvPart(Math.floor((n * p) / parts), Math.floor((n * (p + 1)) / parts)));
    const key = `${dir}/data/part-${p}.csv.gz`;
    await s3.put('inv-dest', key, body);
    files.push({ key, size: body.length, MD5checksum: 'ignored' });
  }
  const key = `${dir}/manifest.json`;
  const json = {
    sourceBucket: 'inv-src',
    destinationBucket: 'arn:aws:s3:::inv-dest',
    version: '2016-11-30',
    creationTimestamp: '1514944800000',
    fileFormat: 'CSV',
    fileSchema: SCHEMA,
    files,
    ...manifest,
  };
  await s3.put('inv-dest', key, JSON.stringify(json));
  return key;
}

const start = (manifest: string) =>
  startSourceBatch(db.sql, s3.client, {
    tenant: 'inv',
    datasource: `d${++seq}`,
    job: 'echo',
    params: {},
    requestKey: `inv-${seq}`,
    source: { s3: { bucket: 'inv-dest', manifest } },
  });

describe('an inventory manifest as a source', () => {
  it('is one item per listed object, keyed by its decoded key, exactly once, with no listing call', async () => {
    const n = 600;
    const manifest = await putReport('r1', n, 2);
    const { batch } = await start(manifest);
    expect(batch.source).toMatchObject({ s3: { bucket: 'inv-dest', manifest, columns: SCHEMA.split(', ') } });
    commands.length = 0;
    const ended = await runUntilEnd(db.sql, batch.id, () => ({ work: async (item) => item.input }), {
      runner: { parallel: 4, beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client, sourceRangeBytes: 2_048 },
      watchMs: 50,
      timeoutMs: 60_000,
    });
    expect(ended).toMatchObject({ status: 'succeeded', reading: false, total: n });
    // Many pages (2 KiB of text each), both parts read; no ListObjects, no HeadObject.
    expect(ended.sourcePages).toBeGreaterThan(10);
    expect(commands).toContain('GetObjectCommand');
    expect(commands.filter((c) => c !== 'GetObjectCommand')).toEqual([]);
    const rows = await db.sql<{ key: string; input: Record<string, unknown> }[]>`select key, input
      from leasehold_items where batch_id = ${batch.id} order by (input->>'size')::int`;
    expect(rows).toHaveLength(n);
    rows.forEach((r, i) => {
      expect(r.key).toBe(keyOf(i));
      expect(r.input).toEqual({
        bucket: 'inv-src',
        key: keyOf(i),
        size: i * 10,
        lastModifiedDate: `2024-01-0${(i % 9) + 1}T00:00:00.000Z`,
        etag: `e${i}`,
        storageClass: 'STANDARD',
      });
    });
  }, 120_000);

  it('reads page by page across its parts, the cursor naming the part', async () => {
    const n = 300;
    const manifest = await putReport('r2', n, 3);
    const { batch } = await start(manifest);
    const source = (await getBatch(db.sql, batch.id)).source as StoredSource;
    let cursor: SourceCursor | null = null;
    const keys: string[] = [];
    const parts = new Set<number | undefined>();
    for (let pages = 0; pages < 1_000; pages++) {
      const page = await readPage(s3.client, source, cursor, { maxInputBytes: 65_536, rangeBytes: 1_024 });
      keys.push(...page.items.map((i) => i.key));
      cursor = page.cursor;
      parts.add((cursor as { part?: number }).part);
      if (page.done) break;
    }
    expect(keys).toEqual(Array.from({ length: n }, (_, i) => keyOf(i)));
    expect([...parts]).toEqual([0, 1, 2]);
  }, 60_000);

  it('refuses a report that is not CSV (ORC, Parquet) or has no Key column at start, with a 400', async () => {
    for (const [dir, extra, says] of [
      ['orc', { fileFormat: 'ORC' }, 'only a CSV inventory report'],
      ['parquet', { fileFormat: 'Parquet' }, 'only a CSV inventory report'],
      ['nokey', { fileSchema: 'Bucket, Size' }, 'no Key column'],
      ['nofiles', { files: [] }, 'lists no part'],
    ] as const) {
      const manifest = await putReport(dir, 10, 1, extra);
      const e = await start(manifest).catch((x: unknown) => x);
      expect(e, dir).toBeInstanceOf(SourceError);
      expect((e as SourceError).code, dir).toBe('invalid_source');
      expect((e as SourceError).message, dir).toContain(says);
    }
    await s3.put('inv-dest', 'bad/manifest.json', 'not json');
    await expect(start('bad/manifest.json')).rejects.toMatchObject({ code: 'invalid_source' });
    await expect(start('none/manifest.json')).rejects.toMatchObject({ code: 'source_not_found' });
  }, 60_000);
});
