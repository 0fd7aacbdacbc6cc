import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import type { Sql } from './connect.js';
import { CATALOG_RACE_TRIES, catalogRaceDelayMs, isCatalogRace } from './catalog.js';
import { provisionRuntimeRole, type RuntimeRole, type RuntimeRoleResult } from './roles.js';
import { isLockTimeout } from './errors.js';
import { LeaseholdError } from '../errors.js';

const MIGRATIONS_DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

/** One applied or pending migration. */
export interface Migration {
  /** Numeric version from the file name (`001_batches.sql` → 1). */
  version: number;
  /** File name. */
  name: string;
}

/** Options of {@link migrate}. */
export interface MigrateOptions {
  /**
   * Folder of the numbered `.sql` files. Default the `migrations/` folder next to this module —
   * in a bundle (one `.mjs` file per function), a `migrations/` folder copied next to the bundle.
   */
  dir?: string;
  /**
   * Migrate into this schema, created when missing. Default: the first schema of the
   * connection's `search_path` (which must exist).
   */
  schema?: string;
  /**
   * After migrating, provision this role for the runtime functions (see
   * {@link provisionRuntimeRole}): created with `login` when missing, granted `rds_iam` when
   * that exists, and row access to leasehold's tables. Default none.
   */
  runtimeRole?: RuntimeRole;
  /**
   * After `runtimeRole`, provision this one too, the same way: the role the scheduler connects
   * as, kept apart from the runtime role so that its `connectionLimit` (the fleet's budget) never
   * starves the scheduler. Default none.
   */
  schedulerRole?: RuntimeRole;
  /** Called with what was done for `runtimeRole`, then for `schedulerRole`. */
  onRuntimeRole?: (result: RuntimeRoleResult) => void;
  /**
   * `lock_timeout` of every lock the migration takes, ms (`SET LOCAL`, so also through a
   * transaction-mode pooler): a migration waiting in a table's lock queue behind a long reader
   * makes every later statement on that table wait behind it, heartbeats included, so it waits
   * no longer than this, rolls back (freeing the queue) and tries again. Default 2,000.
   */
  lockTimeoutMs?: number;
  /**
   * The longest the migration keeps trying after lock timeouts, ms, counted from its start: then
   * it throws {@link MigrationLockError}. Default 300,000 (5 minutes).
   */
  lockRetryMs?: number;
  /** Called before each wait after a lock timeout: the try that timed out (1, 2, …), the wait, ms, and the time spent so far, ms. */
  onLockWait?: (info: { tries: number; waitMs: number; elapsedMs: number; error: unknown }) => void;
}

/** Defaults of {@link MigrateOptions.lockTimeoutMs} and {@link MigrateOptions.lockRetryMs}. */
export const MIGRATE_LOCK_DEFAULTS = { lockTimeoutMs: 2_000, lockRetryMs: 300_000 } as const;

/** A migration that timed out on its locks for longer than {@link MigrateOptions.lockRetryMs}. */
export class MigrationLockError extends LeaseholdError {
  constructor(
    /** Tries made, each ended by a lock timeout. */
    readonly tries: number,
    /** Time spent, ms. */
    readonly elapsedMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      'migration_lock_timeout',
      `migration gave up after ${tries} tries over ${Math.round(elapsedMs)} ms, each waiting for a lock past its lock_timeout (another session holds a table it changes)`,
      options,
    );
  }
}

/** The default folder of the migration files. */
export const DEFAULT_MIGRATIONS_DIR = MIGRATIONS_DIR;

/** List the migration files shipped with leasehold, in version order. */
export async function migrationFiles(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const names = (await readdir(dir)).filter((n) => /^\d+_.+\.sql$/.test(n)).sort();
  return names.map((name) => ({ version: Number.parseInt(name, 10), name }));
}

/**
 * Apply every migration not yet applied, in version order, and return the ones applied now;
 * then, with `options.runtimeRole`, provision the runtime's role. `options` may be the folder of
 * the migration files (as before {@link MigrateOptions}).
 *
 * Safe under concurrency: the whole run holds a transaction-scoped advisory lock of the database,
 * so migrators of any schemas of one database run one after the other and apply each migration
 * exactly once (a second migrator of a schema waits, then finds nothing left to do). Migrators of
 * other databases on the same server share its cluster-wide catalogs (roles) without that lock:
 * a run that loses a race on them (`23505` on a catalog index, "tuple concurrently updated", see
 * {@link isCatalogRace}) is rolled back as a whole and run again, so no such race reaches the
 * caller and nothing is applied twice. Migrations are unqualified SQL, so they land in
 * `options.schema`, else the first schema of the connection's `search_path`.
 *
 * @throws the database error of a failing migration; the run is one transaction, so nothing of
 *   it stays applied.
 */
export async function migrate(sql: Sql, options: string | MigrateOptions = {}): Promise<Migration[]> {
  const o: MigrateOptions = typeof options === 'string' ? { dir: options } : options;
  const dir = o.dir ?? MIGRATIONS_DIR;
  const files = await migrationFiles(dir);
  const lockTimeoutMs = o.lockTimeoutMs ?? MIGRATE_LOCK_DEFAULTS.lockTimeoutMs;
  const lockRetryMs = o.lockRetryMs ?? MIGRATE_LOCK_DEFAULTS.lockRetryMs;
  const started = performance.now();
  let races = 0;
  for (let tries = 1; ; tries++) {
    try {
      return await migrateOnce(sql, dir, files, o, lockTimeoutMs);
    } catch (e) {
      if (isCatalogRace(e) && ++races < CATALOG_RACE_TRIES) {
        await sleep(catalogRaceDelayMs(races));
        continue;
      }
      if (!isLockTimeout(e)) throw e;
      // Rolled back, so the lock queue it stood in moves on; wait at least half the step (the
      // fleet's statements get through meanwhile), 1 s doubling to 30 s, plus jitter.
      const step = Math.min(30_000, 1_000 * 2 ** Math.min(tries - 1, 10));
      const waitMs = Math.round(step / 2 + (Math.random() * step) / 2);
      const elapsedMs = performance.now() - started;
      if (elapsedMs + waitMs > lockRetryMs) throw new MigrationLockError(tries, elapsedMs, { cause: e });
      o.onLockWait?.({ tries, waitMs, elapsedMs, error: e });
      await sleep(waitMs);
    }
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One migration transaction: everything it did is rolled back when it throws. */
async function migrateOnce(
  sql: Sql,
  dir: string,
  files: Migration[],
  o: MigrateOptions,
  lockTimeoutMs: number,
): Promise<Migration[]> {
  const applied: Migration[] = [];
  await sql.begin(async (tx) => {
    // Every lock of this transaction, the migrators' advisory lock included, is waited for at
    // most this long (docs/development.md, "Migrations").
    await tx`select set_config('lock_timeout', ${String(lockTimeoutMs)}, true)`;
    // Serialises the migrators of this database, whatever their schema: schemas, extensions
    // and roles are shared beyond one schema.
    await tx`select pg_advisory_xact_lock(hashtextextended('leasehold:migrate', 0))`;
    if (o.schema) {
      // The target schema, created when missing; the transaction's statements land in it.
      await tx`create schema if not exists ${tx(o.schema)}`;
      await tx`select set_config('search_path', quote_ident(${o.schema}), true)`;
    }
    // Records which migrations this schema has.
    await tx`create table if not exists leasehold_migrations (
      version integer primary key,
      name text not null,
      applied_at timestamptz not null default now()
    )`;
    const done = new Set((await tx<{ version: number }[]>`select version from leasehold_migrations`).map((r) => r.version));
    for (const m of files) {
      if (done.has(m.version)) continue;
      const text = await readFile(join(dir, m.name), 'utf8');
      await tx.unsafe(text);
      // Marks the migration applied, in the same transaction as its statements.
      await tx`insert into leasehold_migrations (version, name) values (${m.version}, ${m.name})`;
      applied.push(m);
    }
    for (const role of [o.runtimeRole, o.schedulerRole]) {
      if (!role) continue;
      const result = await provisionRuntimeRole(tx, role);
      o.onRuntimeRole?.(result);
    }
  });
  return applied;
}
