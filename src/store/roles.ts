// The database role the deployed functions connect as: created and granted by the migration,
// which runs as the master user. Role and schema names are escaped by postgres.js (`sql(name)`),
// never built into SQL text.
import type postgres from 'postgres';

/** A transaction of leasehold's postgres.js client. */
type Tx = postgres.TransactionSql<Record<string, never>>;

/** The role the runtime functions connect as, provisioned by {@link provisionRuntimeRole}. */
export interface RuntimeRole {
  /** Role name (a PostgreSQL identifier, at most 63 bytes). */
  name: string;
  /**
   * The role that lets a user log in with an RDS IAM token; granted when it exists (on RDS),
   * skipped elsewhere (a local PostgreSQL). Default `rds_iam`.
   */
  iamRole?: string;
}

/** What {@link provisionRuntimeRole} did. */
export interface RuntimeRoleResult {
  name: string;
  /** The role was created now (it did not exist). */
  created: boolean;
  /** `iamRole` was granted (it exists on this server). */
  iam: boolean;
  /** Tables and sequences of leasehold granted to the role. */
  grants: number;
  /** Nothing was done: the role is the user running the migration, which owns the tables. */
  self: boolean;
}

/**
 * Make `role` able to run leasehold on the schema `tx` works in: `create role … login` when
 * missing, `grant rds_iam` (when that role exists: on RDS; a no-op locally), `usage` on the
 * schema, and `select, insert, update, delete` on every `leasehold_*` table plus `usage, select,
 * update` on every `leasehold_*` sequence of the schema. Idempotent; run after every migration so
 * tables added later are granted too. Does nothing when `role` is the current user (it owns the
 * tables; granting it `rds_iam` would also stop its password logins).
 *
 * Call inside the migration's transaction (the advisory lock serialises migrators of one schema;
 * `create role` is cluster-wide, so a concurrent creator elsewhere is tolerated).
 * @throws the database error when the current user may not create roles or grant.
 */
export async function provisionRuntimeRole(tx: Tx, role: RuntimeRole): Promise<RuntimeRoleResult> {
  const name = role.name;
  const iamRole = role.iamRole ?? 'rds_iam';
  // Who runs the migration, and the schema it creates tables in.
  const [{ me, schema }] = await tx<{ me: string; schema: string }[]>`select current_user as me, current_schema() as schema`;
  if (me === name) return { name, created: false, iam: false, grants: 0, self: true };

  // Whether the role exists already (roles are cluster-wide).
  const [{ exists }] = await tx<{ exists: boolean }[]>`select exists (select 1 from pg_roles where rolname = ${name}) as exists`;
  let created = false;
  if (!exists) {
    try {
      await tx.savepoint(async (s) => {
        // Creates the login role; no password: it authenticates with IAM tokens (or not at all locally).
        await s`create role ${s(name)} login`;
      });
      created = true;
    } catch (e) {
      // duplicate_object: created meanwhile by a migration of another schema.
      if ((e as { code?: string }).code !== '42710') throw e;
    }
  }

  // Whether the RDS IAM role exists (only on RDS).
  const [{ iam }] = await tx<{ iam: boolean }[]>`select exists (select 1 from pg_roles where rolname = ${iamRole}) as iam`;
  // Lets the role log in with IAM tokens instead of a password.
  if (iam) await tx`grant ${tx(iamRole)} to ${tx(name)}`;

  // Lets the role see the schema's objects.
  await tx`grant usage on schema ${tx(schema)} to ${tx(name)}`;
  // leasehold's tables and sequences in this schema, nothing else of a shared database.
  const objects = await tx<{ name: string; kind: string }[]>`
    select c.relname as name, c.relkind as kind
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = ${schema} and c.relkind in ('r', 'p', 'S') and c.relname like 'leasehold\\_%'
    order by c.relname`;
  for (const o of objects) {
    // Row access only: the runtime never changes the schema.
    if (o.kind === 'S') await tx`grant usage, select, update on sequence ${tx(schema)}.${tx(o.name)} to ${tx(name)}`;
    else await tx`grant select, insert, update, delete on table ${tx(schema)}.${tx(o.name)} to ${tx(name)}`;
  }
  return { name, created, iam, grants: objects.length, self: false };
}
