// Whether a takeover that took nothing should try again (docs/design.md, "Tenant fairness"): it
// may have skipped a batch only because another takeover held its row. A batch the runner skips
// itself (its own run's, or one whose job it does not know) is no reason to: a runner whose only
// waiting batch was such a one asked again and again for 2 s at every poll, about 40 statements
// a second from an idle runner.
import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

describe('takeoverMayFind', () => {
  it('finds a waiting batch, but not one the runner skips; a second batch of the tenant still counts', async () => {
    const first = (await createBatch(db.sql, newBatch(1, { tenant: 'skipper' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4 })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id] })).toBe(false);

    const second = (await createBatch(db.sql, newBatch(1, { tenant: 'skipper' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id] })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { maxRunning: 4, skip: [first.id, second.id] })).toBe(false);
  });

  it('with a batch named, answers for that batch whatever the skip list holds', async () => {
    const named = (await createBatch(db.sql, newBatch(1, { tenant: 'named' }))).batch;
    expect(await q.takeoverMayFind(db.sql, { batchId: named.id, maxRunning: 4, skip: [named.id] })).toBe(true);
    expect(await q.takeoverMayFind(db.sql, { batchId: named.id, maxRunning: 0 })).toBe(false);
  });
});
