// A source batch that grows (docs/design.md, "Sources and results"): it starts wanting one run (its
// total is 0), and each stored page raises its target; the reader's runner then reports how many
// more runs the batch wants than are live or on their way, so the Lambda worker sends them at once
// rather than at the scheduler's next pass. Against a real local S3 (s3rver) and PostgreSQL.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner, getBatch, type RunnerEvent } from '../../src/batch/index.js';
import { reserveInvocations } from '../../src/lease/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { waitFor } from '../support/waits.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('grow-in');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

/** A batch reading `lines` JSON Lines, at most `maxConcurrency` runs; read by one runner whose events are kept. */
async function readWith(lines: number, maxConcurrency: number, before?: (batchId: string) => Promise<void>) {
  seq += 1;
  const key = `grow-${seq}.jsonl`;
  await s3.put('grow-in', key, Array.from({ length: lines }, (_, i) => JSON.stringify({ i })).join('\n') + '\n');
  const { batch } = await startSourceBatch(db.sql, s3.client, {
    tenant: `grow-${process.pid}-${seq}`,
    datasource: 'd',
    job: 'noop',
    params: {},
    requestKey: `g${seq}`,
    source: { s3: { bucket: 'grow-in', key, format: 'jsonl' } },
    maxConcurrency,
  });
  expect(batch.target).toBe(1);
  await before?.(batch.id);
  const events: RunnerEvent[] = [];
  const runner = new Runner(db.sql, {
    parallel: 4,
    beatMs: 200,
    staleMs: 5_000,
    s3: () => s3.client,
    onEvent: (e) => events.push(e),
  });
  try {
    expect(await runner.takeOver(() => ({ work: async () => null }), batch.id)).toBeTruthy();
    await waitFor('the source read', async () => !(await getBatch(db.sql, batch.id)).reading);
  } finally {
    await runner.close();
  }
  return { wants: events.filter((e) => e.type === 'batch-wants-runs'), batch: await getBatch(db.sql, batch.id) };
}

describe('a source batch whose pages raise its target', () => {
  it('is reported as wanting the runs past its live one', async () => {
    const { wants, batch } = await readWith(400, 4);
    expect(batch.target).toBe(4);
    // One page holds all 400 lines: target 4, one run live (the reader's).
    expect(wants).toEqual([{ type: 'batch-wants-runs', batchId: batch.id, runs: 3 }]);
  });

  it('counts the workers already on their way, and reports nothing when they cover it', async () => {
    const { wants } = await readWith(400, 4, async (batchId) => {
      await reserveInvocations(db.sql, { batchIds: [batchId, batchId, batchId], maxWorkers: 100, pendingMs: 30_000 });
    });
    expect(wants).toEqual([]);
  });

  it('reports nothing for a batch whose target its runs already meet', async () => {
    const { wants, batch } = await readWith(80, 4);
    expect(batch.target).toBe(1);
    expect(wants).toEqual([]);
  });
});
