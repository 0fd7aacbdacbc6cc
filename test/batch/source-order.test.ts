// A source batch's items in the source's order (issue 35, item 6; docs/api.md, "source"): the
// keys of a JSON Lines or CSV object are its line or row numbers zero-padded to one width, so the
// pages of items, the results written to S3 and the order the items start follow the object's
// lines, never the string order of the numbers (1, 10, 100, 11, …). Against a real local S3
// (s3rver) and the real PostgreSQL.
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { itemsPage, startBatch, type BatchSource, type StartRequest } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('order-in');
  await s3.createBucket('order-out');
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
    { tenant: 'acme', datasource: `order${seq}`, job: 'echo', params: {}, requestKey: `o${seq}`, source, ...extra },
  );
}

/** Run batch `id` to its end (results written) with one runner working one item at a time; answers the inputs in the order they started. */
async function runInOrder(id: string): Promise<unknown[]> {
  const started: unknown[] = [];
  const done = await runUntilEnd(
    db.sql,
    id,
    () => ({
      work: async (item) => {
        started.push(item.input);
        return { seen: item.input };
      },
    }),
    {
      runner: { parallel: 1, beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client },
      watchMs: 50,
      until: (b) => b.status !== 'open' && (b.results === null || b.resultsManifest !== null || b.resultsError !== null),
    },
  );
  expect(done.status).toBe('succeeded');
  return started;
}

/** Every item of batch `id`, read through pages of `limit`. */
async function allPages(id: string, limit: number) {
  const out: Awaited<ReturnType<typeof itemsPage>>['items'] = [];
  let after: string | undefined;
  for (;;) {
    const page = await itemsPage(db.sql, id, { after, limit });
    out.push(...page.items);
    if (page.next === null) return out;
    after = page.next;
  }
}

const oneTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe("a JSON Lines source's items", () => {
  it('are listed, written to S3 and started in line order: 120 lines through pages of 7', async () => {
    const body = oneTo(120)
      .map((i) => JSON.stringify({ i }))
      .join('\n');
    await s3.put('order-in', 'lines.jsonl', body);
    const { batch } = await start(
      { s3: { bucket: 'order-in', key: 'lines.jsonl', format: 'jsonl' } },
      { results: { s3: { bucket: 'order-out', prefix: 'r/' } } },
    );
    const started = await runInOrder(batch.id);

    const items = await allPages(batch.id, 7);
    expect(items.map((it) => (it.output as { seen: { i: number } }).seen.i)).toEqual(oneTo(120));
    // Keys of one width (the object is 1,091 bytes: four digits), their line numbers in order.
    expect(Buffer.byteLength(body)).toBe(1_091);
    expect(items.map((it) => it.key)).toEqual(oneTo(120).map((i) => String(i).padStart(4, '0')));
    expect(items.slice(0, 3).map((it) => it.key)).toEqual(['0001', '0002', '0003']);

    // The results part lists them in line order too.
    const part = await s3.client.send(
      new GetObjectCommand({ Bucket: 'order-out', Key: `r/${batch.id}/succeeded/part-00000.jsonl` }),
    );
    const lines = (await part.Body!.transformToString())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { key: string; output: { seen: { i: number } } });
    expect(lines.map((l) => l.output.seen.i)).toEqual(oneTo(120));
    expect(lines[119].key).toBe('0120');

    // One item at a time, they start in line order: claims take the oldest due items and answer
    // them by due time, then key.
    expect(started.map((x) => (x as { i: number }).i)).toEqual(oneTo(120));
  }, 60_000);
});

describe("a CSV source's items", () => {
  it('without a keyColumn are listed in row order, keyed by the padded row number', async () => {
    const body = ['n,name', ...oneTo(120).map((i) => `${i},row ${i}`)].join('\n') + '\n';
    await s3.put('order-in', 'rows.csv', body);
    const { batch } = await start({ s3: { bucket: 'order-in', key: 'rows.csv', format: 'csv' } });
    await runInOrder(batch.id);
    const items = await allPages(batch.id, 11);
    const width = String(Buffer.byteLength(body)).length;
    expect(items.map((it) => it.key)).toEqual(oneTo(120).map((i) => String(i).padStart(width, '0')));
    expect(items.map((it) => Number((it.output as { seen: { n: string } }).seen.n))).toEqual(oneTo(120));
  }, 60_000);
});
