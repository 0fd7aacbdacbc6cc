// Killed while reading a source, killed while writing results (issue 21, "Tests"; docs/design.md,
// "Sources and results"). A child process (fixtures/source-runner.ts) reads a batch's S3 source
// (a prefix listing, a JSON Lines object) and is killed with SIGKILL mid-way; the server's own
// evidence (the batch still reading, some pages stored, the dead run's row left behind) is shown
// before a runner here takes the stale run over and reads on from the stored cursor. Every
// object or line is then exactly one item, and the pages stored are exactly those one
// uninterrupted read makes: no page was stored twice. A writer of results killed mid-write
// leaves parts but no manifest; the scheduler's pass writes them again under the same names,
// with no duplicate line.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  getBatch,
  readPage,
  Runner,
  writeDueResults,
  type BatchSource,
  type SourceCursor,
  type StoredSource,
} from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';
import { waitFor } from '../support/waits.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/source-runner.ts', import.meta.url));
const STALE_MS = 1_500;

const db = useTestDatabase();
let s3: LocalS3;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('kill-in');
  await s3.createBucket('kill-out');
}, 60_000);
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await s3?.close();
});

function child(args: string[]): { proc: ChildProcess; exited: Promise<NodeJS.Signals | null> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', FIXTURE, db.url, db.schema, s3.endpoint, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(proc);
  const exited = new Promise<NodeJS.Signals | null>((resolve) => proc.once('exit', (_code, signal) => resolve(signal)));
  return { proc, exited };
}

let seq = 0;
const start = (source: BatchSource, results?: { s3: { bucket: string; prefix: string } }) =>
  startSourceBatch(db.sql, s3.client, {
    tenant: 'kill',
    datasource: `d${++seq}`,
    job: 'noop',
    params: {},
    requestKey: `kill-${seq}`,
    source,
    results,
  });

/** The pages one uninterrupted read of `source` makes with these settings. */
async function pagesOf(source: StoredSource, rangeBytes: number, pageObjects: number): Promise<number> {
  let cursor: SourceCursor | null = null;
  for (let pages = 1; ; pages++) {
    const page = await readPage(s3.client, source, cursor, { maxInputBytes: 65_536, rangeBytes, pageObjects });
    if (page.done) return pages;
    cursor = page.cursor;
  }
}

async function killWhileReading(source: BatchSource, rangeBytes: number, pageObjects: number, killAfterPages: number) {
  const { batch } = await start(source);
  const reader = child(['read', String(rangeBytes), String(pageObjects), String(STALE_MS)]);
  await waitFor('some pages stored', async () => (await getBatch(db.sql, batch.id)).sourcePages >= killAfterPages, {
    timeoutMs: 60_000,
    everyMs: 5,
  });
  reader.proc.kill('SIGKILL');
  expect(await reader.exited).toBe('SIGKILL');
  // The server's evidence: reading was cut short, and the dead run's row is still there.
  const cut = await getBatch(db.sql, batch.id);
  console.log(`[sources-kill] killed after ${cut.sourcePages} pages stored, ${cut.total} items`);
  expect(cut.reading).toBe(true);
  expect(cut.status).toBe('open');
  expect(cut.liveRuns).toBe(1);
  const [dead] = await db.sql<{ id: string }[]>`select id from leasehold_runs where batch_id = ${batch.id}`;
  const [reader_] = await db.sql<{ reader_run: string }[]>`select reader_run from leasehold_batches where id = ${batch.id}`;
  expect(reader_.reader_run).toBe(dead.id);
  const runner = new Runner(db.sql, {
    parallel: 8,
    beatMs: 100,
    staleMs: STALE_MS,
    backoffMs: 0,
    s3: () => s3.client,
    sourceRangeBytes: rangeBytes,
    sourcePageObjects: pageObjects,
  });
  runner.watch(() => ({ work: async () => ({ ok: true }) }), 50);
  await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
    timeoutMs: 60_000,
    everyMs: 50,
  });
  await runner.close();
  const done = await getBatch(db.sql, batch.id);
  return { cut, done };
}

describe('killed while reading', () => {
  it('mid-listing: the takeover lists on from the stored token; every object is one item, no page stored twice', async () => {
    const n = 2_400;
    for (let i = 0; i < n; i += 200) {
      await Promise.all(
        Array.from({ length: 200 }, (_, j) => s3.put('kill-in', `list/o${String(i + j).padStart(5, '0')}`, `x${i + j}`)),
      );
    }
    const { cut, done } = await killWhileReading({ s3: { bucket: 'kill-in', prefix: 'list/' } }, 4096, 100, 3);
    expect(cut.sourcePages).toBeLessThan(24);
    expect(done.status).toBe('succeeded');
    expect(done.runs).toBeGreaterThanOrEqual(2);
    expect(done.total).toBe(n);
    expect(done.sourcePages).toBe(await pagesOf(done.source!, 4096, 100));
    const [c] = await db.sql<{ n: number; distinct: number; done: number }[]>`select count(*)::int as n,
        count(distinct key)::int as distinct, count(*) filter (where state = 'done')::int as done
      from leasehold_items where batch_id = ${done.id}`;
    expect(c).toEqual({ n, distinct: n, done: n });
  }, 180_000);

  it('mid-object: the takeover reads on from the stored byte offset; every line is one item, no page stored twice', async () => {
    const n = 5_000;
    const body = Array.from({ length: n }, (_, i) => JSON.stringify({ line: i + 1, pad: 'p'.repeat(i % 40) })).join('\n') + '\n';
    await s3.put('kill-in', 'obj/big.jsonl', body);
    const { cut, done } = await killWhileReading(
      { s3: { bucket: 'kill-in', key: 'obj/big.jsonl', format: 'jsonl' } },
      4096,
      100,
      5,
    );
    expect(cut.total).toBeLessThan(n);
    expect(done.status).toBe('succeeded');
    expect(done.runs).toBeGreaterThanOrEqual(2);
    expect(done.total).toBe(n);
    expect(done.sourcePages).toBe(await pagesOf(done.source!, 4096, 100));
    const rows = await db.sql<{ key: string; line: number }[]>`select key, (input->>'line')::int as line
      from leasehold_items where batch_id = ${done.id}`;
    expect(rows).toHaveLength(n);
    expect(rows.every((r) => Number(r.key) === r.line)).toBe(true);
    expect(new Set(rows.map((r) => r.key)).size).toBe(n);
  }, 180_000);
});

describe('killed mid-gzip', () => {
  it('the takeover opens the object again, decompresses and skips to the stored text offset: every line once', async () => {
    const n = 5_000;
    const body = Array.from({ length: n }, (_, i) => JSON.stringify({ line: i + 1, pad: 'p'.repeat(i % 40) })).join('\n') + '\n';
    await s3.put('kill-in', 'obj/big.jsonl.gz', gzipSync(body));
    const { cut, done } = await killWhileReading(
      { s3: { bucket: 'kill-in', key: 'obj/big.jsonl.gz', format: 'jsonl' } },
      4096,
      100,
      5,
    );
    // Cut mid-stream (the server's evidence is checked in killWhileReading): some lines stored, not all.
    expect(cut.total).toBeGreaterThan(0);
    expect(cut.total).toBeLessThan(n);
    // The cursor read on from is a text offset of the decompressed stream.
    const [at] = await db.sql<{ c: { offset: number; encoding?: { gzip: boolean } } }[]>`select source_cursor as c
      from leasehold_batches where id = ${done.id}`;
    expect(at.c.encoding).toEqual({ gzip: true, charset: 'utf-8' });
    expect(done.status).toBe('succeeded');
    expect(done.runs).toBeGreaterThanOrEqual(2);
    expect(done.total).toBe(n);
    expect(done.sourcePages).toBe(await pagesOf(done.source!, 4096, 100));
    const rows = await db.sql<{ key: string; line: number }[]>`select key, (input->>'line')::int as line
      from leasehold_items where batch_id = ${done.id}`;
    expect(rows).toHaveLength(n);
    expect(rows.every((r) => Number(r.key) === r.line)).toBe(true);
    expect(new Set(rows.map((r) => r.key)).size).toBe(n);
  }, 180_000);
});

describe('killed mid-inventory report', () => {
  it('the takeover reads on from the stored part and text offset: every listed object once', async () => {
    const n = 3_000;
    const keyOf = (i: number) => `inv/o ${String(i).padStart(5, '0')}+x`;
    const files = [];
    for (let p = 0; p < 2; p++) {
      let csv = '';
      for (let i = (p * n) / 2; i < ((p + 1) * n) / 2; i++) {
        csv += `"src","${encodeURIComponent(keyOf(i)).replace(/%20/g, '+')}","${i}"\n`;
      }
      const body = gzipSync(csv);
      await s3.put('kill-in', `inv/part-${p}.csv.gz`, body);
      files.push({ key: `inv/part-${p}.csv.gz`, size: body.length });
    }
    await s3.put('kill-in', 'inv/manifest.json', JSON.stringify({ fileFormat: 'CSV', fileSchema: 'Bucket, Key, Size', files }));
    const { cut, done } = await killWhileReading({ s3: { bucket: 'kill-in', manifest: 'inv/manifest.json' } }, 4096, 100, 5);
    expect(cut.total).toBeGreaterThan(0);
    expect(cut.total).toBeLessThan(n);
    expect(done.status).toBe('succeeded');
    expect(done.runs).toBeGreaterThanOrEqual(2);
    expect(done.total).toBe(n);
    expect(done.sourcePages).toBe(await pagesOf(done.source!, 4096, 100));
    const rows = await db.sql<{ key: string; size: number }[]>`select key, (input->>'size')::int as size
      from leasehold_items where batch_id = ${done.id}`;
    expect(rows).toHaveLength(n);
    expect(rows.every((r) => r.key === keyOf(r.size))).toBe(true);
    expect(new Set(rows.map((r) => r.key)).size).toBe(n);
  }, 180_000);
});

describe('killed while writing results', () => {
  it('leaves no manifest; the scheduler pass rewrites the same parts, complete, with no duplicate line', async () => {
    const n = 6_000;
    await s3.put('kill-in', 'res/in.jsonl', Array.from({ length: n }, (_, i) => `{"i":${i}}`).join('\n'));
    const { batch } = await start(
      { s3: { bucket: 'kill-in', key: 'res/in.jsonl', format: 'jsonl' } },
      { s3: { bucket: 'kill-out', prefix: 'r/' } },
    );
    const runner = new Runner(db.sql, { parallel: 8, beatMs: 100, staleMs: STALE_MS, backoffMs: 0, s3: () => s3.client });
    runner.watch(() => ({ work: async (item) => ({ twice: (item.input as { i: number }).i * 2 }) }), 50);
    await waitFor('the batch to finish', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
      timeoutMs: 60_000,
      everyMs: 50,
    });
    await runner.close();
    // The run wrote the results right after its finish: take them back, as if it had died first.
    await db.sql`update leasehold_batches set results_manifest = null, results_started_at = null where id = ${batch.id}`;
    const prefix = `r/${batch.id}/`;
    const listing = async () =>
      (await s3.client.send(new ListObjectsV2Command({ Bucket: 'kill-out', Prefix: prefix }))).Contents ?? [];
    for (const o of await listing()) await s3.client.send(new DeleteObjectCommand({ Bucket: 'kill-out', Key: o.Key! }));

    const writer = child(['results', batch.id, '100']);
    await waitFor('some parts written', async () => (await listing()).length >= 5, { timeoutMs: 60_000, everyMs: 5 });
    writer.proc.kill('SIGKILL');
    expect(await writer.exited).toBe('SIGKILL');
    const before = await listing();
    expect(before.some((o) => o.Key === `${prefix}manifest.json`)).toBe(false);
    expect((await getBatch(db.sql, batch.id)).resultsManifest).toBeNull();

    const pass = await writeDueResults(db.sql, s3.client, { leaseMs: 1, partItems: 100 });
    expect(pass).toEqual({ written: 1, failed: 0 });
    const text = async (key: string) =>
      (await (await s3.client.send(new GetObjectCommand({ Bucket: 'kill-out', Key: key }))).Body!.transformToString()) as string;
    const manifest = JSON.parse(await text(`${prefix}manifest.json`));
    expect(manifest.counts).toEqual({ succeeded: n, failed: 0 });
    expect(manifest.parts.succeeded).toHaveLength(n / 100);
    const keys: string[] = [];
    for (const part of manifest.parts.succeeded) {
      const lines = (await text(part.key)).trim().split('\n');
      expect(lines).toHaveLength(part.items);
      for (const l of lines) keys.push(JSON.parse(l).key);
    }
    expect(keys).toHaveLength(n);
    expect(new Set(keys).size).toBe(n);
    // Only the deterministic names exist: the killed writer's parts were overwritten, not added to.
    const after = (await listing()).map((o) => o.Key).sort();
    expect(after).toEqual([`${prefix}manifest.json`, ...manifest.parts.succeeded.map((p: { key: string }) => p.key)].sort());
    expect((await getBatch(db.sql, batch.id)).resultsManifest).toBe(`s3://kill-out/${prefix}manifest.json`);
  }, 180_000);
});
