// Retry-After (docs/design.md, "Retry-After"), on a real PostgreSQL: an item whose work throws
// RetryAfterError waits that long before its next attempt and uses no attempt, up to
// maxRetryAfter waits; past them each wait counts as an attempt. The header's two forms parse.
import { beforeAll, describe, expect, it } from 'vitest';
import { RetryAfterError, Runner, parseRetryAfter, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { installAudit, itemChanges, itemRows, newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

describe('Retry-After', () => {
  it('waits the time asked for and uses no attempt: an item asked to wait twice ends done on its first attempt', async () => {
    const runner = new Runner(db.sql, { attempts: 1, backoffMs: 0 });
    const tries: number[] = [];
    const work: ItemWork = ({ attempt }) => {
      tries.push(Date.now());
      if (tries.length <= 2) throw new RetryAfterError(300);
      return Promise.resolve({ attempt });
    };
    const { batch } = await runner.start(newBatch(1), {}, { work });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    const [item] = await itemRows(db.sql, batch.id);
    // attempts 1 of 1: both waits gave their attempt back.
    expect(item).toMatchObject({ state: 'done', attempts: 1, output: { attempt: 1 } });
    const [{ waits }] = await db.sql<{ waits: number }[]>`select waits from leasehold_items where batch_id = ${batch.id}`;
    expect(waits).toBe(2);
    // Each wait was stored as a move back to pending, due 300 ms later by the database clock,
    // with the attempt given back; the work ran no sooner than that.
    const waitsStored = (await itemChanges(db.sql, batch.id)).filter((c) => c.old_state === 'running' && c.state === 'pending');
    expect(waitsStored.map((c) => [c.attempts, Math.round(c.delay_ms)])).toEqual([
      [0, 300],
      [0, 300],
    ]);
    expect(tries[1] - tries[0]).toBeGreaterThanOrEqual(290);
    expect(tries[2] - tries[1]).toBeGreaterThanOrEqual(290);
    await runner.close();
  });

  it('counts waits past maxRetryAfter as attempts, each still waiting at least the time asked for', async () => {
    const runner = new Runner(db.sql, { attempts: 2, backoffMs: 0 });
    const work: ItemWork = () => Promise.reject(new RetryAfterError(100, 'slow down'));
    const { batch } = await runner.start(newBatch(2), {}, { work, maxRetryAfter: 3 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed', finishedItems: 2 });
    for (const item of await itemRows(db.sql, batch.id)) {
      expect(item).toMatchObject({ state: 'failed', attempts: 2, error: 'slow down' });
    }
    const stored = await db.sql<{ waits: number }[]>`select waits from leasehold_items where batch_id = ${batch.id}`;
    expect(stored.map((r) => r.waits)).toEqual([3, 3]);
    // Per item: 3 free waits (attempts given back to 0), then attempt 1 failed and waited 100 ms
    // (the backoff is 0: the wait asked for wins), then attempt 2 failed for good.
    const backs = (await itemChanges(db.sql, batch.id)).filter(
      (c) => c.key === 'k000' && c.state === 'pending' && c.old_state === 'running',
    );
    expect(backs.map((c) => [c.attempts, Math.round(c.delay_ms)])).toEqual([
      [0, 100],
      [0, 100],
      [0, 100],
      [1, 100],
    ]);
    await runner.close();
  });

  it('caps a wait at one day instead of ignoring it', async () => {
    const runner = new Runner(db.sql, { attempts: 1 });
    let calls = 0;
    const work: ItemWork = () => {
      calls += 1;
      return Promise.reject(new RetryAfterError(30 * 86_400_000));
    };
    const { batch } = await runner.start(newBatch(1), {}, { work });
    for (let i = 0; i < 200 && calls === 0; i++) await new Promise((r) => setTimeout(r, 10));
    // The wait is stored: the item is pending, due in a day (not 30 days, and not at once).
    for (let i = 0; i < 200; i++) {
      const [row] = await db.sql<{ state: string; due_s: number }[]>`
        select state, extract(epoch from run_after - now())::float8 as due_s from leasehold_items where batch_id = ${batch.id}`;
      if (row.state === 'pending' && calls > 0) {
        expect(row.due_s).toBeGreaterThan(86_400 - 60);
        expect(row.due_s).toBeLessThanOrEqual(86_400);
        break;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(calls).toBe(1);
    await runner.close();
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-12-02T10:00:00Z');
  it('reads delay-seconds and HTTP dates, caps them, and answers undefined for what it cannot read', () => {
    expect(parseRetryAfter('3', now)).toBe(3_000);
    expect(parseRetryAfter(' 120 ', now)).toBe(120_000);
    expect(parseRetryAfter('Wed, 02 Dec 2026 10:00:05 GMT', now)).toBe(5_000);
    expect(parseRetryAfter('Wed, 02 Dec 2026 09:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('999999999', now)).toBe(86_400_000);
    expect(parseRetryAfter('Fri, 01 Jan 2100 00:00:00 GMT', now)).toBe(86_400_000);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter('-1', now)).toBeUndefined();
    expect(parseRetryAfter('', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it("reads RFC 9110's obsolete RFC 850 and asctime dates too", () => {
    expect(parseRetryAfter('Wednesday, 02-Dec-26 10:00:05 GMT', now)).toBe(5_000);
    expect(parseRetryAfter('Wed Dec  2 10:00:05 2026', now)).toBe(5_000);
    // A two-digit year more than 50 years ahead is the century before: long past.
    expect(parseRetryAfter('Tuesday, 02-Dec-99 10:00:05 GMT', now)).toBe(0);
  });

  it('takes no text for a date that is not an HTTP date (Date.parse would guess one)', () => {
    for (const v of [
      'retry 2030',
      'Error 503',
      'version 2',
      'x-1',
      'foo 2099',
      '2026-12-02T10:00:05Z',
      'wed, 02 dec 2026 10:00:05 gmt',
      'Wed, 02 Dec 2026 10:00:05',
      'Wed, 31 Feb 2026 10:00:05 GMT',
      'Wed, 02 Dec 2026 24:00:05 GMT',
      'Wed, 2 Dec 2026 10:00:05 GMT',
    ]) {
      expect(parseRetryAfter(v, now), v).toBeUndefined();
    }
  });
});
