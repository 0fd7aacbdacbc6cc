// Concurrency pools shared across batches and jobs (docs/design.md, "Concurrency pools"; issue 39
// item 4): many runs of several batches, each runner on its own connection pool as processes
// are, share one pool; the items in flight are counted here as they start and end. The checks:
// the cap holds with every run at once (repeated), a limit changed while they run is followed,
// a dead run's permits come back when its lease lapses (database clock), and eight clients
// taking at once never hold more than the pool.
import { describe, expect, it } from 'vitest';
import { Runner, createBatch, getBatch, setPool, type Executor } from '../../src/batch/index.js';
import { syncPermits } from '../../src/batch/sql/pools.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

const connect = usePools(db, 3);

const uid = () => Math.random().toString(36).slice(2, 8);

/** Items in flight now and the most seen, counted by the work itself (one process). */
/**
 * Work that counts the items in flight. With `fill`, the first items wait (up to 10 s) until
 * `fill` are in flight at once, then everything runs as usual: whether the pool can be filled is
 * then shown on a loaded machine too, where items of a few ms may never overlap that much.
 */
function inFlight(workMs: () => number, key?: (input: unknown) => string, fill?: number) {
  const c = { now: 0, most: 0, started: 0, perKey: new Map<string, number>(), mostPerKey: 0, filled: fill === undefined };
  const work: Executor['work'] = async ({ input }) => {
    const k = key?.(input) ?? '';
    c.now++;
    c.started++;
    c.most = Math.max(c.most, c.now);
    c.perKey.set(k, (c.perKey.get(k) ?? 0) + 1);
    c.mostPerKey = Math.max(c.mostPerKey, c.perKey.get(k)!);
    try {
      for (const until = performance.now() + 10_000; !c.filled && performance.now() < until;) {
        if (c.now >= fill!) c.filled = true;
        else await sleep(5);
      }
      c.filled = true;
      await sleep(workMs());
      return 'ok';
    } finally {
      c.now--;
      c.perKey.set(k, c.perKey.get(k)! - 1);
    }
  };
  return { c, work };
}

async function untilEnded(ids: string[], timeoutMs: number): Promise<void> {
  await waitFor(
    'every batch to end',
    async () => (await Promise.all(ids.map((id) => getBatch(db.sql, id)))).every((b) => b.status !== 'open'),
    { timeoutMs, everyMs: 50 },
  );
}

describe('a concurrency pool shared by batches', () => {
  it('caps the items in flight across 3 batches of 3 runs each on 4 runners, 3 rounds, and keeps the pool busy', async () => {
    for (let round = 0; round < 3; round++) {
      const name = `cap-${round}-${uid()}`;
      await setPool(db.sql, name, { total: 6, perKey: null });
      const { c, work } = inFlight(() => 5 + Math.random() * 10, undefined, 6);
      const executor: Executor = { parallel: 4, work };
      const ids: string[] = [];
      for (let b = 0; b < 3; b++) {
        const { batch } = await createBatch(
          db.sql,
          newBatch(60, { job: `pooled-${b}-${uid()}`, maxConcurrency: 3, pool: name }),
          { maxOpen: 10 },
        );
        expect(batch.pool).toBe(name);
        ids.push(batch.id);
      }
      const runners = Array.from(
        { length: 4 },
        () => new Runner(connect(), { maxRuns: 3, beatMs: 100, staleMs: 5_000, parallel: 4 }),
      );
      try {
        for (const r of runners) r.watch(() => executor, 20);
        await untilEnded(ids, 60_000);
      } finally {
        await Promise.all(runners.map((r) => r.close()));
      }
      for (const id of ids) expect(await getBatch(db.sql, id)).toMatchObject({ status: 'succeeded' });
      expect(c.started).toBe(180);
      console.log(`[pool] round ${round}: most in flight ${c.most} of 6`);
      expect(c.most).toBeLessThanOrEqual(6);
      // 12 runs of 4 slots wanted 48 at once: the pool was filled, not merely not passed.
      expect(c.most).toBe(6);
      // Every run gave its permits back when it ended.
      const [left] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_pool_leases where pool = ${name}`;
      expect(left.n).toBe(0);
    }
  }, 240_000);

  it('caps per key and in total: perKey 2, total 3, over keys a and b', async () => {
    const name = `keyed-${uid()}`;
    await setPool(db.sql, name, { total: 3, perKey: 2 });
    const { c, work } = inFlight(
      () => 5 + Math.random() * 10,
      (input) => ((input as { i: number }).i % 2 === 0 ? 'a' : 'b'),
    );
    const executor: Executor = {
      parallel: 4,
      pool: { name, perKey: 2, total: 3, key: (item) => ((item.input as { i: number }).i % 2 === 0 ? 'a' : 'b') },
      work,
    };
    const { batch } = await createBatch(db.sql, newBatch(80, { job: `keyed-${uid()}`, maxConcurrency: 3 }), { maxOpen: 10 });
    const runners = Array.from(
      { length: 3 },
      () => new Runner(connect(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 }),
    );
    try {
      for (const r of runners) r.watch(() => executor, 20);
      await untilEnded([batch.id], 60_000);
    } finally {
      await Promise.all(runners.map((r) => r.close()));
    }
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded' });
    expect(c.most).toBeLessThanOrEqual(3);
    expect(c.mostPerKey).toBeLessThanOrEqual(2);
    expect(c.most).toBe(3);
  }, 90_000);

  it('follows a limit changed while the batches run: raised from 2 to 8, then lowered to 1', async () => {
    const name = `moving-${uid()}`;
    await setPool(db.sql, name, { total: 2, perKey: null });
    const { c, work } = inFlight(() => 20);
    const executor: Executor = { parallel: 4, work };
    const ids: string[] = [];
    for (let b = 0; b < 2; b++) {
      const { batch } = await createBatch(db.sql, newBatch(300, { job: `moving-${b}-${uid()}`, maxConcurrency: 2, pool: name }), {
        maxOpen: 10,
      });
      ids.push(batch.id);
    }
    const runners = Array.from(
      { length: 4 },
      () => new Runner(connect(), { maxRuns: 1, beatMs: 100, staleMs: 5_000, parallel: 4 }),
    );
    const samples: number[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        samples.push(c.now);
        await sleep(10);
      }
    })();
    try {
      for (const r of runners) r.watch(() => executor, 20);
      await waitFor('items to run', () => c.started >= 20, { timeoutMs: 20_000 });
      expect(Math.max(...samples)).toBeLessThanOrEqual(2);
      await setPool(db.sql, name, { total: 8, perKey: null });
      samples.length = 0;
      await waitFor('more in flight', () => c.now > 2, { timeoutMs: 10_000, everyMs: 5 });
      await sleep(300);
      expect(Math.max(...samples)).toBeLessThanOrEqual(8);
      await setPool(db.sql, name, { total: 1, perKey: null });
      // Runs learn of a lowered limit at their next take or beat (100 ms here) and give back as
      // their items end (20 ms each).
      await sleep(500);
      samples.length = 0;
      await sleep(500);
      expect(Math.max(...samples)).toBeLessThanOrEqual(1);
      expect(Math.max(...samples)).toBe(1);
    } finally {
      sampling = false;
      await sampler;
      await Promise.all(runners.map((r) => r.close()));
    }
  }, 90_000);

  it("a dead run's permits come back when its lease lapses, by the database clock", async () => {
    const name = `dead-${uid()}`;
    await setPool(db.sql, name, { total: 5, perKey: null });
    const defaults = { total: 5, perKey: null };
    const dead = crypto.randomUUID();
    const live = crypto.randomUUID();
    const take = (run: string, target: number, leaseMs: number) =>
      syncPermits(db.sql, { pool: name, run, targets: [{ key: '', target }], leaseMs, defaults });
    expect((await take(dead, 5, 400)).grants).toEqual([{ key: '', held: 5 }]);
    // The run dies holding them: another gets none while its lease lives…
    expect((await take(live, 3, 10_000)).grants).toEqual([{ key: '', held: 0 }]);
    // …and all once it lapsed (the database's clock: its clock_timestamp() passed expires_at).
    await sleep(450);
    const [lapsed] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_pool_leases
      where pool = ${name} and expires_at <= clock_timestamp()`;
    expect(lapsed.n).toBe(1);
    expect((await take(live, 5, 10_000)).grants).toEqual([{ key: '', held: 5 }]);
    const rows = await db.sql`select run_id from leasehold_pool_leases where pool = ${name}`;
    expect(rows.map((r) => r.run_id)).toEqual([live]);
  });

  it('8 clients taking and giving back at once never hold more than the pool, 5 rounds', async () => {
    const name = `race-${uid()}`;
    await setPool(db.sql, name, { total: 10, perKey: 4 });
    const defaults = { total: 10, perKey: 4 };
    const clients = Array.from({ length: 8 }, () => connect(1));
    for (let round = 0; round < 5; round++) {
      let most = 0;
      const runs = clients.map(() => crypto.randomUUID());
      await Promise.all(
        clients.map(async (sql, i) => {
          for (let n = 0; n < 20; n++) {
            const targets = ['a', 'b', 'c'].map((key) => ({ key, target: Math.floor(Math.random() * 4) }));
            await syncPermits(sql, { pool: name, run: runs[i], targets, leaseMs: 10_000, defaults });
            const held = await db.sql<{ key: string; n: number }[]>`select key, sum(held)::int as n
              from leasehold_pool_leases where pool = ${name} and expires_at > clock_timestamp() group by key`;
            const total = held.reduce((s, r) => s + r.n, 0);
            most = Math.max(most, total);
            for (const r of held) expect(r.n).toBeLessThanOrEqual(4);
            expect(total).toBeLessThanOrEqual(10);
          }
        }),
      );
      expect(most).toBe(10);
      await db.sql`delete from leasehold_pool_leases where pool = ${name}`;
    }
  }, 60_000);

  it('a start naming a pool that does not exist is refused', async () => {
    await expect(createBatch(db.sql, newBatch(1, { pool: `nowhere-${uid()}` }))).rejects.toThrow(
      /pool "nowhere-.*" does not exist/,
    );
  });
});
