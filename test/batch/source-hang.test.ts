// A source batch whose first items fail at once must still end (issue 37's hang; docs/design.md,
// "Failure tolerance"). A JSON Lines object of 10,000 lines, read in small ranges while up to 4
// runs over two runners work the items read so far; the first 300 lines fail permanently. With a
// percent tolerance the allowance grows with every page read, so a run must judge its failures
// against the batch's allowance now, not the one it saw when it took the batch over: a run that
// kept the old one held its claimed items `running` for ever, beating, and claimed nothing more.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PermanentItemError, type StartRequest } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const LINES = 10_000;
const FAILING = 300;

const db = useTestDatabase();
let s3: LocalS3;
let seq = 0;

beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('hang-in');
  const body = Array.from({ length: LINES }, (_, i) => JSON.stringify({ n: i + 1 })).join('\n') + '\n';
  await s3.put('hang-in', 'lines.jsonl', body);
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

/** Start the 10,000-line batch, work it with two runners of up to 2 runs each, and wait for its end. */
async function runWithEarlyFailures(extra: Partial<StartRequest>) {
  seq += 1;
  const { batch } = await startSourceBatch(db.sql, s3.client, {
    tenant: 'hang',
    datasource: `ds${seq}`,
    job: 'echo',
    params: {},
    requestKey: `hang-${seq}`,
    source: { s3: { bucket: 'hang-in', key: 'lines.jsonl', format: 'jsonl' } },
    maxConcurrency: 4,
    ...extra,
  });
  const work = async (item: { input: unknown }) => {
    const n = (item.input as { n: number }).n;
    if (n <= FAILING) throw new PermanentItemError(`line ${n} fails`);
    return { n };
  };
  const ended = await runUntilEnd(db.sql, batch.id, () => ({ work }), {
    runners: 2,
    runner: { parallel: 8, maxRuns: 2, beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client, sourceRangeBytes: 16_384 },
    watchMs: 50,
    timeoutMs: 60_000,
  });
  const states = await db.sql<{ state: string; n: number }[]>`
    select state, count(*)::int as n from leasehold_items where batch_id = ${batch.id} group by state order by state`;
  return { batch: ended, states: Object.fromEntries(states.map((s) => [s.state, s.n])) };
}

describe('a source batch whose first items fail at once', () => {
  it('ends, every item done or failed, with a percent tolerance that its source grows (repeated)', async () => {
    for (let i = 0; i < 3; i++) {
      const { batch, states } = await runWithEarlyFailures({ toleratedFailures: { percent: 5 } });
      expect(batch.status).toBe('succeeded');
      expect(batch.total).toBe(LINES);
      expect(states).toEqual({ done: LINES - FAILING, failed: FAILING });
    }
  }, 200_000);

  it('ends failed, with every item done or failed, without a tolerance', async () => {
    const { batch, states } = await runWithEarlyFailures({});
    expect(batch.status).toBe('failed');
    expect(batch.total).toBe(LINES);
    expect(states).toEqual({ done: LINES - FAILING, failed: FAILING });
  }, 100_000);

  it('ends failed once reading has ended when its failures pass a percent of the whole source', async () => {
    const { batch, states } = await runWithEarlyFailures({ toleratedFailures: { percent: 1 } });
    expect(batch.status).toBe('failed');
    expect(batch.total).toBe(LINES);
    expect(batch.reading).toBe(false);
    // Judged against 1 % of all 10,000 items (100), not of the first pages read.
    expect(batch.reason).toMatch(/^more items failed than tolerated: \d+ failed, 100 tolerated \(1 % of 10000 items\)$/);
    expect(states.running ?? 0).toBe(0);
  }, 100_000);

  it('ends failed at once, while its source is still read, past a tolerated count', async () => {
    const { batch, states } = await runWithEarlyFailures({ toleratedFailures: { count: 10 } });
    expect(batch.status).toBe('failed');
    expect(batch.reason).toMatch(/^more items failed than tolerated: \d+ failed, 10 tolerated \(count 10\)$/);
    expect(states.running ?? 0).toBe(0);
    expect(states.failed).toBeLessThan(FAILING);
  }, 100_000);
});
