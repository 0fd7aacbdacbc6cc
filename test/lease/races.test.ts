// Sweeps, claims, heartbeats and releases racing over the same units on a real PostgreSQL: no
// deadlock, no unit lost, and a final round of ticks owns every unit again.
import { beforeAll, describe, expect, it } from 'vitest';
import { putTenantUnits, sweep } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, concurrently, expire, liveIds, member, ownedKeys, type Member } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase({ max: 4 });
let pools: Sql[];

beforeAll(async () => {
  pools = Array.from({ length: 6 }, () => db.connect({ max: 1 }));
});

/** Units whose owner has no process row: nobody can ever claim them again. */
async function lostUnits(sql: Sql): Promise<string[]> {
  const rows = await sql<{ tenant: string; shard: number; owner: string }[]>`select tenant, shard, owner from leasehold_units u
    where owner is not null and not exists (select 1 from leasehold_processes p where p.id = u.owner)`;
  return rows.map((r) => `${r.tenant}/${r.shard} owned by missing ${r.owner}`);
}

describe('racing sweeps, claims and releases', () => {
  it('never deadlock and never lose a unit over 100 rounds', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 400 });
    await putTenantUnits(db.sql, 'bigco', { job: 'sync', shards: 200, weight: 3 });
    const members: Member[] = pools.map((p) => member(p));
    await concurrently(members, (m) => m.leaser.heartbeat());
    await concurrently(members, (m) => m.leaser.tick());
    const errors: unknown[] = [];
    const counts = { tick: 0, release: 0, leave: 0, heartbeat: 0, expire: 0, swept: 0, freed: 0 };
    const problems: string[] = [];
    for (let round = 0; round < 100; round++) {
      // Processes frozen past any cutoff (rows expired two hours ago), which then act while
      // the others claim their units and the sweeps free them.
      for (const m of members) {
        if (Math.random() < 0.25) {
          counts.expire++;
          await expire(db.sql, m.leaser.processId, 7_200_000);
        }
      }
      const ops: (() => Promise<unknown>)[] = [];
      // Each process does one thing (its own calls never overlap).
      for (const m of members) {
        const r = Math.random();
        if (r < 0.45) ops.push(() => (counts.tick++, m.leaser.tick()));
        else if (r < 0.65) ops.push(() => (counts.release++, m.leaser.release()));
        else if (r < 0.7)
          ops.push(async () => {
            counts.leave++;
            await m.leaser.release();
            await m.leaser.deleteProcess();
          });
        else if (r < 0.95) ops.push(() => (counts.heartbeat++, m.leaser.heartbeat()));
      }
      // Two schedulers sweep at once.
      for (let s = 0; s < 2; s++) {
        ops.push(async () => {
          const r = await sweep(db.sql, Math.random() < 0.5 ? 0 : 3_600_000);
          counts.swept += r.processes;
          counts.freed += r.units;
        });
      }
      await concurrently(ops, (op) => op().catch((e: unknown) => void errors.push(e)), 1);
      problems.push(...(await lostUnits(db.sql)).map((p) => `round ${round}: ${p}`));
      // No unit in two live processes' owned sets (as their reconcilers were told).
      const live = await liveIds(db.sql);
      const seen = new Map<string, string>();
      for (const m of members) {
        if (!live.has(m.leaser.processId)) continue;
        for (const k of m.rec.owned.keys()) {
          if (seen.has(k)) problems.push(`round ${round}: ${k} owned by live ${seen.get(k)} and ${m.rec.name}`);
          seen.set(k, m.rec.name);
        }
      }
    }
    const deadlocks = errors.filter((e) => (e as { code?: string }).code === '40P01');
    expect(deadlocks).toEqual([]);
    expect(errors).toEqual([]);
    expect(problems).toEqual([]);
    // Every kind of step happened, and the sweeps had work.
    for (const n of Object.values(counts)) expect(n).toBeGreaterThan(0);

    // A final round: everyone heartbeats, then ticks own every unit between the live processes.
    // Concurrent ticks skip the units locked by each other (SKIP LOCKED), so a round may leave a
    // few for the next: a lost unit would stay unowned through all 12 rounds (4 were too few once
    // on a loaded CI machine: 1 unit of 1,000 left).
    await concurrently(members, (m) => m.leaser.heartbeat());
    const ownedNow = async () =>
      (
        await db.sql<{ unowned: number; weight: number }[]>`select count(*) filter (where owner is null) as unowned,
          coalesce(sum(weight) filter (where owner is not null), 0)::int as weight from leasehold_units`
      )[0]!;
    let r = await ownedNow();
    for (let round = 0; round < 12 && r.unowned > 0; round++) {
      await concurrently(members, (m) => m.leaser.tick());
      r = await ownedNow();
    }
    expect(r).toEqual({ unowned: 0, weight: 400 + 600 });
    const live = await liveIds(db.sql);
    expect(live.size).toBe(members.length);
    for (const m of members) expect(m.rec.keys()).toEqual(await ownedKeys(db.sql, m.leaser.processId));
    expect(members.flatMap((m) => m.rec.errors)).toEqual([]);
  });
});

describe('a process swept while it releases', () => {
  it('never deadlocks with the sweep, whichever order their plans visit the units in', async () => {
    await clear(db.sql);
    // 20,000 units in one statement, analysed with three processes owning 1,000 each, so that
    // plans read units through the owner index.
    await db.sql.unsafe(`insert into leasehold_units (tenant, shard, job, weight)
      select 't' || (i / 1000), i % 1000, 'sync', 1 from generate_series(0, 19999) i`);
    const errors: unknown[] = [];
    for (let rep = 0; rep < 12; rep++) {
      // Three processes frozen for two hours, each owning one tenant's 1,000 units; one of them
      // thaws and releases while a scheduler sweeps all three.
      const zombies = [0, 1, 2].map((i) => member(pools[i]));
      for (const [i, z] of zombies.entries()) {
        await z.leaser.heartbeat();
        await db.sql`update leasehold_units set owner = ${z.leaser.processId} where tenant = ${`t${i * 5}`}`;
        await expire(db.sql, z.leaser.processId, 7_200_000);
      }
      if (rep === 0) await db.sql`analyze leasehold_units`;
      const z = zombies[rep % 3];
      const [released, swept] = await Promise.all([
        z.leaser.release().catch((e: unknown) => void errors.push(e)),
        sweep(pools[3], 3_600_000).catch((e: unknown) => void errors.push(e)),
      ]);
      // A deadlock aborts one of the two (SQLSTATE 40P01).
      expect(errors.map((e) => (e as { code?: string }).code ?? String(e))).toEqual([]);
      if (swept) expect(swept.processes).toBe(3);
      // Every unit freed exactly once, by one or the other.
      if (typeof released === 'number' && swept) expect(released + swept.units).toBe(3_000);
      const [r] = await db.sql<{ owned: number }[]>`select count(*) as owned from leasehold_units where owner is not null`;
      expect(r.owned).toBe(0);
      await db.sql`delete from leasehold_processes`;
    }
    await clear(db.sql);
  });

  it('a sweep that waits on a unit changed meanwhile still frees it', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 10 });
    const z = member(pools[0]);
    await z.leaser.heartbeat();
    expect(await z.leaser.tick()).toMatchObject({ claimed: 10 });
    await expire(db.sql, z.leaser.processId, 7_200_000);
    // A registry update rewrites two of its units (new weight and config) and commits only
    // after the sweep reached them.
    let commit!: () => void;
    const gate = new Promise<void>((r) => (commit = r));
    let updated!: () => void;
    const ready = new Promise<void>((r) => (updated = r));
    const writer = pools[1].begin(async (tx) => {
      await tx`update leasehold_units set weight = 5, config = '{"endpoints":2}' where tenant = 'acme' and shard in (3, 7)`;
      updated();
      await gate;
    });
    await ready;
    const swept = sweep(pools[2], 3_600_000);
    await sleep(200);
    commit();
    await writer;
    expect(await swept).toEqual({ processes: 1, units: 10 });
    const rows = await db.sql<
      { owner: string | null; weight: number }[]
    >`select owner, weight from leasehold_units order by shard`;
    expect(rows.map((r) => r.owner)).toEqual(Array(10).fill(null));
    expect(rows.map((r) => r.weight)).toEqual([1, 1, 1, 5, 1, 1, 1, 5, 1, 1]);
  });
});
