// Items from S3, results to S3 (issue 21; docs/design.md, "Sources and results"), against a real
// local S3-compatible server (s3rver) reached by the real @aws-sdk/client-s3, and the real
// PostgreSQL: a prefix, a JSON Lines object and a CSV object read in pages by runs; bad sources
// refused at start (nothing stored) or ending the batch failed with the first bad line; results
// written as parts and a manifest.
import { DeleteBucketCommand, GetObjectCommand, HeadBucketCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchEvents,
  RESULTS_MAX_TRIES,
  Runner,
  writeDueResults,
  type BatchFinishedDetail,
  type BatchInfo,
  type BatchSource,
  type ResultsTarget,
  type StartRequest,
} from '../../src/batch/index.js';
import { getBatch } from '../../src/batch/index.js';
import { LIST_CHAINS, readPage, type SourceCursor, type StoredSource } from '../../src/batch/source.js';
import { createEventsEndpoint, localEventsEnv, type LocalBusEvent } from '../../src/local/index.js';
import { silentLog } from '../../src/log.js';
import { EventBridgePublisher, sendEvents } from '../../src/runtime/events.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('in-bucket');
  await s3.createBucket('out-bucket');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

function start(source: BatchSource, extra: Partial<StartRequest> = {}, client = s3.client) {
  seq += 1;
  return startSourceBatch(db.sql, client, {
    tenant: 'acme',
    datasource: `ds${seq}`,
    job: 'echo',
    params: {},
    requestKey: `k${seq}`,
    source,
    ...extra,
  });
}

/** Run batch `id` with one runner (reading settings small, so a source takes many pages) until it ends. */
async function runToEnd(id: string, options: { rangeBytes?: number; pageObjects?: number } = {}): Promise<BatchInfo> {
  return runUntilEnd(db.sql, id, () => ({ work: async (item) => ({ seen: item.input }) }), {
    runner: {
      parallel: 8,
      beatMs: 200,
      staleMs: 2_000,
      backoffMs: 0,
      s3: () => s3.client,
      sourceRangeBytes: options.rangeBytes ?? 4096,
      sourcePageObjects: options.pageObjects ?? 500,
    },
    watchMs: 100,
    // With results to write, until the finishing run's first try is recorded too: closing the
    // runner before would stop that write (a worker at its deadline), which is not what these
    // tests look at.
    until: (b) => b.status !== 'open' && (b.results === null || b.resultsManifest !== null || b.resultsError !== null),
  });
}

/** Send `batchId`'s unsent events through the real EventBridge client to a local PutEvents endpoint. */
async function sendToLocalBus(
  batchId: string,
): Promise<{ sent: Awaited<ReturnType<typeof sendEvents>>; received: LocalBusEvent[] }> {
  const received: LocalBusEvent[] = [];
  const bus = await createEventsEndpoint({ deliver: async () => undefined, onEvent: (e) => received.push(e) });
  const env = localEventsEnv(bus.url);
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    const sent = await sendEvents(
      { sql: db.sql, publisher: new EventBridgePublisher('leasehold-test'), webhookSecret: undefined, log: silentLog },
      { batchId },
    );
    return { sent, received };
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await bus.close();
  }
}

/** Put objects `[key, body]` into in-bucket, 50 at a time (the client's sockets). */
async function putAll(objects: [string, string][]): Promise<void> {
  for (let i = 0; i < objects.length; i += 50) {
    await Promise.all(objects.slice(i, i + 50).map(([key, body]) => s3.put('in-bucket', key, body)));
  }
}

async function keysOf(id: string): Promise<string[]> {
  const rows = await db.sql<{ key: string }[]>`select key from leasehold_items where batch_id = ${id} order by key`;
  return rows.map((r) => r.key);
}

describe('a prefix source', () => {
  it('gives one item per object under the prefix, read in pages, and answers at once while reading', async () => {
    const n = 1_234;
    await putAll(Array.from({ length: n }, (_, i) => [`objs/f${String(i).padStart(5, '0')}.txt`, `body ${i}`]));
    await s3.put('in-bucket', 'other/outside.txt', 'not under the prefix');
    const { batch, created } = await start({ s3: { bucket: 'in-bucket', prefix: 'objs/' } });
    expect(created).toBe(true);
    expect(batch.status).toBe('open');
    expect(batch.reading).toBe(true);
    expect(batch.total).toBe(0);
    const done = await runToEnd(batch.id, { pageObjects: 500 });
    expect(done.status).toBe('succeeded');
    expect(done.reading).toBe(false);
    expect(done.total).toBe(n);
    // First page one list call of up to 500 objects, then pages of up to 500 from the chains
    // the rest is cut into (a chain that ends early leaves its page short).
    expect(done.sourcePages).toBeGreaterThanOrEqual(Math.ceil(n / 500));
    expect(done.sourcePages).toBe(await pagesOf(done.source!, 500));
    const keys = await keysOf(batch.id);
    expect(keys).toHaveLength(n);
    expect(keys[0]).toBe('objs/f00000.txt');
    expect(keys.every((k) => k.startsWith('objs/'))).toBe(true);
    const [row] = await db.sql<{ input: { bucket: string; key: string; size: number; etag: string } }[]>`
      select input from leasehold_items where batch_id = ${batch.id} and key = 'objs/f00007.txt'`;
    expect(row.input).toMatchObject({ bucket: 'in-bucket', key: 'objs/f00007.txt', size: 'body 7'.length });
    expect(row.input.etag).toMatch(/^"[0-9a-f]{32}"$/);
  }, 120_000);
});

/** Read `source` page by page as a reader does; answers every page's keys and cursor. */
async function readAll(source: StoredSource, pageObjects: number, from: SourceCursor | null = null) {
  const pages: { keys: string[]; cursor: SourceCursor }[] = [];
  for (let cursor = from; ;) {
    const page = await readPage(s3.client, source, cursor, { maxInputBytes: 65_536, pageObjects });
    pages.push({ keys: page.items.map((i) => i.key), cursor: page.cursor });
    if (page.done) return pages;
    cursor = page.cursor;
  }
}

async function pagesOf(source: StoredSource, pageObjects: number): Promise<number> {
  return (await readAll(source, pageObjects)).length;
}

describe("a prefix's listing", () => {
  it('is cut into chains listed at once after its first page; each object is read exactly once', async () => {
    const n = 3_000;
    await putAll(Array.from({ length: n }, (_, i) => [`cut/${String(i).padStart(6, '0')}`, 'x']));
    const pages = await readAll({ s3: { bucket: 'in-bucket', prefix: 'cut/' } }, 400);
    const keys = pages.flatMap((p) => p.keys);
    expect(keys).toHaveLength(n);
    expect(new Set(keys).size).toBe(n);
    expect(pages[0].keys).toHaveLength(400);
    const second = pages[1].cursor as Extract<SourceCursor, { chains: unknown }>;
    expect(second.split).toBe(true);
    expect(second.chains.length).toBe(LIST_CHAINS);
    // Evenly cut keys give each chain about its share: the second page takes from every chain.
    const firstKeys = pages[1].keys.map((k) => Number(k.slice('cut/'.length)));
    expect(Math.max(...firstKeys) - Math.min(...firstKeys)).toBeGreaterThan(1_500);
    expect(pages.length).toBeLessThanOrEqual(Math.ceil(n / 400) + LIST_CHAINS);
  }, 120_000);

  it('lists keys of any shape once each: letters, digits, spaces, non-ASCII, a key that starts another', async () => {
    const names = [
      ...Array.from({ length: 300 }, (_, i) => `a${i}`),
      ...Array.from({ length: 300 }, (_, i) => `Z ${i}`),
      ...Array.from({ length: 200 }, (_, i) => `é-${i}`),
      ...Array.from({ length: 200 }, (_, i) => `😀${i}`),
      ...Array.from({ length: 100 }, (_, i) => `~${'~'.repeat(i % 5)}${i}`),
      'a',
      'a00',
      'a000',
      '0',
      '!',
      '00J',
    ];
    await putAll(names.map((k) => [`odd/${k}`, 'x']));
    for (const pageObjects of [50, 333]) {
      const pages = await readAll({ s3: { bucket: 'in-bucket', prefix: 'odd/' } }, pageObjects);
      const keys = pages.flatMap((p) => p.keys);
      expect(new Set(names).size).toBe(names.length);
      expect(keys.length).toBe(names.length);
      expect(new Set(keys)).toEqual(new Set(names.map((k) => `odd/${k}`)));
    }
  }, 120_000);

  it('finds its cuts with few one-key listings when the keys share a long start after the prefix', async () => {
    const n = 3_000;
    await putAll(Array.from({ length: n }, (_, i) => [`deep/data/2024/01/01/part-${String(i).padStart(5, '0')}.json`, 'x']));
    // The real client against the local server, with the one-key listings (the probes) counted.
    let probes = 0;
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { MaxKeys?: number };
        if (context.commandName === 'ListObjectsV2Command' && input.MaxKeys === 1) probes++;
        return next(args);
      },
      { step: 'initialize' },
    );
    const source = { s3: { bucket: 'in-bucket', prefix: 'deep/' } };
    const first = await readPage(client, source, null, { maxInputBytes: 65_536, pageObjects: 400 });
    const second = await readPage(client, source, first.cursor, { maxInputBytes: 65_536, pageObjects: 400 });
    expect((second.cursor as Extract<SourceCursor, { chains: unknown }>).chains).toHaveLength(LIST_CHAINS);
    // 26 characters every key shares past the prefix cost one listing each at most, then a few
    // binary searches (it took 65, the limit, and made no cut, before).
    expect(probes).toBeLessThanOrEqual(45);
    const keys = [...first.items, ...second.items].map((i) => i.key);
    for (let cursor = second.cursor, done = second.done; !done;) {
      const page = await readPage(client, source, cursor, { maxInputBytes: 65_536, pageObjects: 400 });
      keys.push(...page.items.map((i) => i.key));
      [cursor, done] = [page.cursor, page.done];
    }
    expect(new Set(keys).size).toBe(n);
    expect(keys).toHaveLength(n);
  }, 120_000);

  it('reads on from a cursor an earlier version stored (one continuation token)', async () => {
    const n = 700;
    await putAll(Array.from({ length: n }, (_, i) => [`old/${String(i).padStart(4, '0')}`, 'x']));
    const r = await s3.client.send(new ListObjectsV2Command({ Bucket: 'in-bucket', Prefix: 'old/', MaxKeys: 100 }));
    const pages = await readAll({ s3: { bucket: 'in-bucket', prefix: 'old/' } }, 250, {
      token: r.NextContinuationToken!,
    });
    const keys = pages.flatMap((p) => p.keys);
    expect(keys).toEqual(Array.from({ length: n - 100 }, (_, i) => `old/${String(i + 100).padStart(4, '0')}`));
    expect(pages).toHaveLength(Math.ceil((n - 100) / 250));
  }, 60_000);
});

describe('a JSON Lines source', () => {
  it('gives one item per line, keyed by line number, with lines split across byte ranges exactly once', async () => {
    // Multi-byte characters, CRLF endings, a blank line and no newline at the end.
    const lines: string[] = [];
    for (let i = 1; i <= 3_000; i++)
      lines.push(i === 1500 ? '' : JSON.stringify({ i, text: `zeile ${i} — ünïcødé ✓ ${'x'.repeat(i % 97)}` }));
    const body = lines
      .map((l, i) => (i % 3 === 0 ? `${l}\r\n` : `${l}\n`))
      .join('')
      .replace(/\n$/, '');
    await s3.put('in-bucket', 'lists/a.jsonl', body);
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'lists/a.jsonl', format: 'jsonl' } });
    expect(batch.source).toMatchObject({ s3: { key: 'lists/a.jsonl', size: Buffer.byteLength(body) } });
    const done = await runToEnd(batch.id, { rangeBytes: 4096 });
    expect(done.status).toBe('succeeded');
    expect(done.total).toBe(2_999);
    expect(done.sourcePages).toBeGreaterThan(20);
    const rows = await db.sql<{ key: string; input: { i: number; text: string } }[]>`
      select key, input from leasehold_items where batch_id = ${batch.id}`;
    expect(rows).toHaveLength(2_999);
    for (const r of rows) {
      expect(r.input.i).toBe(Number(r.key));
      expect(r.input.text).toBe(`zeile ${r.input.i} — ünïcødé ✓ ${'x'.repeat(r.input.i % 97)}`);
    }
    expect(rows.some((r) => Number(r.key) === 1500)).toBe(false);
    expect(rows.every((r) => r.key.length === String(Buffer.byteLength(body)).length)).toBe(true);
  }, 120_000);

  it('ends the batch failed at a malformed line, naming it and storing its number', async () => {
    const body = ['{"a":1}', '{"a":2}', '{"a": oops}', '{"a":4}'].join('\n') + '\n';
    await s3.put('in-bucket', 'lists/bad.jsonl', body);
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'lists/bad.jsonl', format: 'jsonl' } });
    const done = await runToEnd(batch.id);
    expect(done.status).toBe('failed');
    expect(done.reason).toMatch(/^line 3 is not JSON/);
    expect(done.sourceErrorLine).toBe(3);
    expect(done.reading).toBe(false);
  }, 60_000);
});

describe("a JSON Lines line's size", () => {
  it('is checked as the JSON the item stores: a short line whose number grows (1e20) fits, a long one past the limit fails naming its line', async () => {
    const long = `{"s":"${'x'.repeat(60)}"}`;
    const body = ['[1e20]', '{"n":-9e20,"m":1e-6}', long, '{"a":4}'].join('\n') + '\n';
    await s3.put('in-bucket', 'lists/sizes.jsonl', body);
    const source = {
      s3: { bucket: 'in-bucket', key: 'lists/sizes.jsonl', format: 'jsonl' as const, size: Buffer.byteLength(body), etag: '' },
    };
    // 23 and 41 bytes as JSON again (from 6 and 20): under a limit of 64, though 6 × 20 is past it.
    const fits = await readPage(s3.client, source, { offset: 0, line: 0, row: 0 }, { maxInputBytes: 64, rangeBytes: 28 });
    expect(fits.items).toEqual([
      { key: '001', input: [1e20] },
      { key: '002', input: { n: -9e20, m: 1e-6 } },
    ]);
    expect(JSON.stringify(fits.items[1]!.input)).toHaveLength(41);
    await expect(readPage(s3.client, source, fits.cursor, { maxInputBytes: 64 })).rejects.toThrow(
      /^input bytes: line 3 is 68 bytes of JSON; the limit is 64$/,
    );
    // Under a limit of 30 the grown number is past it, though its line is 20 bytes.
    await expect(readPage(s3.client, source, { offset: 0, line: 0, row: 0 }, { maxInputBytes: 30 })).rejects.toThrow(
      /^input bytes: line 2 is 41 bytes of JSON; the limit is 30$/,
    );
  }, 30_000);
});

describe("a CSV row's size", () => {
  it('is checked as the JSON the item stores: control characters that grow sixfold count, a row past the limit fails naming its line', async () => {
    // Row 2's 10 control characters write as 60 bytes of JSON (\u0001 …): 76 bytes in all.
    const body = `a,b\nx,y\n${'\u0001'.repeat(10)},z\n${'w'.repeat(20)},v\n`;
    await s3.put('in-bucket', 'tables/sizes.csv', body);
    const source = {
      s3: { bucket: 'in-bucket', key: 'tables/sizes.csv', format: 'csv' as const, size: Buffer.byteLength(body), etag: '' },
    };
    const at = { offset: 0, line: 0, row: 0 };
    expect(JSON.stringify({ a: '\u0001'.repeat(10), b: 'z' })).toHaveLength(76);
    await expect(readPage(s3.client, source, at, { maxInputBytes: 75 })).rejects.toThrow(
      /^input bytes: line 3 is 76 bytes of JSON; the limit is 75$/,
    );
    const fits = await readPage(s3.client, source, at, { maxInputBytes: 76 });
    expect(fits.items.map((i) => i.input)).toEqual([
      { a: 'x', b: 'y' },
      { a: '\u0001'.repeat(10), b: 'z' },
      { a: 'w'.repeat(20), b: 'v' },
    ]);
    // Line 4 alone (from the cursor after line 3): 36 bytes of JSON from 23 of text.
    const after3 = { offset: 21, line: 3, row: 2, columns: ['a', 'b'] };
    await expect(readPage(s3.client, source, after3, { maxInputBytes: 35 })).rejects.toThrow(
      /^input bytes: line 4 is 36 bytes of JSON; the limit is 35$/,
    );
  }, 30_000);
});

describe('a JSON Lines page as a reader takes it (asJson)', () => {
  it('is the same items, keys and cursor as the page read as items, in the rows a store takes', async () => {
    const body = Buffer.concat([
      Buffer.from(['{"a":1}', '', '  ', '[1e20, 12345678901234567890]', '{"s":"é\\u00e9 \\ud83d\\ude00"}\r'].join('\n') + '\n'),
      // A byte that is not UTF-8: read as U+FFFD either way.
      Buffer.from([0x22, 0xff, 0x22, 0x0a]),
      Buffer.from(`{"long":"${'x'.repeat(5_000)}"}\n"last, no newline"`),
    ]);
    await s3.put('in-bucket', 'lists/same.jsonl', body);
    const source = {
      s3: { bucket: 'in-bucket', key: 'lists/same.jsonl', format: 'jsonl' as const, size: body.length, etag: '' },
    };
    for (const rangeBytes of [40, 100_000]) {
      let a: SourceCursor | null = null;
      let b: SourceCursor | null = null;
      for (let pages = 0; ; pages++) {
        const items = await readPage(s3.client, source, a, { maxInputBytes: 65_536, rangeBytes });
        const json = await readPage(s3.client, source, b, { maxInputBytes: 65_536, rangeBytes, asJson: true });
        expect(json.items).toEqual([]);
        const rows = json.rows!;
        expect(rows.count).toBe(items.items.length);
        expect(JSON.parse(rows.keys)).toEqual(items.items.map((i) => i.key));
        // One input a line: no line of the page holds a line end of its own.
        const inputs = rows.inputs === '' ? [] : rows.inputs.split('\n');
        expect(inputs.map((i) => JSON.parse(i) as unknown)).toEqual(items.items.map((i) => i.input));
        expect(json.cursor).toEqual(items.cursor);
        expect(json.done).toBe(items.done);
        if (items.done) {
          expect((items.cursor as { row: number }).row).toBe(6);
          break;
        }
        expect(pages).toBeLessThan(500);
        [a, b] = [items.cursor, json.cursor];
      }
    }
  }, 30_000);
});

describe("a JSON Lines line's input", () => {
  it('is stored as JavaScript reads and writes it, whether the line goes as it is or is written again', async () => {
    const lines = [
      // As they are: whitespace, escapes, unicode, nesting, scalars, null.
      '  { "a" : [1, 2.5, -0, {"b": null}], "s": "tab\\tquote\\" é \\u00e9 ✓" }  ',
      '"just a string"',
      '42',
      'null',
      '{"dup": 1, "dup": 2}',
      '123456789012345',
      '[1.0, 1.50, -0, "a\\/b"]',
      // Long: measured as written again (80 bytes with its spaces, 38 without).
      `{ ${'"k" : 1 ,'.repeat(1)} "pad" : "${'y'.repeat(4_100)}" }`,
      // Written again: exponents (1e-400 is 0 to JavaScript; past the double range, 1e400, ends
      // the batch: see below), 16 or more digits, a long fraction that PostgreSQL's numeric would
      // refuse (over 16,383 digits after the point).
      '[1e-400, 2.5E3, 1e20]',
      '{"big": 12345678901234567890, "n": "v1e5"}',
      // Escapes: a pair is one character (Python's json.dumps writes every emoji so).
      '{"emoji": "\\ud83d\\ude00", "e": "\\u00e9"}',
      `[0.${'0'.repeat(17_000)}1]`,
    ];
    await s3.put('in-bucket', 'lists/as-is.jsonl', lines.join('\n') + '\n');
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'lists/as-is.jsonl', format: 'jsonl' } });
    expect((await runToEnd(batch.id)).status).toBe('succeeded');
    const rows = await db.sql<{ key: string; input: unknown }[]>`select key, input from leasehold_items
      where batch_id = ${batch.id} order by key`;
    expect(rows.map((r) => r.key)).toEqual(lines.map((_, i) => String(i + 1).padStart(5, '0')));
    rows.forEach((r, i) => expect(r.input, lines[i].slice(0, 40)).toEqual(JSON.parse(JSON.stringify(JSON.parse(lines[i])))));
  }, 60_000);

  it('nested deeper than JSON can be written again ends the batch failed naming the line; a lone surrogate and a number past the double range too', async () => {
    for (const [name, bad] of [
      ['deep', `${'['.repeat(20_000)}${']'.repeat(20_000)}`],
      ['lone', '{"s": "\\ud83d"}'],
      // Parsed it is Infinity, written again null: never stored as another value than the source's.
      ['huge', '{"a": 1, "b": -1e400}'],
    ] as const) {
      await s3.put('in-bucket', `lists/${name}.jsonl`, ['{"a":1}', bad, '{"a":3}'].join('\n') + '\n');
      const { batch } = await start({ s3: { bucket: 'in-bucket', key: `lists/${name}.jsonl`, format: 'jsonl' } });
      const done = await runToEnd(batch.id);
      expect(done, name).toMatchObject({ status: 'failed', reading: false });
      expect(done.reason, name).toMatch(
        name === 'deep'
          ? /^line 2 cannot be stored as JSON: Maximum call stack/
          : name === 'huge'
            ? /^line 2 holds a number past the double range \(about ±1\.8e308\), which would be stored as null \(at key "b"\)$/
            : /^line 2 holds a NUL character or an unpaired surrogate, which cannot be stored$/,
      );
      expect(done.sourceErrorLine, name).toBe(2);
    }
  }, 60_000);
});

describe('a CSV source', () => {
  it('gives one item per row with the header as fields, quoted newlines kept, keyed by keyColumn', async () => {
    const rows = ['id,name,note'];
    for (let i = 1; i <= 800; i++) rows.push(`id-${i},"name, ${i}",${i % 10 === 0 ? '"two\nlines"' : '"say ""hi"""'}`);
    await s3.put('in-bucket', 'tables/t.csv', rows.join('\n') + '\n');
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'tables/t.csv', format: 'csv', keyColumn: 'id' } });
    const done = await runToEnd(batch.id, { rangeBytes: 2048 });
    expect(done.status).toBe('succeeded');
    expect(done.total).toBe(800);
    const items = await db.sql<{ key: string; input: Record<string, string> }[]>`
      select key, input from leasehold_items where batch_id = ${batch.id}`;
    const byKey = new Map(items.map((r) => [r.key, r.input]));
    expect(byKey.get('id-10')).toEqual({ id: 'id-10', name: 'name, 10', note: 'two\nlines' });
    expect(byKey.get('id-11')).toEqual({ id: 'id-11', name: 'name, 11', note: 'say "hi"' });
  }, 60_000);

  it('keys rows by their number without a keyColumn, and fails the batch at a ragged row', async () => {
    await s3.put('in-bucket', 'tables/ok.csv', 'a,b\n1,2\n3,4\n');
    const ok = await runToEnd((await start({ s3: { bucket: 'in-bucket', key: 'tables/ok.csv', format: 'csv' } })).batch.id);
    expect(ok.status).toBe('succeeded');
    expect(await keysOf(ok.id)).toEqual(['01', '02']);

    await s3.put('in-bucket', 'tables/ragged.csv', 'a,b\n1,2\n3,4,5\n6,7\n');
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'tables/ragged.csv', format: 'csv' } });
    const done = await runToEnd(batch.id);
    expect(done.status).toBe('failed');
    expect(done.reason).toBe('line 3 has 3 fields; the header has 2');
    expect(done.sourceErrorLine).toBe(3);
  }, 60_000);
});

describe('bad sources at start', () => {
  const batches = async () => (await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches`)[0].n;

  it.each([
    [
      'a missing bucket',
      { s3: { bucket: 'no-such-bucket', prefix: 'x/' } },
      'source_not_found',
      /bucket no-such-bucket does not exist \(.*\); make it first \(locally: leasehold s3 mb no-such-bucket\)$/,
    ],
    [
      'a missing key',
      { s3: { bucket: 'in-bucket', key: 'nope.jsonl', format: 'jsonl' } },
      'source_not_found',
      /s3:\/\/in-bucket\/nope.jsonl does not exist/,
    ],
    [
      'an empty prefix',
      { s3: { bucket: 'in-bucket', prefix: 'nothing-here/' } },
      'invalid_source',
      /no object under s3:\/\/in-bucket\/nothing-here\//,
    ],
  ] as const)('%s is refused with a clear error and stores nothing', async (_name, source, code, message) => {
    const before = await batches();
    const err = await start(source as BatchSource).catch((e: unknown) => e);
    expect(err).toMatchObject({ code });
    expect((err as Error).message).toMatch(message);
    expect(await batches()).toBe(before);
  });

  it('a 0-byte object is refused as empty', async () => {
    await s3.put('in-bucket', 'lists/empty.jsonl', '');
    const before = await batches();
    const err = await start({ s3: { bucket: 'in-bucket', key: 'lists/empty.jsonl', format: 'jsonl' } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'invalid_source' });
    expect((err as Error).message).toMatch(/is empty \(0 bytes\)/);
    expect(await batches()).toBe(before);
  });

  it('denied access (a signature the server refuses) is refused as denied', async () => {
    const before = await batches();
    const err = await start({ s3: { bucket: 'in-bucket', prefix: 'objs/' } }, {}, s3.deniedClient).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'source_access_denied' });
    expect((err as Error).message).toMatch(/access to bucket in-bucket is denied/);
    expect(await batches()).toBe(before);
  });
});

describe('results to S3', () => {
  it('writes succeeded and failed parts, one line per item, then the manifest, whose location the batch shows', async () => {
    const body = Array.from({ length: 250 }, (_, i) => JSON.stringify({ i: i + 1, fail: (i + 1) % 50 === 0 })).join('\n');
    await s3.put('in-bucket', 'lists/r.jsonl', body);
    const results: ResultsTarget = { s3: { bucket: 'out-bucket', prefix: 'res/' } };
    const { batch } = await start({ s3: { bucket: 'in-bucket', key: 'lists/r.jsonl', format: 'jsonl' } }, { results });
    const runner = new Runner(db.sql, {
      parallel: 8,
      beatMs: 200,
      staleMs: 2_000,
      backoffMs: 0,
      attempts: 1,
      s3: () => s3.client,
    });
    runner.watch(
      () => ({
        work: async (item) => {
          if ((item.input as { fail: boolean }).fail) throw new Error(`item ${item.key} fails`);
          return { double: (item.input as { i: number }).i * 2 };
        },
      }),
      100,
    );
    await waitFor('the manifest', async () => (await getBatch(db.sql, batch.id)).resultsManifest !== null, {
      timeoutMs: 60_000,
      everyMs: 100,
    });
    await runner.close();
    const done = await getBatch(db.sql, batch.id);
    expect(done.status).toBe('failed');
    expect(done.resultsManifest).toBe(`s3://out-bucket/res/${batch.id}/manifest.json`);
    const text = async (key: string) =>
      (await (
        await s3.client.send(new GetObjectCommand({ Bucket: 'out-bucket', Key: key }))
      ).Body!.transformToString()) as string;
    const manifest = JSON.parse(await text(`res/${batch.id}/manifest.json`));
    expect(manifest).toMatchObject({ batchId: batch.id, status: 'failed', total: 250, counts: { succeeded: 245, failed: 5 } });
    const succeeded = (await text(manifest.parts.succeeded[0].key))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const failed = (await text(manifest.parts.failed[0].key))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(manifest.parts.succeeded[0].key).toBe(`res/${batch.id}/succeeded/part-00000.jsonl`);
    expect(succeeded).toHaveLength(245);
    expect(new Set(succeeded.map((l) => l.key)).size).toBe(245);
    expect(succeeded.find((l) => l.key === '0007')).toEqual({ key: '0007', state: 'done', attempts: 1, output: { double: 14 } });
    expect(failed.map((l) => l.key)).toEqual(['0050', '0100', '0150', '0200', '0250']);
    expect(failed[0]).toMatchObject({ state: 'failed', attempts: 1, error: expect.stringMatching(/fails$/) });
    const listed = await s3.client.send(new ListObjectsV2Command({ Bucket: 'out-bucket', Prefix: `res/${batch.id}/` }));
    expect(listed.Contents?.map((o) => o.Key).sort()).toEqual(
      [
        `res/${batch.id}/failed/part-00000.jsonl`,
        `res/${batch.id}/manifest.json`,
        `res/${batch.id}/succeeded/part-00000.jsonl`,
      ].sort(),
    );
    // The Batch Finished event names the manifest.
    const { received } = await sendToLocalBus(batch.id);
    const detail = received.map((e) => e.detail as BatchFinishedDetail).find((d) => d.batchId === batch.id);
    expect(detail).toMatchObject({ status: 'failed', results: { manifest: done.resultsManifest } });
  }, 90_000);

  it("the scheduler's pass keeps within its budget: none begun past it, one still going cut short and written by a later pass", async () => {
    await s3.createBucket('budget-out');
    await s3.put('in-bucket', 'lists/b.jsonl', Array.from({ length: 1_000 }, (_, i) => `{"n":${i}}`).join('\n'));
    const { batch } = await start(
      { s3: { bucket: 'in-bucket', key: 'lists/b.jsonl', format: 'jsonl' } },
      { results: { s3: { bucket: 'budget-out', prefix: 'r/' } } },
    );
    expect((await runToEnd(batch.id)).resultsManifest).not.toBeNull();
    // As if the finishing run had died before its write began: due again.
    await db.sql`update leasehold_batches set results_manifest = null, results_tries = 0, results_started_at = null
      where id = ${batch.id}`;
    expect(await writeDueResults(db.sql, s3.client, { leaseMs: 1, budgetMs: 0 })).toEqual({ written: 0, failed: 0 });
    // One object per item: a thousand uploads, far past 500 ms.
    const errors: unknown[] = [];
    const cut = await writeDueResults(db.sql, s3.client, {
      leaseMs: 1,
      budgetMs: 500,
      partItems: 1,
      onError: (_id, e) => errors.push(e),
    });
    expect(cut).toEqual({ written: 0, failed: 1 });
    expect(String(errors[0])).toMatch(/TimeoutError|aborted/i);
    expect((await getBatch(db.sql, batch.id)).resultsManifest).toBeNull();
    expect(await writeDueResults(db.sql, s3.client, { leaseMs: 1, budgetMs: 60_000 })).toEqual({ written: 1, failed: 0 });
    expect((await getBatch(db.sql, batch.id)).resultsManifest).toBe(`s3://budget-out/r/${batch.id}/manifest.json`);
  }, 90_000);

  it('a write that keeps failing (its bucket deleted before the finish) gives up after its tries; the Batch Finished event is sent all the same, results null', async () => {
    await s3.createBucket('gone-out');
    await s3.put('in-bucket', 'lists/g.jsonl', '{"n":1}\n{"n":2}\n{"n":3}\n');
    const { batch } = await start(
      { s3: { bucket: 'in-bucket', key: 'lists/g.jsonl', format: 'jsonl' } },
      { results: { s3: { bucket: 'gone-out', prefix: 'r/' } } },
    );
    // The bucket goes after the start checked it: S3's own answer shows it gone.
    await s3.client.send(new DeleteBucketCommand({ Bucket: 'gone-out' }));
    const head = await s3.client.send(new HeadBucketCommand({ Bucket: 'gone-out' })).catch((e: unknown) => e);
    expect(head).toMatchObject({ $metadata: { httpStatusCode: 404 } });

    // The run that finished the batch tried first, and failed.
    const done = await runToEnd(batch.id);
    expect(done.status).toBe('succeeded');
    expect(done.resultsManifest).toBeNull();
    expect(done.resultsError).toMatch(new RegExp(`^try 1 of ${RESULTS_MAX_TRIES}: NoSuchBucket`));

    // Its event waits while the results have tries left: nothing is sent yet.
    expect((await sendToLocalBus(batch.id)).sent).toMatchObject({ sent: 0 });

    // The scheduler's passes (leaseMs 1: no wait between them) try the rest, then leave it.
    const passes: { written: number; failed: number }[] = [];
    for (let i = 0; i < RESULTS_MAX_TRIES + 2; i++) passes.push(await writeDueResults(db.sql, s3.client, { leaseMs: 1 }));
    expect(passes.filter((p) => p.failed === 1)).toHaveLength(RESULTS_MAX_TRIES - 1);
    expect(passes.slice(RESULTS_MAX_TRIES - 1)).toEqual([
      { written: 0, failed: 0 },
      { written: 0, failed: 0 },
      { written: 0, failed: 0 },
    ]);
    const [row] = await db.sql<{ results_tries: number }[]>`select results_tries from leasehold_batches where id = ${batch.id}`;
    expect(row.results_tries).toBe(RESULTS_MAX_TRIES);
    const after = await getBatch(db.sql, batch.id);
    expect(after.resultsManifest).toBeNull();
    expect(after.resultsError).toMatch(new RegExp(`^try ${RESULTS_MAX_TRIES} of ${RESULTS_MAX_TRIES}: NoSuchBucket`));

    // The event was held while the results had tries left, and goes now, results null: sent
    // through the real EventBridge client to the local PutEvents endpoint.
    const { sent, received } = await sendToLocalBus(batch.id);
    expect(sent).toMatchObject({ sent: 1, failed: 0 });
    const [event] = await batchEvents(db.sql, batch.id);
    expect(event.sentAt).not.toBeNull();
    const detail = received.map((e) => e.detail as BatchFinishedDetail).find((d) => d.batchId === batch.id);
    expect(detail).toMatchObject({ id: event.id, status: 'succeeded', results: null, counts: { total: 3, done: 3 } });
  }, 90_000);
});
