// Concurrent migrations race on cluster-wide catalogs (issue 9, item 8): `create role`
// (23505 on pg_authid_rolname_index), `grant` ("tuple concurrently updated", XX000) and
// `create schema`. None reaches the caller, and each migration is applied once.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, migrate, migrationFiles, provisionRuntimeRole, type Sql } from '../../src/store/index.js';
import { databaseUrl } from '../support/db.js';

// Roles are shared by every test run on the server (PG15 is shared with other people): names
// are unique to this run, and dropped at the end with the schemas.
const run = randomBytes(4).toString('hex');
const roles: string[] = [];
const schemas: string[] = [];
let admin: Sql;
beforeAll(() => {
  admin = connect(databaseUrl(), { max: 1, applicationName: 'leasehold-test-admin' });
});
afterAll(async () => {
  for (const s of schemas) await admin`drop schema if exists ${admin(s)} cascade`;
  for (const r of roles) await admin`drop role if exists ${admin(r)}`;
  await admin.end();
});

/** A fresh pool of one connection with no schema: each migrator its own session. */
function session(): Sql {
  return connect(databaseUrl(), { max: 1, applicationName: 'leasehold-test-migrator' });
}

describe('concurrent migrations', () => {
  it('8 concurrent migrate() calls, 4 into schema a and 4 into b, each provisioning the same absent runtime role: none fails, 20 rounds out of 20, and each schema has each migration once', async () => {
    const files = await migrationFiles();
    for (let round = 0; round < 20; round++) {
      const role = `lh_race_${run}_${round}`;
      const a = `lh_race_a_${run}_${round}`;
      const b = `lh_race_b_${run}_${round}`;
      roles.push(role);
      schemas.push(a, b);
      const pools = Array.from({ length: 8 }, session);
      try {
        const results = await Promise.allSettled(
          pools.map((sql, i) => migrate(sql, { schema: i % 2 === 0 ? a : b, runtimeRole: { name: role } })),
        );
        const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => String(r.reason));
        expect(failed, `round ${round}`).toEqual([]);
        // Each schema's migrations were applied by exactly one of its four migrators.
        const applied = results.map((r) => (r as PromiseFulfilledResult<{ version: number }[]>).value.length);
        expect(applied.filter((n) => n === files.length)).toHaveLength(2);
        expect(applied.filter((n) => n === 0)).toHaveLength(6);
        for (const s of [a, b]) {
          const rows = await admin<{ version: number }[]>`select version from ${admin(s)}.leasehold_migrations order by version`;
          expect(rows.map((r) => r.version)).toEqual(files.map((f) => f.version));
          const [{ usage }] = await admin<{ usage: boolean }[]>`select has_schema_privilege(${role}, ${s}, 'USAGE') as usage`;
          expect(usage).toBe(true);
        }
        const [{ n }] = await admin<{ n: number }[]>`select count(*) as n from pg_roles where rolname = ${role}`;
        expect(n).toBe(1);
      } finally {
        await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
      }
      // Leave the server as found: the role goes with the schemas it was granted on.
      for (const s of [a, b]) await admin`drop schema ${admin(s)} cascade`;
      await admin`drop role ${admin(role)}`;
    }
    // About 1 s a round on a quiet 2-core machine, several times that while other test files run.
  }, 180_000);

  it('provisioning one absent role from transactions that share no lock (as migrations of two databases do) never fails: the create and the grants that lose a race are tried again', async () => {
    // A stand-in for RDS's rds_iam, so the role grant races too.
    const iam = `lh_race_iam_${run}`;
    roles.push(iam);
    await admin`create role ${admin(iam)}`;
    for (let round = 0; round < 10; round++) {
      const role = `lh_race_nolock_${run}_${round}`;
      roles.push(role);
      const mine = Array.from({ length: 6 }, (_, i) => `lh_race_nl_${run}_${round}_${i}`);
      schemas.push(...mine);
      for (const s of mine) await admin`create schema ${admin(s)}`;
      const pools = mine.map((s) => connect(databaseUrl(), { max: 1, schema: s, applicationName: 'leasehold-test-migrator' }));
      try {
        const results = await Promise.allSettled(
          pools.map((sql) => sql.begin((tx) => provisionRuntimeRole(tx, { name: role, iamRole: iam }))),
        );
        expect(
          results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)),
          `round ${round}`,
        ).toEqual([]);
        const created = results.filter((r) => (r as PromiseFulfilledResult<{ created: boolean }>).value.created);
        expect(created).toHaveLength(1);
        const [{ member }] = await admin<{ member: boolean }[]>`select pg_has_role(${role}, ${iam}, 'MEMBER') as member`;
        expect(member).toBe(true);
      } finally {
        await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
      }
      for (const s of mine) await admin`drop schema ${admin(s)} cascade`;
      await admin`drop role ${admin(role)}`;
    }
  });
});
