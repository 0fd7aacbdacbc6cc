import { describe, expect, it } from 'vitest';
import { migrate, migrationFiles } from '../../src/store/index.js';
import { testDatabase } from '../support/db.js';

describe('migrations', () => {
  it('apply each migration once when two migrators race on a fresh schema', async () => {
    const files = await migrationFiles();
    expect(files.length).toBeGreaterThan(0);
    for (let round = 0; round < 5; round++) {
      const db = await testDatabase({ migrate: false });
      try {
        const [p1, p2] = [db.connect({ max: 1 }), db.connect({ max: 1 })];
        // Both connections open first, so the two migrations really start together.
        await Promise.all([p1`select 1`, p2`select 1`]);
        const [r1, r2] = await Promise.all([migrate(p1), migrate(p2)]);
        // One applied everything, the other found nothing left to do.
        expect([...r1, ...r2].map((m) => m.version).sort((a, b) => a - b)).toEqual(files.map((f) => f.version));
        expect([r1.length, r2.length].sort()).toEqual([0, files.length]);
        const rows = await db.sql<{ version: number; name: string }[]>`select version, name
          from leasehold_migrations order by version`;
        expect(rows).toEqual(files.map((f) => ({ version: f.version, name: f.name })));
        const [{ n }] = await db.sql<{ n: number }[]>`select count(*) as n from information_schema.tables
          where table_schema = ${db.schema} and table_name in ('leasehold_batches', 'leasehold_items', 'leasehold_datasources')`;
        expect(n).toBe(3);
        expect(await migrate(db.sql)).toEqual([]);
      } finally {
        await db.close();
      }
    }
  });

  it('keep schemas apart: migrating one schema leaves another untouched', async () => {
    const a = await testDatabase();
    const b = await testDatabase({ migrate: false });
    try {
      const [{ n }] = await b.sql<{ n: number }[]>`select count(*) as n from information_schema.tables
        where table_schema = ${b.schema}`;
      expect(n).toBe(0);
      expect((await migrate(b.sql)).length).toBe((await migrationFiles()).length);
      await a.sql`insert into leasehold_datasources values ('t', 'd')`;
      const [{ m }] = await b.sql<{ m: number }[]>`select count(*) as m from leasehold_datasources`;
      expect(m).toBe(0);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
