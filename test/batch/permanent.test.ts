import { describe, expect, it } from 'vitest';
import { PermanentItemError, Runner, createBatch } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();

describe('an error retrying cannot help', () => {
  it('fails its item on the first attempt, while ordinary errors are retried', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'd',
      job: 'j',
      params: {},
      requestKey: 'permanent',
      items: [{ key: 'gone' }, { key: 'flaky' }, { key: 'flagged' }],
    });
    const runner = new Runner(db.sql, { backoffMs: 10, attempts: 3 });
    await runner.takeOver(
      () => ({
        work: async (item) => {
          if (item.key === 'gone') throw new PermanentItemError('gone vanished');
          if (item.key === 'flagged') throw Object.assign(new Error('bad input'), { permanent: true });
          throw new Error('try again');
        },
      }),
      batch.id,
    );
    expect((await runner.running(batch.id))!.outcome).toBe('failed');
    const rows = await db.sql`select key, state, attempts, error from leasehold_items where batch_id = ${batch.id} order by key`;
    expect(rows).toEqual([
      { key: 'flagged', state: 'failed', attempts: 1, error: 'bad input' },
      { key: 'flaky', state: 'failed', attempts: 3, error: 'try again' },
      { key: 'gone', state: 'failed', attempts: 1, error: 'gone vanished' },
    ]);
  });
});
