// A process row belongs to the instance that created it (a token only it holds), on a real
// PostgreSQL: a second instance given a reused process id never renews that row, never adopts
// units it did not claim, and never releases units of the other instance.
import { beforeAll, describe, expect, it } from 'vitest';
import { ProcessIdInUseError, putTenantUnits, type LeaserEvent } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { OverlapChecker, clear, concurrently, expire, member, ownedKeys, type Member } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase({ max: 4 });
let pools: Sql[];

beforeAll(async () => {
  pools = Array.from({ length: 4 }, () => db.connect({ max: 1 }));
});

/** Process X, alone, owning all 6 units. */
async function xOwningSix(): Promise<Member> {
  await clear(db.sql);
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 6 });
  const x = member(pools[0], {}, { name: 'X' });
  await x.leaser.heartbeat();
  expect(await x.leaser.tick()).toMatchObject({ claimed: 6 });
  return x;
}

async function processRows(id: string): Promise<{ token: string; started_at: Date }[]> {
  return db.sql<{ token: string; started_at: Date }[]>`select token, started_at from leasehold_processes where id = ${id}`;
}

describe('a reused process id', () => {
  it('of an expired, unswept process owning 6 units inherits none of them: the new instance owns only what it claims', async () => {
    const x = await xOwningSix();
    const id = x.leaser.processId;
    await expire(db.sql, id, 1_000);
    const [old] = await processRows(id);
    const y = member(pools[1], { processId: id }, { name: 'Y' });
    // Its first heartbeat takes the expired row over as new: X's units are freed first.
    expect(await y.leaser.heartbeat()).toEqual({ lapsed: false });
    const rows = await processRows(id);
    expect(rows).toHaveLength(1);
    expect(rows[0].token).not.toBe(old.token);
    expect(rows[0].started_at.getTime()).toBeGreaterThan(old.started_at.getTime());
    const [{ unowned }] = await db.sql<
      { unowned: number }[]
    >`select count(*) as unowned from leasehold_units where owner is null`;
    expect(unowned).toBe(6);
    // Its first tick claims the units; everything it was told it owns came from its claims.
    expect(await y.leaser.tick()).toMatchObject({ claimed: 6 });
    expect(y.rec.calls.every((c) => c.kind === 'gained')).toBe(true);
    expect(y.rec.calls.flatMap((c) => c.units).sort()).toEqual(await ownedKeys(db.sql, id));
    // X, thawed, is refused and told it lost everything; its release and delete touch nothing of Y.
    const xEvents: LeaserEvent[] = x.events;
    await expect(x.leaser.heartbeat()).rejects.toBeInstanceOf(ProcessIdInUseError);
    expect(x.rec.owned.size).toBe(0);
    expect(xEvents).toContainEqual({ type: 'lapsed', lost: 6 });
    expect(await x.leaser.tick()).toMatchObject({ claimed: 0, shed: 0 });
    expect(x.rec.owned.size).toBe(0);
    expect(await x.leaser.release()).toBe(0);
    expect(await x.leaser.deleteProcess()).toBe(false);
    expect(await ownedKeys(db.sql, id)).toHaveLength(6);
    expect(y.rec.owned.size).toBe(6);
    expect(await y.leaser.heartbeat()).toEqual({ lapsed: false });
    expect(y.rec.errors).toEqual([]);
    expect(x.rec.errors).toEqual([]);
  });

  it('of a live process is refused: the second instance neither renews the row nor claims, adopts or releases anything', async () => {
    const a = await xOwningSix();
    const id = a.leaser.processId;
    const [before] = await processRows(id);
    const b = member(pools[1], { processId: id }, { name: 'B' });
    await expect(b.leaser.heartbeat()).rejects.toThrow(/belongs to another live instance/);
    expect(b.leaser.ready()).toBe(false);
    expect(await b.leaser.tick()).toMatchObject({ claimed: 0, shed: 0 });
    expect(b.rec.calls).toEqual([]);
    expect(await b.leaser.release()).toBe(0);
    expect(await b.leaser.deleteProcess()).toBe(false);
    // Its loop keeps being refused (reported, never thrown) and never becomes ready.
    const ctl = new AbortController();
    const loop = b.leaser.run(ctl.signal);
    await sleep(400);
    ctl.abort();
    await loop;
    expect(b.leaser.ready()).toBe(false);
    expect(b.events.filter((e) => e.type === 'error').length).toBeGreaterThan(0);
    expect(b.rec.calls).toEqual([]);
    // A is untouched: one row, its token, its 6 units, its heartbeats renew it.
    expect(await processRows(id)).toEqual([before]);
    expect(await a.leaser.heartbeat()).toEqual({ lapsed: false });
    expect(await a.leaser.tick()).toMatchObject({ claimed: 0, shed: 0 });
    expect(a.rec.owned.size).toBe(6);
    expect(await ownedKeys(db.sql, id)).toEqual(a.rec.keys());
    expect(a.rec.calls.filter((c) => c.kind === 'lost')).toEqual([]);
  });

  it('shared by 4 instances racing heartbeats, ticks and releases as their rows lapse: no unit is ever in two valid leases', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 40 });
    const id = '00000000-0000-4000-8000-0000000000aa';
    // A TTL of 300 ms, so rows lapse between rounds and other instances take them over.
    const ms = pools.map((p, i) =>
      member(p, { processId: id, ttlMs: 300, heartbeatIntervalMs: 100, storeTimeoutMs: 5_000 }, { name: `I${i}` }),
    );
    // An instance acts on its units only while its lease is valid by its own clock (unit work
    // checks leaseValid()); among those, no unit may be in two owned sets.
    const valid = new Map(ms.map((m) => [m.rec, () => m.leaser.leaseValid()]));
    const checker = new OverlapChecker(
      () => ms.map((m) => m.rec),
      (r) => valid.get(r)!(),
    );
    ms.forEach((m) => checker.watch(m.rec));
    checker.start(2);
    const errors: unknown[] = [];
    let refused = 0;
    let takenOver = 0;
    let lastToken = '';
    for (let round = 0; round < 60; round++) {
      await concurrently(ms, async (m) => {
        const r = Math.random();
        try {
          if (r < 0.35) await m.leaser.heartbeat();
          else if (r < 0.75) await m.leaser.tick();
          else if (r < 0.85) await m.leaser.release();
          else await sleep(150 + Math.random() * 300);
        } catch (error) {
          if (error instanceof ProcessIdInUseError) refused++;
          else errors.push(error);
        }
      });
      const [row] = await processRows(id);
      if (row && row.token !== lastToken) {
        if (lastToken) takenOver++;
        lastToken = row.token;
      }
      // An instance with a valid lease holding units holds the row: the units are its own.
      const holders = ms.filter((m) => m.leaser.leaseValid() && m.rec.owned.size > 0);
      expect(holders.length).toBeLessThanOrEqual(1);
      if (holders.length === 1) {
        const inStore = await ownedKeys(db.sql, id);
        for (const k of holders[0].rec.keys()) expect(inStore).toContain(k);
      }
    }
    checker.stop();
    expect(errors).toEqual([]);
    expect(refused).toBeGreaterThan(0);
    expect(takenOver).toBeGreaterThan(0);
    expect(checker.violations).toEqual([]);
    expect(ms.flatMap((m) => m.rec.errors)).toEqual([]);
  });
});
