// Expiry on a real PostgreSQL: units of a process that stopped heartbeating are taken once its
// TTL passed (database clock), a sweep removes it and frees the rest, a frozen process learns
// of its losses inside its next heartbeat, a swept process claims nothing, and skewed process
// clocks change none of it.
import { beforeAll, describe, expect, it } from 'vitest';
import { putTenantUnits, deleteTenantUnits, sweep } from '../../src/lease/index.js';
import { claim } from '../../src/lease/sql/ownership.js';
import type { Clock } from '../../src/clock.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, concurrently, expire, liveIds, member, offsetClock, ownedKeys, type Member } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase({ max: 4 });
let pools: Sql[];

beforeAll(async () => {
  pools = Array.from({ length: 4 }, () => db.connect({ max: 1 }));
});

/** A short-lived process: TTL 1 s. */
const SHORT = { ttlMs: 1_000, heartbeatIntervalMs: 300 };

/** Wait until `id`'s row expired more than `agoMs` ago by the database clock. */
async function expiredFor(id: string, agoMs = 0): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const [r] = await db.sql<
      { done: boolean }[]
    >`select coalesce((select expires_at < now() - make_interval(secs => ${agoMs / 1000})
      from leasehold_processes where id = ${id}), true) as done`;
    if (r.done) return;
    await sleep(20);
  }
  throw new Error(`${id} did not expire`);
}

/** Heartbeat everyone, then tick rounds until every member owns `each` units. */
async function settle(ms: Member[], each: number): Promise<void> {
  await concurrently(ms, (m) => m.leaser.heartbeat());
  for (let round = 0; round < 3; round++) await concurrently(ms, (m) => m.leaser.tick());
  for (const m of ms) expect(m.rec.owned.size).toBe(each);
}

describe('a process that stops heartbeating', () => {
  it('loses its units to others once its TTL passed; a sweep after the cutoff deletes it and frees the rest', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 12 });
    const [a, b, c] = [0, 1, 2].map((i) => member(pools[i]));
    const d = member(pools[3], SHORT);
    await settle([a, b, c, d], 3);
    const dUnits = d.rec.keys();
    // Before its TTL passed, D's units are not claimable and nothing moves.
    expect(await concurrently([a, b, c], (m) => m.leaser.tick())).toEqual(
      [0, 1, 2].map(() => ({ claimed: 0, shed: 0, fairShare: 3 })),
    );
    await expiredFor(d.leaser.processId);
    expect((await liveIds(db.sql)).has(d.leaser.processId)).toBe(false);
    // Not expired for a minute yet: the sweep leaves it.
    expect(await sweep(db.sql, 60_000)).toEqual({ processes: 0, units: 0 });
    // Three live processes, fair share 4: A and B, at once, take one of D's units each.
    const ticks = await concurrently([a, b], (m) => m.leaser.tick());
    expect(ticks).toEqual([0, 1].map(() => ({ claimed: 1, shed: 0, fairShare: 4 })));
    const dLeft = await ownedKeys(db.sql, d.leaser.processId);
    expect(dLeft).toHaveLength(1);
    expect([...a.rec.keys(), ...b.rec.keys(), ...dLeft].filter((k) => dUnits.includes(k)).sort()).toEqual(dUnits);
    // Expired for more than 300 ms: a sweep with that cutoff deletes D and frees its last unit.
    await expiredFor(d.leaser.processId, 300);
    expect(await sweep(db.sql, 300)).toEqual({ processes: 1, units: 1 });
    expect(await sweep(db.sql, 300)).toEqual({ processes: 0, units: 0 });
    const [row] = await db.sql<{ n: number; owner: string | null }[]>`select
        (select count(*) from leasehold_processes where id = ${d.leaser.processId}) as n,
        (select owner from leasehold_units where tenant = 'acme' and shard = ${Number(dLeft[0].split('/')[1])}) as owner`;
    expect(row).toEqual({ n: 0, owner: null });
    // C claims the freed unit.
    expect(await c.leaser.tick()).toMatchObject({ claimed: 1, fairShare: 4 });
    expect(c.rec.keys()).toContain(dLeft[0]);
    for (const m of [a, b, c]) expect(await ownedKeys(db.sql, m.leaser.processId)).toEqual(m.rec.keys());
    for (const m of [a, b, c]) expect(m.rec.owned.size).toBe(4);
  });

  it('learns inside its next heartbeat, before it resolves, which of its units were taken', async () => {
    for (let rep = 0; rep < 2; rep++) {
      await clear(db.sql);
      await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 9 });
      const [a, b] = [0, 1].map((i) => member(pools[i]));
      const d = member(pools[2], SHORT, { name: 'D' });
      await settle([a, b, d], 3);
      await expiredFor(d.leaser.processId);
      // Two live processes, fair share 5: A takes 2 of D's 3 units.
      a.rec.resetCalls();
      expect(await a.leaser.tick()).toMatchObject({ claimed: 2, fairShare: 5 });
      const taken = a.rec.calls.flatMap((c) => c.units).sort();
      const log: string[] = [];
      d.rec.log = log;
      d.rec.resetCalls();
      const beat = d.leaser.heartbeat().then((r) => {
        log.push('D:heartbeat resolved');
        return r;
      });
      expect(await beat).toEqual({ lapsed: true });
      expect(log).toEqual(['D:lost:2', 'D:heartbeat resolved']);
      expect(d.rec.calls).toEqual([{ kind: 'lost', units: taken }]);
      expect(d.events).toEqual([{ type: 'lapsed', lost: 2 }]);
      expect(d.rec.keys()).toEqual(await ownedKeys(db.sql, d.leaser.processId));
      expect(d.rec.owned.size).toBe(1);
      expect((await liveIds(db.sql)).has(d.leaser.processId)).toBe(true);
    }
  });

  it('claims nothing once swept, even with unowned units, until a heartbeat re-creates its row', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 6 });
    const a = member(pools[0]);
    const e = member(pools[1], SHORT);
    await settle([a, e], 3);
    await expiredFor(e.leaser.processId);
    expect(await sweep(db.sql, 0)).toEqual({ processes: 1, units: 3 });
    // Its tick learns of the loss, but its row is gone: no claim, the units stay unowned.
    e.rec.resetCalls();
    expect(await e.leaser.tick()).toMatchObject({ claimed: 0, shed: 0 });
    expect(e.rec.calls).toEqual([{ kind: 'lost', units: expect.any(Array) }]);
    expect(e.rec.owned.size).toBe(0);
    const [r] = await db.sql<{ unowned: number }[]>`select count(*) as unowned from leasehold_units where owner is null`;
    expect(r.unowned).toBe(3);
    expect(await e.leaser.heartbeat()).toEqual({ lapsed: true });
    expect(await e.leaser.tick()).toMatchObject({ claimed: 3, fairShare: 3 });
    expect(await ownedKeys(db.sql, e.leaser.processId)).toEqual(e.rec.keys());
  });

  it('claims nothing when swept between reading its share and claiming: the claim statement checks the row', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'gone', { job: 'sync', shards: 1 });
    const e = member(pools[0]);
    await e.leaser.heartbeat();
    const [{ token }] = await db.sql<{ token: string }[]>`select token from leasehold_processes where id = ${e.leaser.processId}`;
    expect(await e.leaser.tick()).toMatchObject({ claimed: 1 });
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 4 });
    // The tick reads its share (its row live), then reports the removed unit lost; while it
    // does, the row is expired and swept. The claims that follow must take nothing.
    await deleteTenantUnits(db.sql, 'gone');
    e.rec.afterLost = async () => {
      await expire(db.sql, e.leaser.processId, 10_000);
      expect(await sweep(db.sql, 0)).toEqual({ processes: 1, units: 0 });
    };
    expect(await e.leaser.tick()).toMatchObject({ claimed: 0 });
    const [r] = await db.sql<{ owned: number }[]>`select count(*) as owned from leasehold_units where owner is not null`;
    expect(r.owned).toBe(0);
    // And the statement on its own, with the token the row had: no row, no claim.
    expect(await claim(db.sql, { id: e.leaser.processId, token }, { budget: 10, limit: 10, from: 0, to: 1 })).toEqual([]);
  });
});

describe('clock skew', () => {
  /**
   * A run of four processes with the given clocks: settle 12 units, D stops heartbeating (TTL
   * 1 s), the others take its units, D heartbeats again, everyone rebalances. Returns what
   * happened, in terms that do not depend on ids or timing.
   */
  async function story(clocks: [Clock, Clock, Clock, Clock]) {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 12 });
    const [a, b, c] = [0, 1, 2].map((i) => member(pools[i], {}, { clock: clocks[i] }));
    const d = member(pools[3], SHORT, { clock: clocks[3] });
    const all = [a, b, c, d];
    const out: Record<string, unknown> = {};
    await concurrently(all, (m) => m.leaser.heartbeat(), 0);
    // The row's TTL is measured by the database: expires_at − heartbeat_at is the TTL whatever
    // the process clocks say.
    out.ttls = (
      await db.sql<{ ms: number }[]>`select (extract(epoch from expires_at - heartbeat_at) * 1000)::int as ms
      from leasehold_processes order by ms`
    ).map((r) => r.ms);
    for (let round = 0; round < 3; round++) for (const m of all) await m.leaser.tick();
    out.settled = all.map((m) => m.rec.owned.size);
    await expiredFor(d.leaser.processId);
    out.beats = await Promise.all([a, b, c].map((m) => m.leaser.heartbeat()));
    out.live = (await liveIds(db.sql)).size;
    out.takeover = [];
    for (const m of [a, b, c]) (out.takeover as unknown[]).push(await m.leaser.tick());
    out.dBeat = await d.leaser.heartbeat();
    out.dLost = d.events;
    out.after = all.map((m) => m.rec.owned.size);
    for (let round = 0; round < 3; round++) for (const m of all) await m.leaser.tick();
    out.rebalanced = all.map((m) => m.rec.owned.size);
    out.inSync = await Promise.all(
      all.map(async (m) => (await ownedKeys(db.sql, m.leaser.processId)).join() === m.rec.keys().join()),
    );
    out.errors = all.flatMap((m) => m.rec.errors);
    return out;
  }

  it('process clocks skewed by ±20 s change neither ownership nor liveness', async () => {
    const plain = await story([offsetClock(0), offsetClock(0), offsetClock(0), offsetClock(0)]);
    const skewed = await story([offsetClock(-20_000), offsetClock(20_000), offsetClock(-20_000), offsetClock(20_000)]);
    expect(plain).toMatchObject({
      ttls: [1000, 15000, 15000, 15000],
      settled: [3, 3, 3, 3],
      beats: [{ lapsed: false }, { lapsed: false }, { lapsed: false }],
      live: 3,
      takeover: [0, 1, 2].map(() => ({ claimed: 1, shed: 0, fairShare: 4 })),
      dBeat: { lapsed: true },
      dLost: [{ type: 'lapsed', lost: 3 }],
      after: [4, 4, 4, 0],
      rebalanced: [3, 3, 3, 3],
      inSync: [true, true, true, true],
      errors: [],
    });
    expect(skewed).toEqual(plain);
  });
});
