// The database of a test file in one line (issue 34, item 10): the `beforeAll` that creates the
// file's schema and the `afterAll` that closes it, written out once here instead of in every file.
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { ConnectOptions, Sql } from '../../src/store/index.js';
import { testDatabase, type TestDatabase, type TestDatabaseOptions } from './db.js';

/**
 * Register hooks that give this test file its own schema ({@link testDatabase}) before its tests
 * and close it after them, and answer a stand-in for it: `db.sql`, `db.url` and the rest read
 * the real {@link TestDatabase} once `beforeAll` has made it (reading one earlier throws).
 *
 * ```ts
 * const db = useTestDatabase();
 * it('…', async () => { await db.sql`select 1`; });
 * ```
 *
 * Call it at the top of the file before other hooks: vitest runs `afterAll` hooks last registered
 * first, so the schema is closed after whatever a later hook stops (runners, servers).
 * @param options as {@link testDatabase}'s, plus `timeoutMs` of the `beforeAll` (default 60,000 ms).
 */
export function useTestDatabase(options: TestDatabaseOptions & { timeoutMs?: number } = {}): TestDatabase {
  const { timeoutMs = 60_000, ...dbOptions } = options;
  let db: TestDatabase | undefined;
  beforeAll(async () => {
    db = await testDatabase(dbOptions);
  }, timeoutMs);
  afterAll(async () => {
    await db?.close();
  });
  return new Proxy({} as TestDatabase, {
    get(_, name) {
      if (db === undefined) throw new Error(`the test database is read (${String(name)}) before its beforeAll made it`);
      return Reflect.get(db, name) as unknown;
    },
  });
}

/** The pools a test opened beside `db.sql` ({@link usePools}). */
export interface Pools {
  /**
   * Open one more pool to the file's schema (`db.connect`), as another process's would be: `max`
   * connections (default: usePools' `defaultMax`), and any other connect option. Ended after the
   * test.
   */
  (max?: number, options?: Omit<ConnectOptions, 'schema' | 'max'>): Sql;
  /** End every pool opened since the last end (5 s to finish); the `afterEach` calls it too. */
  endAll(): Promise<void>;
}

/**
 * Register an `afterEach` that ends the pools the answer opened during the test, and answer the
 * function that opens them ({@link Pools}). Call it after {@link useTestDatabase}.
 */
export function usePools(db: TestDatabase, defaultMax = 2): Pools {
  const opened: Sql[] = [];
  const pools = ((max = defaultMax, options = {}) => {
    const p = db.connect({ ...options, max });
    opened.push(p);
    return p;
  }) as Pools;
  pools.endAll = async () => {
    await Promise.all(opened.splice(0).map((p) => p.end({ timeout: 5 })));
  };
  afterEach(pools.endAll);
  return pools;
}
