// A fresh, migrated schema on the run's real PostgreSQL for each test file (or each call).
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connect, migrate, type ConnectOptions, type Sql } from '../../src/store/index.js';

/** One isolated schema on the test PostgreSQL, from {@link testDatabase}. */
export interface TestDatabase {
  /** Pool whose `search_path` is {@link TestDatabase.schema}. */
  sql: Sql;
  /** URL of the server, with no schema in it: pair it with `connect(url, { schema })`. */
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
  const url = databaseUrl();
  const schema = `t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = connect(url, { max: 1, applicationName: 'leasehold-test-admin' });
  const pools: Sql[] = [];
  const open = (o: Omit<ConnectOptions, 'schema'> = {}): Sql => {
    const pool = connect(url, { applicationName: 'leasehold-test', ...o, schema });
    pools.push(pool);
    return pool;
  };
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
      await admin.unsafe(`drop schema if exists "${schema}" cascade`);
      await admin.end();
    })());
  try {
    await admin.unsafe(`create schema "${schema}"`);
    const sql = open({ max: options.max ?? 10 });
    if (options.migrate ?? true) await migrate(sql);
    const schemaUrl = `${url}${url.includes('?') ? '&' : '?'}search_path=${encodeURIComponent(schema)}`;
    return { sql, url, schemaUrl, schema, connect: open, close };
  } catch (e) {
    await close().catch(() => {});
    throw e;
  }
}
