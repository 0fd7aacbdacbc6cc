// The database role the deployed functions connect as: created and granted by the migration,
// which runs as the master user. Role and schema names are escaped by postgres.js (`sql(name)`),
// never built into SQL text.
import type postgres from 'postgres';
import { retryCatalogRace } from './catalog.js';
import { InvalidSettingError } from '../errors.js';
import { DEFAULT_IDLE_IN_TRANSACTION_MS, DEFAULT_LOCK_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS } from './connect.js';

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
  /**
   * The most sessions the role may hold at once (PostgreSQL's role `CONNECTION LIMIT`), set on
   * every provisioning: a number (−1: no limit), or `{ reserve }` for "the database's own limit
   * minus `reserve`" ({@link databaseConnectionLimit}), which keeps `reserve` connections that
   * this role can never take. Default: left as it is (a new role has no limit).
   * @throws {InvalidSettingError} (from {@link provisionRuntimeRole}) `{ reserve }` leaves less than one connection.
   */
  connectionLimit?: number | { reserve: number };
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
  /** The role's connection limit as set now (−1: none); undefined when left as it was. */
  connectionLimit?: number;
}

/**
 * The most sessions non-superusers can open on the current database: the least of the
 * database's `CONNECTION LIMIT` and `max_connections` minus the connections PostgreSQL keeps for
 * superusers (`superuser_reserved_connections`) and, from PostgreSQL 16, for roles granted
 * `pg_use_reserved_connections` (`reserved_connections`).
 */
export async function databaseConnectionLimit(tx: Tx | postgres.Sql<Record<string, never>>): Promise<number> {
  // The database row and the server's settings; reads only.
  const [{ n }] = await tx<{ n: number }[]>`select least(
      case when d.datconnlimit >= 0 then d.datconnlimit end,
      current_setting('max_connections')::int
        - current_setting('superuser_reserved_connections')::int
        - coalesce(nullif(current_setting('reserved_connections', true), '')::int, 0)
    ) as n
    from pg_database d where d.datname = current_database()`;
  return n;
}

/**
 * Make `role` able to run leasehold on the schema `tx` works in: `create role … login` when
 * missing, `grant rds_iam` (when that role exists: on RDS; a no-op locally), `usage` on the
 * schema, and `select, insert, update, delete` on every `leasehold_*` table plus `usage, select,
 * update` on every `leasehold_*` sequence of the schema, and the role's own
 * `idle_in_transaction_session_timeout` (10 s), `lock_timeout` (2 s) and `statement_timeout` (30 s), the
 * settings of its sessions that pass none (behind a transaction-mode pooler). Idempotent; run after every migration so
 * tables added later are granted too. Does nothing when `role` is the current user (it owns the
 * tables; granting it `rds_iam` would also stop its password logins).
 *
 * Call inside the migration's transaction. Roles are cluster-wide, so another migration (of
 * another schema, database or stage on the same server) may create or grant the same role at the
 * same moment: every catalog statement here runs in a savepoint and is tried again when it loses
 * such a race (`23505` on `pg_authid_rolname_index`, "tuple concurrently updated", …; see
 * {@link retryCatalogRace}), so a concurrent provisioning never reaches the caller.
 * @throws the database error when the current user may not create roles or grant.
 */
export async function provisionRuntimeRole(tx: Tx, role: RuntimeRole): Promise<RuntimeRoleResult> {
  const name = role.name;
  const iamRole = role.iamRole ?? 'rds_iam';
  // Who runs the migration, and the schema it creates tables in.
  const [{ me, schema }] = await tx<{ me: string; schema: string }[]>`select current_user as me, current_schema() as schema`;
  if (me === name) return { name, created: false, iam: false, grants: 0, self: true };

  // Created now unless it exists (roles are cluster-wide): the check and the create run again
  // together when a concurrent creator wins between them.
  const created = await retryCatalogRace(tx, async (s) => {
    // Whether the role exists already.
    const [{ exists }] = await s<{ exists: boolean }[]>`select exists (select 1 from pg_roles where rolname = ${name}) as exists`;
    if (exists) return false;
    // Creates the login role; no password: it authenticates with IAM tokens (or not at all locally).
    await s`create role ${s(name)} login`;
    return true;
  });

  // Whether the RDS IAM role exists (only on RDS).
  const [{ iam }] = await tx<{ iam: boolean }[]>`select exists (select 1 from pg_roles where rolname = ${iamRole}) as iam`;
  // Lets the role log in with IAM tokens instead of a password.
  if (iam) await retryCatalogRace(tx, (s) => s`grant ${s(iamRole)} to ${s(name)}`);

  // Lets the role see the schema's objects.
  await retryCatalogRace(tx, (s) => s`grant usage on schema ${s(schema)} to ${s(name)}`);
  // leasehold's tables and sequences in this schema, nothing else of a shared database.
  const objects = await tx<{ name: string; kind: string }[]>`
    select c.relname as name, c.relkind as kind
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = ${schema} and c.relkind in ('r', 'p', 'S') and c.relname like 'leasehold\\_%'
    order by c.relname`;
  await retryCatalogRace(tx, async (s) => {
    for (const o of objects) {
      // Row access only: the runtime never changes the schema.
      if (o.kind === 'S') await s`grant usage, select, update on sequence ${s(schema)}.${s(o.name)} to ${s(name)}`;
      else await s`grant select, insert, update, delete on table ${s(schema)}.${s(o.name)} to ${s(name)}`;
    }
  });
  // The role's own defaults (docs/design.md, "Database connections"): a session of it left idle in
  // a transaction is ended by the server, a lock is waited for at most a few seconds and a
  // statement runs at most 30 s, also in sessions that set nothing themselves: behind a
  // transaction-mode pooler a pool passes no startup settings and sets its own only inside its
  // transactions, so its statements outside a transaction run with these.
  await retryCatalogRace(
    tx,
    (s) => s`alter role ${s(name)} set idle_in_transaction_session_timeout = ${s.unsafe(`'${DEFAULT_IDLE_IN_TRANSACTION_MS}'`)}`,
  );
  await retryCatalogRace(tx, (s) => s`alter role ${s(name)} set lock_timeout = ${s.unsafe(`'${DEFAULT_LOCK_TIMEOUT_MS}'`)}`);
  await retryCatalogRace(
    tx,
    (s) => s`alter role ${s(name)} set statement_timeout = ${s.unsafe(`'${DEFAULT_STATEMENT_TIMEOUT_MS}'`)}`,
  );
  // And no JIT compilation, as `connect` sets it (docs/design.md, "Database connections").
  await retryCatalogRace(tx, (s) => s`alter role ${s(name)} set jit = off`);
  let connectionLimit: number | undefined;
  if (role.connectionLimit !== undefined) {
    const want = role.connectionLimit;
    connectionLimit = typeof want === 'number' ? want : (await databaseConnectionLimit(tx)) - want.reserve;
    if (!Number.isInteger(connectionLimit) || connectionLimit < -1 || (typeof want !== 'number' && connectionLimit < 1)) {
      throw new InvalidSettingError(
        `the connection limit of role "${name}"`,
        `${JSON.stringify(want)} leaves ${connectionLimit} connections`,
      );
    }
    const limit = connectionLimit;
    // The cap PostgreSQL enforces on the role's sessions (cluster-wide, like the role).
    await retryCatalogRace(tx, (s) => s`alter role ${s(name)} connection limit ${s.unsafe(String(limit))}`);
  }
  return {
    name,
    created,
    iam,
    grants: objects.length,
    self: false,
    ...(connectionLimit !== undefined ? { connectionLimit } : {}),
  };
}
