// A fresh, migrated schema on the run's real PostgreSQL for each test file (or each call).
//
// Through a pooler (`LEASEHOLD_TEST_POOLER=1`, see test/support/global-setup.ts) the schema gets a
// database of its own, named like it, whose default `search_path` is the schema: a transaction-
// mode pooler passes no `search_path` from the client, and a statement outside a transaction runs
// with the server session's own settings, so the database's defaults stand in for the role
// defaults the migration gives the runtime roles (src/store/roles.ts). Every pool made here is
// then `pooler: 'transaction'` and reaches that database through PgBouncer.
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connect, migrate, type ConnectOptions, type Sql } from '../../src/store/index.js';
import {
  DEFAULT_IDLE_IN_TRANSACTION_MS,
  DEFAULT_LOCK_TIMEOUT_MS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
} from '../../src/store/connect.js';

/** One isolated schema on the test PostgreSQL, from {@link testDatabase}. */
export interface TestDatabase {
  /** Pool whose `search_path` is {@link TestDatabase.schema}. */
  sql: Sql;
  /**
   * URL of the server, with no schema in it: pair it with `connect(url, { schema })`. Through a
   * pooler: PgBouncer's URL of the schema's own database (pair it with `pooler: 'transaction'`).
   */
  url: string;
  /**
   * {@link TestDatabase.url} plus `search_path=<schema>`, for code that only takes a URL
   * (for example a handler reading `DATABASE_URL`): postgres.js sends URL parameters it does
   * not know as connection settings, so every connection made from it lands in the schema.
   */
  schemaUrl: string;
  /** Name of the schema, unique per call (`t_…`). */
  schema: string;
  /**
   * What a function's environment needs to reach the schema as `loadConfig` reads it:
   * `DATABASE_URL` ({@link TestDatabase.schemaUrl}) and, through a pooler,
   * `LEASEHOLD_DB_POOLER=transaction`.
   */
  env: { DATABASE_URL: string; LEASEHOLD_DB_POOLER?: 'transaction' };
  /** Whether the pools go through a transaction-mode pooler (`LEASEHOLD_TEST_POOLER=1`). */
  pooled: boolean;
  /**
   * Open another pool on the same schema (for example one per simulated process, so that
   * ending it kills only that process's connections). {@link TestDatabase.close} ends it.
   */
  connect(options?: Omit<ConnectOptions, 'schema'>): Sql;
  /** End every pool opened here (in-flight queries get 5 s), then drop the schema. Idempotent. */
  close(): Promise<void>;
}

/** Options of {@link testDatabase}. */
export interface TestDatabaseOptions {
  /** Apply `migrate()` from `src/store` to the new schema. Default true. */
  migrate?: boolean;
  /** Pool size of {@link TestDatabase.sql}. Default 10. */
  max?: number;
  /**
   * URL of a transaction-mode PgBouncer in front of the test server to go through (its own
   * database, see the module comment). Default the run's (`LEASEHOLD_TEST_POOLER=1`), else none.
   */
  pooler?: string;
  /**
   * A database of its own (with the schema inside it), not a schema of the shared one: PostgreSQL
   * keeps a table's dead row versions while any transaction of the same database may still see
   * them, so another file's long transaction would change what this file's tables can clean
   * (the hot-tables test measures that). Default false.
   */
  ownDatabase?: boolean;
}

/**
 * URL of the PostgreSQL this test run uses: `DATABASE_URL` when set, otherwise the container or
 * embedded server started by `test/support/global-setup.ts`.
 */
export function databaseUrl(): string {
  const url = inject('databaseUrl') || process.env.DATABASE_URL;
  if (!url) throw new Error('no test database: run the tests through vitest (npm test), or set DATABASE_URL');
  return url;
}

/** PgBouncer's URL when this run goes through it (`LEASEHOLD_TEST_POOLER=1`), else undefined. */
export function poolerUrl(): string | undefined {
  return inject('poolerUrl') || undefined;
}

/** `url` naming database `name` instead of its own. */
function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/**
 * Create a uniquely named schema on the test PostgreSQL, migrate it (unless
 * `{ migrate: false }`), and return a pool confined to it. Never a mock: this is the real
 * server of the run. Call it once per test file in `beforeAll` and `close()` it in `afterAll`:
 *
 * ```ts
 * let db: TestDatabase;
 * beforeAll(async () => { db = await testDatabase(); });
 * afterAll(() => db.close());
 * it('…', async () => { await db.sql`select 1`; });
 * ```
 *
 * Tables are unqualified in leasehold's SQL, so everything lands in and is read from the
 * schema; test files never see each other's rows.
 *
 * @throws the database error when the server cannot be reached or a migration fails.
 */
export async function testDatabase(options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  const server = databaseUrl();
  const pooler = options.pooler ?? poolerUrl();
  const schema = `t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = connect(server, { max: 1, applicationName: 'leasehold-test-admin' });
  const own = pooler !== undefined || options.ownDatabase === true;
  const url = pooler ? withDatabase(pooler, schema) : own ? withDatabase(server, schema) : server;
  const pools: Sql[] = [];
  const open = (o: Omit<ConnectOptions, 'schema'> = {}): Sql => {
    const pool = connect(url, { applicationName: 'leasehold-test', ...o, schema, ...(pooler ? { pooler: 'transaction' } : {}) });
    pools.push(pool);
    return pool;
  };
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
      // The pooler's server sessions of the database are ended with it.
      if (own) await admin.unsafe(`drop database if exists "${schema}" with (force)`);
      else await admin.unsafe(`drop schema if exists "${schema}" cascade`);
      await admin.end();
    })());
  try {
    if (own) await createPooledDatabase(server, admin, schema);
    else await admin.unsafe(`create schema "${schema}"`);
    const sql = open({ max: options.max ?? 10 });
    if (options.migrate ?? true) await migrate(sql);
    const schemaUrl = pooler ? url : `${url}${url.includes('?') ? '&' : '?'}search_path=${encodeURIComponent(schema)}`;
    const env = pooler ? { DATABASE_URL: schemaUrl, LEASEHOLD_DB_POOLER: 'transaction' as const } : { DATABASE_URL: schemaUrl };
    return { sql, url, schemaUrl, schema, env, pooled: pooler !== undefined, connect: open, close };
  } catch (e) {
    await close().catch(() => {});
    throw e;
  }
}

/**
 * Database `name` with schema `name` in it, whose sessions start in that schema and with the
 * settings the migration gives the runtime roles (see {@link setPoolerDefaults}).
 */
async function createPooledDatabase(server: string, admin: Sql, name: string): Promise<void> {
  await admin.unsafe(`create database "${name}"`);
  const inside = connect(withDatabase(server, name), { max: 1, applicationName: 'leasehold-test-admin' });
  try {
    await inside.unsafe(`create schema "${name}"`);
  } finally {
    await inside.end();
  }
  await setPoolerDefaults(server, name, name);
}

/**
 * Give database `name` of the server at `server` the defaults a session behind a transaction-mode
 * pooler runs its statements outside a transaction with: `search_path` = `schema`, and the settings
 * the migration gives the runtime roles (src/store/roles.ts). A database copied from a template
 * does not inherit them (they are not in the template's files).
 *
 * @throws the database error of any statement.
 */
export async function setPoolerDefaults(server: string, name: string, schema: string): Promise<void> {
  const inside = connect(withDatabase(server, name), { max: 1, applicationName: 'leasehold-test-admin' });
  try {
    await inside.unsafe(`alter database "${name}" set search_path = "${schema}"`);
    await inside.unsafe(`alter database "${name}" set statement_timeout = '${DEFAULT_STATEMENT_TIMEOUT_MS}'`);
    await inside.unsafe(`alter database "${name}" set lock_timeout = '${DEFAULT_LOCK_TIMEOUT_MS}'`);
    await inside.unsafe(`alter database "${name}" set idle_in_transaction_session_timeout = '${DEFAULT_IDLE_IN_TRANSACTION_MS}'`);
    await inside.unsafe(`alter database "${name}" set jit = off`);
  } finally {
    await inside.end();
  }
}
