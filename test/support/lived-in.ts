// A lived-in database of its own (test/support/history.ts's default history in a migrated
// schema), for the plan test: built once per server and copied for each run, instead of loaded
// anew by every run (issue 35: 74–140 s a pass).
//
// On a server that outlives the run (`DATABASE_URL`: CI's PostgreSQL 15, a developer's own) the
// history is loaded once into a template database, `leasehold_lived_<hash>` (the hash of the
// migrations, of history.ts and of this file: a change to any of them builds a new one, and the
// old ones are dropped). Each run then gets a database of its own copied from it
// (`CREATE DATABASE … TEMPLATE`, `STRATEGY FILE_COPY` on PostgreSQL 15 and later: the files are
// copied, not written through the WAL) and drops it when done. A copy is what the load left:
// the same rows, the same pages, the same statistics (`pg_statistic` and `pg_class` are
// per-database catalogs, copied with the rest), autovacuum off on its tables.
//
// On a server made for the run alone (the embedded or container one of
// test/support/global-setup.ts, gone at teardown) a template would be used once: the history is
// loaded straight into the run's own database, in the same way, and costs what it did before.
import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { connect, migrate, type ConnectOptions, type Sql } from '../../src/store/index.js';
import { databaseUrl, poolerUrl, setPoolerDefaults, type TestDatabase } from './db.js';
import { loadHistory } from './history.js';

/** The schema the history lives in, in the template and in every copy. */
export const LIVED_SCHEMA = 'lived';
/** Names of the templates (`<prefix><hash>`) and of the copies (`<prefix><time>_<random>`). */
const TEMPLATE_PREFIX = 'leasehold_lived_';
const COPY_PREFIX = 'leasehold_livedcopy_';
/** The advisory lock (on the server's own database) a run holds while it builds, drops or copies a template. */
const LOCK = 'leasehold:test-lived-in';
/** A template older than this is built again, so that the history stays 1–90 days old (a day late at most). */
const MAX_AGE = '1 day';
/** A copy left by a run killed before its teardown is dropped by a later run after this long. */
const COPY_MAX_AGE_MS = 6 * 3_600_000;

/** Options of {@link livedInDatabase}. */
export interface LivedInOptions {
  /** Pool size of {@link TestDatabase.sql}. Default 10. */
  max?: number;
  /**
   * Build the history once into a template kept on the server and copy it. Default: when the
   * server outlives the run (`DATABASE_URL` is set); otherwise it is loaded into the run's database.
   */
  reuse?: boolean;
}

/** What {@link livedInDatabase} returns: the database, and how it came to be. */
export interface LivedInDatabase extends TestDatabase {
  /** The run's own database (dropped by `close()`). */
  database: string;
  /** The template it was copied from, when reused. */
  template?: string;
  /** ms spent loading the history (0 when an existing template was copied). */
  builtMs: number;
  /** ms the copy took (0 when not reused). */
  copiedMs: number;
}

/**
 * A database of its own holding the default lived-in history in schema {@link LIVED_SCHEMA}:
 * migrated, autovacuum off on every table, 5,000,000 finished items in 250 batches, 10,000 units,
 * 1,000,000 delivered outbox messages, analyzed (`loadHistory`). The caller writes its own data
 * into it; `close()` drops it.
 *
 * Concurrent runs on one server build a template once: the builder holds an advisory lock that
 * the others wait for. A template is copied only while nobody is connected to it (it refuses
 * connections once built).
 *
 * @throws the database error of any statement (for example a role that may not create databases).
 */
export async function livedInDatabase(options: LivedInOptions = {}): Promise<LivedInDatabase> {
  const server = databaseUrl();
  const reuse = options.reuse ?? Boolean(process.env.DATABASE_URL);
  const database = `${COPY_PREFIX}${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  // Statements without a time limit: a copy or an index build may take minutes on a loaded machine.
  const admin = connect(server, { max: 1, applicationName: 'leasehold-test-admin', statementTimeoutMs: 0, lockTimeoutMs: 0 });
  let builtMs: number;
  let copiedMs = 0;
  let template: string | undefined;
  try {
    if (reuse) {
      // A session of its own for the lock (postgres.js 3.4's reserve() waits forever on a pool with no connection yet).
      await admin`select 1`;
      const session = await admin.reserve();
      try {
        await session`select pg_advisory_lock(hashtextextended(${LOCK}, 0))`;
        template = `${TEMPLATE_PREFIX}${await historyHash()}`;
        await dropLeftovers(session, template);
        builtMs = await ensureTemplate(session, server, template);
        const t0 = performance.now();
        const [{ v }] = await session<{ v: number }[]>`select current_setting('server_version_num')::int as v`;
        // FILE_COPY (PostgreSQL 15+) copies the files; the default there, WAL_LOG, writes every page to the WAL.
        await session.unsafe(`create database "${database}" template "${template}"${v >= 150_000 ? ' strategy file_copy' : ''}`);
        copiedMs = performance.now() - t0;
      } finally {
        await session`select pg_advisory_unlock(hashtextextended(${LOCK}, 0))`.catch(() => {});
        session.release();
      }
    } else {
      await admin.unsafe(`create database "${database}"`);
      builtMs = await build(server, database);
    }
    return { ...(await open(server, admin, database, options.max ?? 10)), database, template, builtMs, copiedMs };
  } catch (e) {
    await admin.unsafe(`drop database if exists "${database}" with (force)`).catch(() => {});
    await admin.end();
    throw e;
  }
}

/** `url` naming database `name` instead of its own. */
function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${encodeURIComponent(name)}`;
  return u.toString();
}

/**
 * The template's hash: the migrations (names and text), history.ts and this file, 16 hex digits.
 * The history's sizes are history.ts's defaults, so its text stands for them.
 */
async function historyHash(): Promise<string> {
  const root = resolve(import.meta.dirname, '..', '..');
  const dir = join(root, 'src', 'store', 'migrations');
  const files = [
    ...(await readdir(dir)).sort().map((f) => join(dir, f)),
    join(root, 'test', 'support', 'history.ts'),
    join(root, 'test', 'support', 'lived-in.ts'),
  ];
  const hash = createHash('sha256');
  for (const f of files)
    hash
      .update(`${f.slice(root.length)}\0`)
      .update(await readFile(f))
      .update('\0');
  return hash.digest('hex').slice(0, 16);
}

/**
 * Drop the templates of other hashes (they may not be dropped while a template: the flag goes
 * first) and copies older than {@link COPY_MAX_AGE_MS} nobody is connected to (runs killed
 * before their teardown). Runs under the lock.
 */
async function dropLeftovers(session: Sql, keep: string): Promise<void> {
  const rows = await session<{ name: string }[]>`select datname as name from pg_database
    where (datname like ${`${TEMPLATE_PREFIX}%`} or datname like ${`${COPY_PREFIX}%`}) and datname <> ${keep}`;
  for (const { name } of rows) {
    if (name.startsWith(COPY_PREFIX)) {
      const made = parseInt(name.slice(COPY_PREFIX.length).split('_')[0], 36);
      if (!(Date.now() - made > COPY_MAX_AGE_MS)) continue;
      // Without force: a copy still in use is someone's run.
      await session.unsafe(`drop database if exists "${name}"`).catch(() => {});
      continue;
    }
    await session.unsafe(`alter database "${name}" is_template false`);
    await session.unsafe(`drop database if exists "${name}" with (force)`);
  }
}

/**
 * Make sure `template` exists, complete (a template, its comment the time it was finished) and
 * younger than {@link MAX_AGE}; build it when not (after dropping an incomplete or old one).
 * Returns the ms spent building (0 when it was there). Runs under the lock.
 */
async function ensureTemplate(session: Sql, server: string, template: string): Promise<number> {
  const [found] = await session<{ complete: boolean }[]>`select d.datistemplate
      and coalesce(now() - shobj_description(d.oid, 'pg_database')::timestamptz < ${MAX_AGE}::interval, false) as complete
    from pg_database d where d.datname = ${template}`;
  if (found?.complete) return 0;
  if (found) {
    await session.unsafe(`alter database "${template}" is_template false`);
    await session.unsafe(`drop database "${template}" with (force)`);
  }
  await session.unsafe(`create database "${template}"`);
  const ms = await build(server, template);
  // Complete: marked a template, its time of completion as its comment, and closed to connections,
  // so that nothing (autovacuum included, but for wraparound) is in it when it is copied.
  await session.unsafe(
    `comment on database "${template}" is '${(await session<{ t: string }[]>`select now()::text as t`)[0].t}'`,
  );
  await session.unsafe(`alter database "${template}" with is_template true allow_connections false`);
  return ms;
}

/**
 * Migrate schema {@link LIVED_SCHEMA} of `database`, turn autovacuum off on its tables (so the
 * state stays the one it was made to be) and load the default history into it. Returns its ms.
 */
async function build(server: string, database: string): Promise<number> {
  const t0 = performance.now();
  const url = withDatabase(server, database);
  const setup = connect(url, { max: 1, applicationName: 'leasehold-test-admin' });
  try {
    await setup.unsafe(`create schema "${LIVED_SCHEMA}"`);
  } finally {
    await setup.end();
  }
  // Two connections: loadHistory writes the items and the outbox side by side.
  const sql = connect(url, { max: 2, applicationName: 'leasehold-test', schema: LIVED_SCHEMA });
  try {
    await migrate(sql);
    const tables = await sql<{ name: string }[]>`select tablename as name from pg_tables where schemaname = ${LIVED_SCHEMA}`;
    for (const t of tables) await sql.unsafe(`alter table "${t.name}" set (autovacuum_enabled = false)`);
    await loadHistory(sql);
  } finally {
    await sql.end();
  }
  return performance.now() - t0;
}

/** The {@link TestDatabase} of the run's copy `database` (through the run's pooler when it has one). */
async function open(server: string, admin: Sql, database: string, max: number): Promise<TestDatabase> {
  const pooler = poolerUrl();
  if (pooler) await setPoolerDefaults(server, database, LIVED_SCHEMA);
  const url = pooler ? withDatabase(pooler, database) : withDatabase(server, database);
  const pools: Sql[] = [];
  const openPool = (o: Omit<ConnectOptions, 'schema'> = {}): Sql => {
    const pool = connect(url, {
      applicationName: 'leasehold-test',
      ...o,
      schema: LIVED_SCHEMA,
      ...(pooler ? { pooler: 'transaction' } : {}),
    });
    pools.push(pool);
    return pool;
  };
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
      await admin.unsafe(`drop database if exists "${database}" with (force)`);
      await admin.end();
    })());
  const schemaUrl = pooler ? url : `${url}${url.includes('?') ? '&' : '?'}search_path=${LIVED_SCHEMA}`;
  return {
    sql: openPool({ max }),
    url,
    schemaUrl,
    schema: LIVED_SCHEMA,
    env: pooler ? { DATABASE_URL: schemaUrl, LEASEHOLD_DB_POOLER: 'transaction' } : { DATABASE_URL: schemaUrl },
    pooled: pooler !== undefined,
    connect: openPool,
    close,
  };
}
