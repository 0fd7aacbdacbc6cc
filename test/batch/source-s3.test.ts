// What S3 answers a source reader (issue 37, items 3, 5, 6, 7): a versioned object rewritten
// while it is read, the sockets of a warm client after every kind of failure, keys that plain
// XML cannot carry, and S3's 503 SlowDown; and the results writer that aborts the multipart
// uploads a writer that died left behind. Real S3 calls against the local S3 server (s3rver
// with src/local/s3-extras.ts), and for the failures a stub HTTP endpoint in front of it
// (test/support/s3-stub.ts) that answers SlowDown, InternalError or stalls a body for real.
import { Agent } from 'node:http';
import {
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutBucketVersioningCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getBatch, startBatch, type BatchSource, type StartRequest } from '../../src/batch/index.js';
import { checkSource, readPage, type SourceCursor, type StoredSource } from '../../src/batch/source.js';
import { abortUploads } from '../../src/batch/results.js';
import { slowDownBackoffMs } from '../../src/batch/s3.js';
import type { Clock } from '../../src/clock.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { s3Stub, type StubAnswer } from '../support/s3-stub.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  for (const b of ['plain', 'versioned', 'out']) await s3.createBucket(b);
  await s3.client.send(new PutBucketVersioningCommand({ Bucket: 'versioned', VersioningConfiguration: { Status: 'Enabled' } }));
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

const jobs = {
  expand: () => Promise.reject(new Error('a source batch is never expanded')),
  parseParams: (_j: string, p: unknown) => Promise.resolve({ params: p }),
};

function start(source: BatchSource, extra: Partial<StartRequest> = {}) {
  seq += 1;
  return startBatch(
    { sql: db.sql, jobs, config: {}, s3: () => s3.client },
    { tenant: 'acme', datasource: `ds${seq}`, job: 'echo', params: {}, requestKey: `k${seq}`, source, ...extra },
  );
}

function runToEnd(id: string) {
  return runUntilEnd(db.sql, id, () => ({ work: async (item) => ({ seen: item.input }) }), {
    runner: { parallel: 8, beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client, sourceRangeBytes: 4096 },
    watchMs: 50,
    until: (b) => b.status !== 'open' && (b.results === null || b.resultsManifest !== null || b.resultsError !== null),
  });
}

const lines = (tag: string, n: number) =>
  Array.from({ length: n }, (_, i) => JSON.stringify({ tag, i, pad: 'x'.repeat(20) })).join('\n') + '\n';

/** Every page of `source` from its start; the keys and inputs read. */
async function readAll(
  client: typeof s3.client,
  source: StoredSource,
  settings = { maxInputBytes: 65_536, rangeBytes: 4096, pageObjects: 2 },
) {
  const items: { key: string; input: unknown }[] = [];
  let cursor: SourceCursor | null = null;
  for (;;) {
    const page = await readPage(client, source, cursor, settings);
    items.push(...page.items.map((i) => ({ key: i.key, input: i.input })));
    if (page.done) return items;
    cursor = page.cursor;
  }
}

describe('a source on a versioned bucket', () => {
  it('reads the version it found at start, whatever is written meanwhile; an unversioned one fails', async () => {
    const first = lines('first', 600);
    for (const bucket of ['versioned', 'plain']) {
      await s3.put(bucket, 'data.jsonl', first);
      const stored = await checkSource(s3.client, { s3: { bucket, key: 'data.jsonl', format: 'jsonl' } });
      const settings = { maxInputBytes: 65_536, rangeBytes: 4096 };
      const page1 = await readPage(s3.client, stored, null, settings);
      // Rewritten after its first page was read.
      await s3.put(bucket, 'data.jsonl', lines('second', 900));
      if (bucket === 'versioned') {
        expect(stored.s3).toMatchObject({ versionId: expect.stringMatching(/^[0-9a-f]{24}$/) });
        const page2 = await readPage(s3.client, stored, page1.cursor, settings);
        expect(page2.items[0].input).toMatchObject({ tag: 'first', i: page1.items.length });
      } else {
        expect(stored.s3).not.toHaveProperty('versionId');
        await expect(readPage(s3.client, stored, page1.cursor, settings)).rejects.toThrow(/changed while it was read/);
      }
    }
  });

  it('gives a batch the items of the version it started on, though the object was rewritten before the run read it', async () => {
    const first = lines('first', 1_000);
    await s3.put('versioned', 'batch.jsonl', first);
    await s3.put('plain', 'batch.jsonl', first);
    const versioned = await start({ s3: { bucket: 'versioned', key: 'batch.jsonl', format: 'jsonl' } });
    const plain = await start({ s3: { bucket: 'plain', key: 'batch.jsonl', format: 'jsonl' } });
    await s3.put('versioned', 'batch.jsonl', lines('second', 10));
    await s3.put('plain', 'batch.jsonl', lines('second', 10));
    const v = await runToEnd(versioned.batch.id);
    expect(v).toMatchObject({ status: 'succeeded', total: 1_000 });
    const tags = await db.sql<{ tag: string; n: number }[]>`
      select input ->> 'tag' as tag, count(*)::int as n from leasehold_items where batch_id = ${versioned.batch.id} group by 1`;
    expect(tags).toEqual([{ tag: 'first', n: 1_000 }]);
    const p = await runToEnd(plain.batch.id);
    expect(p.status).toBe('failed');
    expect(p.reason).toMatch(/changed while it was read/);
  }, 60_000);
});

describe("a warm client's sockets", () => {
  it('return to what is in flight after every kind of failure: a changed ETag, an abort mid-body, 404, 500, SlowDown', async () => {
    let mode: StubAnswer = 'pass';
    const stub = await s3Stub(s3.endpoint, () => mode);
    // Few sockets: one that never returns would soon stall every read after it.
    const agent = new Agent({ keepAlive: true, maxSockets: 3 });
    const client = stub.client({ requestHandler: { httpAgent: agent } as never });
    const inUse = () => Object.values(agent.sockets).reduce((n, l) => n + (l?.length ?? 0), 0);
    const settle = (what: string) => waitFor(`sockets in use back to 0 after ${what}`, () => inUse() === 0, { timeoutMs: 3_000 });
    const now: Clock = { now: () => 0, sleep: async () => {} };
    const settings = { maxInputBytes: 65_536, rangeBytes: 64 * 1024, slowDown: { clock: now, slowDownTries: 3 } };
    try {
      await s3.put('plain', 'warm.jsonl', lines('warm', 3_000));
      const stored = await checkSource(client, { s3: { bucket: 'plain', key: 'warm.jsonl', format: 'jsonl' } });
      const object = stored.s3 as Extract<StoredSource['s3'], { key: string }>;
      for (let round = 0; round < 8; round++) {
        await expect(readPage(client, { s3: { ...object, etag: '"stale"' } }, null, settings)).rejects.toThrow(/changed while/);
        await settle('a changed ETag');

        mode = 'stall';
        const abort = new AbortController();
        const reading = readPage(client, stored, null, { ...settings, signal: abort.signal });
        await stub.stalled();
        expect(inUse()).toBe(1);
        abort.abort();
        await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
        mode = 'pass';
        await settle('an abort mid-body');

        await expect(readPage(client, { s3: { ...object, key: 'missing.jsonl' } }, null, settings)).rejects.toThrow(
          /can no longer be read: NoSuchKey/,
        );
        await settle('a 404');

        mode = 'internal';
        await expect(readPage(client, stored, null, settings)).rejects.toMatchObject({ name: 'InternalError' });
        mode = 'slowdown';
        await expect(readPage(client, stored, null, settings)).rejects.toMatchObject({ name: 'SlowDown' });
        mode = 'pass';
        await settle('a 500 and a SlowDown');
      }
      // Past maxSockets many times over: a read still gets a socket, and gives it back.
      const page = await readPage(client, stored, null, settings);
      expect(page.items.length).toBeGreaterThan(100);
      await settle('a page read');
    } finally {
      client.destroy();
      agent.destroy();
      await stub.close();
    }
  }, 60_000);

  it('a run asked to stop aborts the GET it reads ahead', async () => {
    let stalls = 0;
    const stub = await s3Stub(s3.endpoint, (req) =>
      req.method === 'GET' && req.headers.range && ++stalls > 1 ? 'stall' : 'pass',
    );
    const agent = new Agent({ keepAlive: true, maxSockets: 8 });
    const client = stub.client({ requestHandler: { httpAgent: agent } as never });
    const inUse = () => Object.values(agent.sockets).reduce((n, l) => n + (l?.length ?? 0), 0);
    try {
      await s3.put('plain', 'stop.jsonl', lines('stop', 2_000));
      const { batch } = await start({ s3: { bucket: 'plain', key: 'stop.jsonl', format: 'jsonl' } });
      const { Runner } = await import('../../src/batch/index.js');
      const runner = new Runner(db.sql, { parallel: 2, beatMs: 200, staleMs: 2_000, s3: () => client, sourceRangeBytes: 4096 });
      runner.watch(() => ({ work: async () => ({}) }), 50);
      await stub.stalled();
      expect(inUse()).toBeGreaterThanOrEqual(1);
      // A GET nothing aborts would hold the close for ever (the stub never ends its body).
      const closing = runner.close();
      await waitFor('the runner closed', () => Promise.race([closing.then(() => true), sleep(100).then(() => false)]), {
        timeoutMs: 10_000,
      });
      await waitFor('the stalled GET aborted', () => inUse() === 0, { timeoutMs: 3_000 });
      expect((await getBatch(db.sql, batch.id))!.reading).toBe(true);
    } finally {
      client.destroy();
      agent.destroy();
      await stub.close();
    }
  }, 60_000);
});

describe('keys of a prefix source', () => {
  it('name their objects exactly, with a CR, a LF, a +, a space or a %', async () => {
    const names = ['a\rb', 'a\nb', 'a+b', 'a b', 'a%2Bb', 'a%20b', 'c\r', ' d', 'e+', 'é ü'];
    for (const n of names) await s3.put('plain', `keys/${n}`, n);
    const items = await readAll(s3.client, { s3: { bucket: 'plain', prefix: 'keys/' } });
    expect(items.map((i) => i.key).sort()).toEqual(names.map((n) => `keys/${n}`).sort());
    for (const { key, input } of items) {
      const o = await s3.client.send(new GetObjectCommand({ Bucket: 'plain', Key: key }));
      expect(await o.Body!.transformToString()).toBe(key.slice('keys/'.length));
      expect((input as { key: string }).key).toBe(key);
    }
  });
});

describe("S3's 503 SlowDown", () => {
  it('is retried with full-jitter backoff on a budget of its own; a 500 is not', async () => {
    let slowDowns = 5;
    let internal = 0;
    const stub = await s3Stub(s3.endpoint, () => (internal-- > 0 ? 'internal' : slowDowns-- > 0 ? 'slowdown' : 'pass'));
    const client = stub.client({ maxAttempts: 1 });
    const slept: number[] = [];
    const clock: Clock = { now: () => 0, sleep: async (ms) => void slept.push(ms) };
    const slowDown = { clock, random: () => 0.5, slowDownBaseMs: 100, slowDownCapMs: 1_000 };
    try {
      await s3.put('plain', 'slow.jsonl', lines('slow', 10));
      const stored = await checkSource(s3.client, { s3: { bucket: 'plain', key: 'slow.jsonl', format: 'jsonl' } });
      const page = await readPage(client, stored, null, { maxInputBytes: 65_536, slowDown });
      expect(page.items).toHaveLength(10);
      expect(stub.log).toEqual([...Array(5).fill('GET slowdown'), 'GET pass']);
      // Full jitter: half of min(cap, base × 2^n) with random() = 0.5.
      expect(slept).toEqual([50, 100, 200, 400, 500]);
      // Another error is the caller's to count: thrown at once.
      stub.log.length = 0;
      internal = 1;
      await expect(readPage(client, stored, null, { maxInputBytes: 65_536, slowDown })).rejects.toMatchObject({
        name: 'InternalError',
      });
      expect(stub.log).toEqual(['GET internal']);
      // A SlowDown past its tries is thrown.
      stub.log.length = 0;
      slowDowns = 100;
      await expect(
        readPage(client, stored, null, { maxInputBytes: 65_536, slowDown: { ...slowDown, slowDownTries: 4 } }),
      ).rejects.toMatchObject({ name: 'SlowDown' });
      expect(stub.log).toHaveLength(4);
    } finally {
      client.destroy();
      await stub.close();
    }
  });

  it('backs off by a uniform draw below min(cap, base × 2^n)', () => {
    const draws = Array.from({ length: 2_000 }, () => slowDownBackoffMs(3));
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...draws)).toBeLessThan(800);
    // Spread over the whole range, not bunched at its top (as "equal jitter" would be).
    expect(draws.filter((d) => d < 400).length).toBeGreaterThan(800);
    expect(slowDownBackoffMs(40, { random: () => 0.999 })).toBeLessThan(5_000);
  });
});

describe('the results writer', () => {
  it("aborts the incomplete multipart uploads a writer that died left in its batch's folder, and only those", async () => {
    await s3.put('plain', 'small.jsonl', lines('small', 5));
    const { batch } = await start(
      { s3: { bucket: 'plain', key: 'small.jsonl', format: 'jsonl' } },
      { results: { s3: { bucket: 'out', prefix: 'res/' } } },
    );
    // A writer killed mid-upload: its upload begun, one part sent, never completed or aborted.
    const key = `res/${batch.id}/succeeded/part-00000.jsonl`;
    const { UploadId } = await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'out', Key: key }));
    await s3.client.send(new UploadPartCommand({ Bucket: 'out', Key: key, UploadId, PartNumber: 1, Body: Buffer.alloc(1024) }));
    const other = `res/another-batch/succeeded/part-00000.jsonl`;
    await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'out', Key: other }));
    const uploads = async (prefix: string) =>
      (await s3.client.send(new ListMultipartUploadsCommand({ Bucket: 'out', Prefix: prefix }))).Uploads?.map((u) => u.Key) ?? [];
    expect(await uploads(`res/${batch.id}/`)).toEqual([key]);

    const done = await runToEnd(batch.id);
    expect(done.resultsManifest).toBe(`s3://out/res/${batch.id}/manifest.json`);
    expect(await uploads(`res/${batch.id}/`)).toEqual([]);
    expect(await uploads('res/')).toEqual([other]);
    const part = await s3.client.send(new GetObjectCommand({ Bucket: 'out', Key: key }));
    expect((await part.Body!.transformToString()).trim().split('\n')).toHaveLength(5);
    // A role that may not list uploads writes all the same (the lifecycle rule aborts them).
    await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'out', Key: key }));
    expect(await abortUploads(s3.deniedClient, 'out', `res/${batch.id}/`)).toBe(0);
    expect(await abortUploads(s3.client, 'out', `res/${batch.id}/`)).toBe(1);
    await s3.client.send(new DeleteObjectCommand({ Bucket: 'out', Key: key }));
    await expect(s3.client.send(new HeadObjectCommand({ Bucket: 'out', Key: key }))).rejects.toMatchObject({ name: 'NotFound' });
  }, 60_000);
});
