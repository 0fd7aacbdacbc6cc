// A heartbeat at the very edge of its TTL on a real PostgreSQL: one that started before the TTL
// ended but commits, or gets its row, only after another process could see the row expired.
// Either no unit is taken from it, or the heartbeat itself reports every unit taken: never two
// live processes owning one unit.
import { beforeAll, describe, expect, it } from 'vitest';
import { putTenantUnits } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, concurrently, liveIds, member, ownedKeys, type Member } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase({ max: 4 });
let pools: Sql[];

beforeAll(async () => {
  pools = Array.from({ length: 3 }, () => db.connect({ max: 1 }));
  // A slow commit, in this test's schema only: a heartbeat of a process listed in slow_beat
  // holds its updated row for 400 ms before its statement ends (as a slow disk would).
  await db.sql.unsafe(`create table slow_beat (id uuid primary key);
    create function slow_beat() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from slow_beat where id = new.id) then perform pg_sleep(0.4); end if;
      return null;
    end $$;
    create trigger slow_beat after update on leasehold_processes for each row execute function slow_beat();`);
});

/** L (TTL 1 s) and M own 3 of 6 units each; L's row then ends its TTL 150 ms from now. */
async function nearExpiry(): Promise<{ l: Member; m: Member }> {
  await clear(db.sql);
  await db.sql`delete from slow_beat`;
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 6 });
  // Statements may take longer than a third of the TTL here: the slow commit is the point.
  const l = member(pools[0], { ttlMs: 1_000, heartbeatIntervalMs: 300, storeTimeoutMs: 2_000 }, { name: 'L' });
  const m = member(pools[1], {}, { name: 'M' });
  await concurrently([l, m], (x) => x.leaser.heartbeat());
  for (let round = 0; round < 3; round++) await concurrently([l, m], (x) => x.leaser.tick());
  expect([l.rec.owned.size, m.rec.owned.size]).toEqual([3, 3]);
  await db.sql`update leasehold_processes set expires_at = now() + interval '150 ms' where id = ${l.leaser.processId}`;
  return { l, m };
}

/** No unit is in the owned sets of two live processes, and each set is what the database holds. */
async function expectOneOwner(l: Member, m: Member): Promise<void> {
  const live = await liveIds(db.sql);
  expect(live.has(l.leaser.processId) && live.has(m.leaser.processId)).toBe(true);
  expect(l.rec.keys().filter((k) => m.rec.owned.has(k))).toEqual([]);
  expect(l.rec.keys()).toEqual(await ownedKeys(db.sql, l.leaser.processId));
  expect(m.rec.keys()).toEqual(await ownedKeys(db.sql, m.leaser.processId));
  expect(l.rec.owned.size + m.rec.owned.size).toBe(6);
}

describe('a heartbeat at the edge of the TTL', () => {
  it('that commits after the TTL ended keeps its units: no claim takes them while it holds its row', async () => {
    for (let rep = 0; rep < 2; rep++) {
      const { l, m } = await nearExpiry();
      await db.sql`insert into slow_beat values (${l.leaser.processId})`;
      const beat = l.leaser.heartbeat();
      // The heartbeat started before the end of the TTL; M ticks after it, before the commit.
      await sleep(250);
      expect(await m.leaser.tick()).toMatchObject({ claimed: 0 });
      expect(await beat).toEqual({ lapsed: false });
      expect(l.rec.owned.size).toBe(3);
      await expectOneOwner(l, m);
    }
  });

  it('that gets its row only after a claim took its units reports them lost before it resolves', async () => {
    for (let rep = 0; rep < 2; rep++) {
      const { l, m } = await nearExpiry();
      // Something holds L's row when its heartbeat starts, until after M claimed.
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      let holding!: () => void;
      const held = new Promise<void>((r) => (holding = r));
      const holder = pools[2].begin(async (tx) => {
        await tx`select 1 from leasehold_processes where id = ${l.leaser.processId} for share`;
        holding();
        await gate;
      });
      await held;
      const log: string[] = [];
      l.rec.log = log;
      const beat = l.leaser.heartbeat().then((r) => (log.push('L:heartbeat resolved'), r));
      await sleep(250);
      // M sees L's row expired and takes its units (a shared lock does not stop it).
      expect(await m.leaser.tick()).toMatchObject({ claimed: 3 });
      release();
      await holder;
      expect(await beat).toEqual({ lapsed: true });
      expect(log).toEqual(['L:lost:3', 'L:heartbeat resolved']);
      expect(l.events).toEqual([{ type: 'lapsed', lost: 3 }]);
      await expectOneOwner(l, m);
    }
  });
});
