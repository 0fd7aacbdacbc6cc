// CSV header rows that once lost columns silently (docs/design.md, "Sources and results"),
// against a real local S3-compatible server and the real PostgreSQL: a header naming a column
// twice ends the batch failed naming the column (one of the two would be dropped from every
// item), and a column named `__proto__` is kept in every item's input like any other.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('csvh-bucket');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

async function run(name: string, body: string, keyColumn?: string) {
  const key = `${name}.csv`;
  await s3.put('csvh-bucket', key, body);
  const { batch } = await startSourceBatch(db.sql, s3.client, {
    tenant: 'csvh',
    datasource: name,
    job: 'echo',
    params: {},
    requestKey: name,
    source: { s3: { bucket: 'csvh-bucket', key, format: 'csv', ...(keyColumn ? { keyColumn } : {}) } },
  });
  const outputs: unknown[] = [];
  const end = await runUntilEnd(
    db.sql,
    batch.id,
    () => ({
      work: async (item) => {
        outputs.push(item.input);
        return item.input;
      },
    }),
    {
      runner: { parallel: 2, beatMs: 200, staleMs: 2_000, backoffMs: 0, moveBackoffMs: 20, s3: () => s3.client },
      timeoutMs: 10_000,
    },
  );
  const items = await db.sql<{ key: string; state: string; input: unknown }[]>`select key, state, input from leasehold_items
    where batch_id = ${batch.id} order by key`;
  return { end, items, outputs };
}

describe('CSV header rows', () => {
  it('a header naming a column twice ends the batch failed, naming the column and the line', async () => {
    const { end, items } = await run('dup', 'id,v,id\na,1,x\nb,2,y\n', 'id');
    expect(end.status).toBe('failed');
    expect(end.reason).toBe('the header names the column "id" twice: each column must have a name of its own');
    expect(end.sourceErrorLine).toBe(1);
    expect(items).toEqual([]);
  }, 30_000);

  it('a column named __proto__ is kept in every input, stored and handed to the job', async () => {
    const { end, items, outputs } = await run('proto', '__proto__,v\na,1\nb,2\n');
    expect(end.status).toBe('succeeded');
    expect(items.map((i) => i.state)).toEqual(['done', 'done']);
    for (const [i, want] of [
      ['a', '1'],
      ['b', '2'],
    ].entries()) {
      const input = items[i].input as Record<string, unknown>;
      expect(Object.keys(input).sort()).toEqual(['__proto__', 'v']);
      expect(Object.getOwnPropertyDescriptor(input, '__proto__')?.value).toBe(want[0]);
      expect(input.v).toBe(want[1]);
    }
    for (const o of outputs) expect(Object.keys(o as object).sort()).toEqual(['__proto__', 'v']);
  }, 30_000);
});
