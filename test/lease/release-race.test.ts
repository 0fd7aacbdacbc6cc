// A release racing a registration (docs/design.md, "The database in production"): a unit whose
// config a registration changes while the owner releases it must be released all the same, or it
// stays owned by a process that then deletes its row, for good.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { putTenantUnits } from '../../src/lease/index.js';
import { claim, deleteProcess, heartbeat, releaseAll } from '../../src/lease/sql/ownership.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

describe('a release racing a registration', () => {
  it('frees every unit, also one a registration changed after the release began, over 5 rounds', async () => {
    const other = db.connect({ max: 1 });
    for (let round = 0; round < 5; round++) {
      await db.sql`delete from leasehold_units`;
      await putTenantUnits(db.sql, 't', { job: 'j', shards: 4, weight: 1, config: { v: 0 } });
      const me = { id: randomUUID(), token: randomUUID() };
      await heartbeat(db.sql, { ...me, role: 'fleet', hostname: 'h', version: 'v', ttlMs: 60_000, units: 0, weight: 0 });
      expect(await claim(db.sql, me, { budget: 100, limit: 10, from: 0, to: 1 })).toHaveLength(4);
      // A real open transaction holds the change of one owned unit while the release runs.
      let held!: () => void;
      const isHeld = new Promise<void>((r) => (held = r));
      const holder = other.begin(async (tx) => {
        await tx`update leasehold_units set config = ${tx.json({ v: round + 1 })} where tenant = 't' and shard = 0`;
        held();
        await sleep(300);
      });
      await isHeld;
      const released = releaseAll(db.sql, me);
      // The server's own evidence: the release waits on the holder's row lock.
      await sleep(100);
      const [w] = await db.sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
        where wait_event_type = 'Lock' and datname = current_database() and query like '%leasehold_units u set owner = null%'`;
      expect(w.n).toBe(1);
      await holder;
      expect(await released).toBe(4);
      expect(await deleteProcess(db.sql, me)).toMatchObject({ replaces: me.id, id: me.id, replacements: 1 });
      const [owned] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_units where owner is not null`;
      expect(owned.n).toBe(0);
    }
  });
});
