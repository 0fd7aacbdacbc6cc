// Every reason, error and event text leasehold stores passes through one gate, storableText
// (issue 37): a text holding NUL (PostgreSQL text refuses it), a lone surrogate, or far too
// many characters is stored, replaced and cut, by each statement that writes one, against the
// real PostgreSQL. Without the gate each of these statements failed (22021, or 22P05 in JSON).
import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { markNotifyFailed, markSendFailed, writeEndEvent } from '../../src/batch/sql/events.js';
import { encodeMoves } from '../../src/batch/sql/moves.js';
import { resultsFailed } from '../../src/batch/sql/results.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

const NASTY = `bad\u0000byte, lone \ud800 surrogate, ${'x'.repeat(20_000)}`;

function storable(t: string | null, most: number): void {
  expect(t).not.toBeNull();
  expect(t).not.toContain('\u0000');
  expect(t).toMatch(/^bad\ufffdbyte, lone \ufffd surrogate/);
  expect(t!.length).toBeLessThanOrEqual(most + 40);
  expect(t).toContain('characters, cut)');
}

describe('texts leasehold stores', () => {
  it('a results error and the events send and notify errors are stored, replaced and cut', async () => {
    const { batch } = await createBatch(db.sql, newBatch(1));
    await resultsFailed(db.sql, batch.id, NASTY);
    await db.sql`update leasehold_batches set status = 'failed', finished_at = now(), live_runs = 0 where id = ${batch.id}`;
    await writeEndEvent(db.sql, batch.id);
    const [e] = await db.sql<{ id: string }[]>`select id from leasehold_batch_events where batch_id = ${batch.id}`;
    await markSendFailed(db.sql, { id: e.id, error: NASTY, retryInMs: 1_000 });
    await markNotifyFailed(db.sql, { id: e.id, error: NASTY, retryInMs: 1_000 });
    const [b] = await db.sql<{ results_error: string }[]>`select results_error from leasehold_batches where id = ${batch.id}`;
    storable(b.results_error, 1_000);
    const [ev] = await db.sql<{ send_error: string; notify_error: string }[]>`select send_error, notify_error
      from leasehold_batch_events where id = ${e.id}`;
    storable(ev.send_error, 1_000);
    storable(ev.notify_error, 1_000);
  });

  it("an item's error in a move is made storable as it is encoded", () => {
    const { json } = encodeMoves([
      { key: 'k', state: 'failed', claimed: 1, attempts: 1, output: null, error: NASTY, delayMs: 0 },
    ]);
    const [m] = JSON.parse(json) as { error: string }[];
    storable(m.error, 8_192);
    expect(json).not.toContain('\\u0000');
    expect(json).not.toMatch(/\\ud800/i);
  });
});
