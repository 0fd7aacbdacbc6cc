// The migration provisions the role the deployed functions connect as (IAM auth on RDS).
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate, type RuntimeRoleResult } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase({ migrate: false });
const roles: string[] = [];
afterAll(async () => {
  for (const r of roles) {
    await db.sql`drop owned by ${db.sql(r)}`.catch(() => {});
    await db.sql`drop role if exists ${db.sql(r)}`.catch(() => {});
  }
});

const unique = (prefix: string) => {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  roles.push(name);
  return name;
};

async function provision(name: string, iamRole?: string): Promise<RuntimeRoleResult> {
  let result: RuntimeRoleResult | undefined;
  await migrate(db.sql, { runtimeRole: { name, ...(iamRole ? { iamRole } : {}) }, onRuntimeRole: (r) => (result = r) });
  return result!;
}

const may = async (role: string, table: string, privilege: string) =>
  (await db.sql<{ ok: boolean }[]>`select has_table_privilege(${role}, ${`${db.schema}.${table}`}, ${privilege}) as ok`)[0].ok;

describe('the runtime role', () => {
  it('is created with login and given row access to leasehold tables only; rds_iam is skipped where it does not exist', async () => {
    await db.sql`create table not_leasehold (x int)`;
    const name = unique('lh_runtime');
    const r = await provision(name, unique('no_such_iam_role'));
    expect(r).toMatchObject({ name, created: true, iam: false, self: false });
    const [{ login }] = await db.sql<{ login: boolean }[]>`select rolcanlogin as login from pg_roles where rolname = ${name}`;
    expect(login).toBe(true);
    const tables = await db.sql<
      { name: string }[]
    >`select tablename as name from pg_tables where schemaname = ${db.schema} and tablename like 'leasehold\\_%'`;
    expect(tables.length).toBeGreaterThan(5);
    for (const t of tables) {
      for (const p of ['SELECT', 'INSERT', 'UPDATE', 'DELETE']) expect(await may(name, t.name, p)).toBe(true);
      expect(await may(name, t.name, 'TRUNCATE')).toBe(false);
    }
    expect(await may(name, 'not_leasehold', 'SELECT')).toBe(false);
    const [{ usage }] = await db.sql<{ usage: boolean }[]>`select has_schema_privilege(${name}, ${db.schema}, 'USAGE') as usage`;
    expect(usage).toBe(true);
    const [{ create }] = await db.sql<
      { create: boolean }[]
    >`select has_schema_privilege(${name}, ${db.schema}, 'CREATE') as create`;
    expect(create).toBe(false);
    // Its own defaults, for sessions that pass no settings (behind a transaction-mode pooler).
    const config = await db.sql<{ setting: string }[]>`select unnest(s.setconfig) as setting
      from pg_db_role_setting s join pg_roles r on r.oid = s.setrole where r.rolname = ${name} and s.setdatabase = 0
      order by 1`;
    expect(config.map((c) => c.setting)).toEqual([
      'idle_in_transaction_session_timeout=10000',
      'jit=off',
      'lock_timeout=2000',
      'statement_timeout=30000',
    ]);
  });

  it('is idempotent: a second migration creates nothing and grants again', async () => {
    const name = unique('lh_again');
    expect((await provision(name)).created).toBe(true);
    const again = await provision(name);
    expect(again).toMatchObject({ created: false, self: false });
    expect(again.grants).toBeGreaterThan(5);
  });

  it('is granted the IAM role where it exists (on RDS: rds_iam)', async () => {
    const iam = unique('fake_rds_iam');
    await db.sql`create role ${db.sql(iam)} nologin`;
    const name = unique('lh_iam');
    expect(await provision(name, iam)).toMatchObject({ created: true, iam: true });
    const [{ member }] = await db.sql<{ member: boolean }[]>`select pg_has_role(${name}, ${iam}, 'member') as member`;
    expect(member).toBe(true);
  });

  it('a name that needs quoting is escaped, never spliced into the SQL', async () => {
    const name = unique('Lh "odd" role; drop table leasehold_batches; --');
    expect((await provision(name)).created).toBe(true);
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*) as n from pg_roles where rolname = ${name}`;
    expect(n).toBe(1);
    expect(await may(name, 'leasehold_batches', 'SELECT')).toBe(true);
  });

  it('is left alone when it is the user running the migration (it owns the tables)', async () => {
    const [{ me }] = await db.sql<{ me: string }[]>`select current_user as me`;
    expect(await provision(me)).toEqual({ name: me, created: false, iam: false, grants: 0, self: true });
  });

  it('can run the runtime statements as that role', async () => {
    const [{ sup }] = await db.sql<{ sup: boolean }[]>`select rolsuper as sup from pg_roles where rolname = current_user`;
    if (!sup) return; // SET ROLE needs membership or superuser; the test servers' user is a superuser.
    const name = unique('lh_use');
    await provision(name);
    const rollback = new Error('rollback');
    const done = db.sql.begin(async (tx) => {
      await tx`set local role ${tx(name)}`;
      await tx`update leasehold_settings set value = value where key = 'desired'`;
      await tx`select count(*) from leasehold_batches`;
      await tx`insert into leasehold_processes (id, hostname, version, expires_at) values (gen_random_uuid(), 'h', 'v', now())`;
      await tx`delete from leasehold_processes`;
      // Unit totals are kept by triggers running as the caller: they need the grants too.
      await tx`insert into leasehold_units (tenant, shard, job) values ('t', 0, 'outbox-delivery')`;
      // The outbox's id comes from its sequence: usage on it is granted too.
      await tx`insert into leasehold_outbox (tenant, shard, key, payload) values ('t', 0, 'k', '{}')`;
      throw rollback;
    });
    await expect(done).rejects.toBe(rollback);
  });
});
