import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { migrate, migrationFiles } from '../../src/store/index.js';
import { testDatabase } from '../support/db.js';
import { member } from '../support/lease.js';
import { deferred, waitFor } from '../support/waits.js';

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

describe('a migration behind a long reader', () => {
  it('never makes a heartbeat wait past its lock timeout: it waits for its locks at most lockTimeoutMs, rolls back and tries again, and finishes once the reader ends', async () => {
    const db = await testDatabase();
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-migration-'));
    const heartbeatMs = 1_000;
    const lockTimeoutMs = 500;
    try {
      // A later migration that changes the process table (an ACCESS EXCLUSIVE lock).
      await writeFile(join(dir, '900_wide_processes.sql'), 'alter table leasehold_processes add column note text;\n');
      // The long reader: a report reading the process table for 8 s (a long statement, not an
      // idle transaction, so no idle timeout ends it).
      const reader = db.connect({ max: 1, applicationName: 'leasehold-test-reader', statementTimeoutMs: 0 });
      const reading = reader`select pg_sleep(8), count(*) from leasehold_processes`;
      reading.catch(() => {});
      // Heartbeats every second, timed.
      const { leaser } = member(db.connect({ max: 2 }), { ttlMs: 10_000 });
      const beats: number[] = [];
      const stop = deferred();
      let stopped = false;
      const beating = (async () => {
        while (!stopped) {
          await leaser.heartbeat();
          beats.push(Date.now());
          await Promise.race([new Promise((r) => setTimeout(r, heartbeatMs)), stop.promise]);
        }
      })();
      await waitFor('the reader to run', async () => {
        const [{ n }] = await db.sql<{ n: number }[]>`select count(*) as n from pg_stat_activity
          where application_name = 'leasehold-test-reader' and state = 'active'`;
        return n === 1;
      });
      const waits: { tries: number; waitMs: number }[] = [];
      const migrator = db.connect({ max: 1, applicationName: 'leasehold-test-migrator' });
      const migrating = migrate(migrator, { dir, lockTimeoutMs, onLockWait: (w) => waits.push(w) });
      // The server's own word: the migration waits in the table's lock queue, not granted.
      await waitFor('the migration to wait for its lock', async () => {
        const [{ n }] = await db.sql<{ n: number }[]>`select count(*) as n from pg_locks l
          join pg_stat_activity a on a.pid = l.pid
          where a.application_name = 'leasehold-test-migrator' and not l.granted and l.mode = 'AccessExclusiveLock'`;
        return n === 1;
      });
      const applied = await migrating;
      await reading;
      stopped = true;
      stop.resolve();
      await beating;
      expect(applied.map((m) => m.name)).toEqual(['900_wide_processes.sql']);
      expect(waits.length).toBeGreaterThan(0);
      const [{ n }] = await db.sql<{ n: number }[]>`select count(*) as n from information_schema.columns
        where table_schema = ${db.schema} and table_name = 'leasehold_processes' and column_name = 'note'`;
      expect(n).toBe(1);
      // Heartbeats kept going: no gap beyond twice the interval.
      const gaps = beats.slice(1).map((t, i) => t - beats[i]);
      console.log(
        `[migrate] ${waits.length} lock waits; heartbeats: ${beats.length}, longest gap ${Math.max(...gaps)} ms (interval ${heartbeatMs} ms)`,
      );
      expect(beats.length).toBeGreaterThan(5);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(2 * heartbeatMs);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await db.close();
    }
  }, 60_000);
});
