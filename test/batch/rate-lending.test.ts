// Lent token blocks (docs/design.md, "Rate limits"; migration 026): at a high rate a take may
// grant a block held for the lending time, which counts against the bucket's burst until it
// lapses. Checked on the statement itself, against a real PostgreSQL: lending stops at half the
// burst, what a bucket grants plus what it lent never passes the burst (plus the refill), lent
// tokens stop counting two epochs on, and many clients taking at once invent no token.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { takeTokens, type TokenAsk } from '../../src/batch/sql/rate.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

const HOLD_MS = 50;

/** One take of one key of a job of its own, lending for `lendMs`. */
const take = (sql: Sql, job: string, ask: Omit<TokenAsk, 'key'>, lendMs: number) =>
  takeTokens(sql, { batchId: randomUUID(), job, asks: [{ key: 'k', ...ask }], holdMs: HOLD_MS, lendMs }).then((g) => g[0]!);

/** The database clock, s. */
const dbNow = async (sql: Sql) => (await sql<{ t: number }[]>`select extract(epoch from clock_timestamp())::float8 as t`)[0]!.t;

describe('lent token blocks', () => {
  it('lends blocks up to half the burst, then grants short ones, and never more than the burst less what it lent', async () => {
    const job = `lend-${randomUUID()}`;
    // 20 tokens a second (so a block of 250 is at most a quarter of a 60 s lending time's worth):
    // the refill during the test is a few tokens.
    const ask = { want: 10, lend: 250, perSecond: 20, burst: 1_000 };
    const lendMs = 60_000;
    const first = await take(db.sql, job, ask, lendMs);
    expect(first).toMatchObject({ granted: 250, holdMs: lendMs });
    expect(await take(db.sql, job, ask, lendMs)).toMatchObject({ granted: 250, holdMs: lendMs });
    // 500 lent: a third block would pass half the burst, so the take grants what was asked, short.
    expect(await take(db.sql, job, ask, lendMs)).toMatchObject({ granted: 10, holdMs: HOLD_MS });
    // All the bucket has left is its burst less the 500 lent less the 10: at most 490 and the refill.
    const rest = await take(db.sql, job, { ...ask, want: 1_000, lend: 0 }, lendMs);
    expect(rest.holdMs).toBe(HOLD_MS);
    expect(rest.granted).toBeGreaterThanOrEqual(490);
    expect(rest.granted).toBeLessThanOrEqual(496);
    expect((await take(db.sql, job, { ...ask, want: 1_000, lend: 0 }, lendMs)).granted).toBeLessThanOrEqual(4);
  });

  it('counts a lent block for its epoch and the next only: then the bucket refills to its whole burst', async () => {
    const job = `lend-${randomUUID()}`;
    // 10,000 a second: the bucket is full again within 0.1 s, but for the 500 lent.
    const ask = { want: 1_000, lend: 500, perSecond: 10_000, burst: 1_000 };
    const lendMs = 400;
    expect(await take(db.sql, job, ask, lendMs)).toMatchObject({ granted: 500, holdMs: lendMs });
    await sleep(150);
    // Lent 500 in this epoch or the one before: no more lending, and at most 500 held.
    const capped = await take(db.sql, job, { ...ask, lend: 0 }, lendMs);
    expect(capped.granted).toBeLessThanOrEqual(500);
    // Two epochs on, the block has lapsed and counts no more.
    await sleep(2 * lendMs + 50);
    const full = await take(db.sql, job, { ...ask, lend: 0 }, lendMs);
    expect(full.granted).toBe(1_000);
  });

  it('a smaller burst or rate after lending stalls nothing past the lent epochs, and a lowered rate lends no block', async () => {
    const job = `lend-${randomUUID()}`;
    const lendMs = 300;
    expect(await take(db.sql, job, { want: 10, lend: 500, perSecond: 100_000, burst: 1_000 }, lendMs)).toMatchObject({
      granted: 500,
      holdMs: lendMs,
    });
    // Now the key's burst is 4 and its rate 100/s: 500 lent passes the whole burst, so nothing is
    // granted, and no block is lent at 100/s (a block of 500 is far more than the rate gives).
    const small = { want: 4, lend: 500, perSecond: 100, burst: 4 };
    expect((await take(db.sql, job, small, lendMs)).granted).toBe(0);
    // Two epochs on, the bucket is not in debt: it grants from its refill at once.
    await sleep(2 * lendMs + 100);
    expect(await take(db.sql, job, small, lendMs)).toMatchObject({ granted: 4, holdMs: HOLD_MS });
  });

  it('8 clients taking at once, 5 rounds: no token is invented, and lent tokens stay within half the burst per two epochs', async () => {
    const pools = Array.from({ length: 8 }, () => db.connect({ max: 1 }));
    try {
      for (let round = 0; round < 5; round++) {
        const job = `lend-${randomUUID()}`;
        const ask = { want: 16, lend: 100, perSecond: 2_000, burst: 800 };
        const lendMs = 200;
        const t0 = await dbNow(db.sql);
        const grants = await Promise.all(
          pools.map(async (p) => {
            const got: { granted: number; holdMs: number }[] = [];
            for (let i = 0; i < 60; i++) got.push(await take(p, job, ask, lendMs));
            return got;
          }),
        );
        const elapsed = (await dbNow(db.sql)) - t0;
        const all = grants.flat();
        const total = all.reduce((s, g) => s + g.granted, 0);
        const lent = all.filter((g) => g.holdMs === lendMs).reduce((s, g) => s + g.granted, 0);
        // A bucket grants at most its burst plus its refill, lent tokens included.
        expect(total, `round ${round}`).toBeLessThanOrEqual(800 + 2_000 * elapsed);
        // Blocks were lent, at most 400 in any two epochs running: over the E epochs the round
        // spans, at most 400 for each pair, ceil(E / 2) of them.
        expect(lent, `round ${round}`).toBeGreaterThan(0);
        const epochs = Math.floor(((t0 + elapsed) * 1000) / lendMs) - Math.floor((t0 * 1000) / lendMs) + 1;
        expect(lent, `round ${round}`).toBeLessThanOrEqual(400 * Math.ceil(epochs / 2));
        expect(all.every((g) => g.holdMs === lendMs || g.holdMs === HOLD_MS)).toBe(true);
      }
    } finally {
      await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
    }
  });
});
