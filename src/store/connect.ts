import type { PeerCertificate } from 'node:tls';
import postgres from 'postgres';
import { replaceOnReadOnly } from './failover.js';
import { endingWithConnection } from './transactions.js';

/** A postgres.js client as used throughout leasehold. */
export type Sql = postgres.Sql<Record<string, never>>;

/**
 * Where and how to connect when there is no URL (a deployed database): the password may be a
 * function, called for every new connection (an IAM token that expires, for example).
 */
export interface ConnectTarget {
  host: string;
  /** Default 5432. */
  port?: number;
  database: string;
  user: string;
  /** A password, or a function returning one for each new connection. Default none. */
  password?: string | (() => string | Promise<string>);
  /**
   * TLS options (`node:tls` connect options: `ca`, `rejectUnauthorized`, `servername`,
   * `checkServerIdentity`), or false for none. postgres.js sends the host as `servername` when
   * it is a name, but for an IP address Node then checks the certificate against `localhost`:
   * give `checkServerIdentity` to check it against the real host. Default false.
   */
  ssl?:
    | false
    | {
        ca?: string[];
        rejectUnauthorized: boolean;
        servername?: string;
        checkServerIdentity?: (hostname: string, cert: PeerCertificate) => Error | undefined;
      };
}

/** Default {@link ConnectOptions.statementTimeoutMs}. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
/** Default {@link ConnectOptions.lockTimeoutMs}. */
export const DEFAULT_LOCK_TIMEOUT_MS = 2_000;
/** Default {@link ConnectOptions.idleInTransactionTimeoutMs}. */
export const DEFAULT_IDLE_IN_TRANSACTION_MS = 10_000;

/** Options for {@link connect}. */
export interface ConnectOptions {
  /** Maximum pool size. Default 10. */
  max?: number;
  /** Close idle connections after this many seconds (postgres.js unit). Default 30 s. */
  idleTimeoutS?: number;
  /**
   * Replace a connection after this many seconds, even a busy one once its query ends
   * (postgres.js unit). Default postgres.js's own: 30 to 60 minutes.
   */
  maxLifetimeS?: number;
  /** Give up opening a connection after this many seconds. Default 30. */
  connectTimeoutS?: number;
  /** Schema to put first on the `search_path` (tests isolate themselves this way). Default: none. */
  schema?: string;
  /** Application name shown in `pg_stat_activity`. Default `leasehold`. */
  applicationName?: string;
  /**
   * Server-side `statement_timeout`, ms: a statement stuck on a lock or a slow plan fails
   * instead of holding a run or a worker. Default 30,000; 0 disables it.
   */
  statementTimeoutMs?: number;
  /**
   * Server-side `lock_timeout`, ms: a statement waiting this long for a lock (a row or table
   * another session holds: a client frozen in its transaction, a migration in the lock queue)
   * fails with `55P03` instead, which callers treat as a retryable store error (the API answers
   * 503 with `Retry-After`). Default 2,000; 0 disables it.
   */
  lockTimeoutMs?: number;
  /**
   * Server-side `idle_in_transaction_session_timeout`, ms: a session of this pool left idle in an
   * open transaction this long (its client frozen or gone) is ended by the server, which frees
   * its locks. No leasehold transaction waits on anything but the database between its statements
   * (a start reads its items before it begins). Default 10,000; 0 disables it.
   */
  idleInTransactionTimeoutMs?: number;
  /**
   * What stands between the pool and the server (docs/design.md, "Database connections":
   * poolers). `transaction`: a transaction-mode pooler (PgBouncer `pool_mode = transaction`, RDS
   * Proxy), which hands each transaction, and each statement outside one, to whichever server
   * session is free. Then no named prepared statement is made (postgres.js `prepare: false`), the
   * connection's startup packet carries no setting but `application_name` (a pooler refuses or
   * drops the others, and would apply them to no later session), and every transaction of the
   * pool (`begin`) starts with `set_config(…, true)` — `SET LOCAL` — of `statement_timeout`,
   * `lock_timeout`, `idle_in_transaction_session_timeout`, `jit` and, with {@link ConnectOptions.schema},
   * `search_path`, sent in the same round trip as its first statement. A statement outside a
   * transaction runs with the server session's own settings: the role's defaults, which the
   * migration sets on the runtime roles (see `provisionRuntimeRole`), or the database's.
   * Default: none, a direct connection, where the settings are the connection's own.
   */
  pooler?: 'transaction';
  /**
   * Called once per read-only episode, with its first error: a statement failed with `25006`
   * (the server is read-only: the old writer after a failover) and no episode was under way. The
   * pool is then replaced by a probe of one connection, again at most every 500 ms to 8 s (full
   * jitter, doubling), so a server that keeps refusing writes gets at most 2 new connections a
   * second; the episode ends, and a full pool comes back, once the probe answers for 1 s with no
   * `25006` (see `replaceOnReadOnly` in `failover.ts`). Also called when a timed-out statement
   * retired the pool (`withTimeout`). Default none.
   */
  onReadOnly?: (error: unknown) => void;
}

// The driver: postgres.js 3.4.9, pinned and patched at install (`patches/postgres+3.4.9.patch`,
// applied by patch-package from `prepare`, which `npm ci` and `npm install` run in a clone but
// never in an app that installs leasehold). Unpatched, a statement written to a connection
// whose socket had closed — a transaction's own `rollback` after its backend was terminated, or
// any statement of a transaction in flight when the connection died — was flushed from a
// `setImmediate` callback that dereferenced the null socket: an uncaught `TypeError: Cannot read
// properties of null (reading 'write')` in `nextWrite` that killed the process
// (porsager/postgres#1154, #1066, #1208; fixes proposed in #1168, #1176, #1209, none released).
// The patch fails such statements with CONNECTION_CLOSED instead, and starts every new session
// clean: no buffered bytes, write timer, pending error or row count of the dead one carries over
// (each of those failed or corrupted the first statement of the next session).
//
// The published package carries the fix too: an app's own `postgres` is installed unpatched (npm
// runs no install script of a dependency), so `npm run build` bundles the patched driver into
// `dist/vendor/postgres.js` and points this module's `import postgres from 'postgres'` at that
// copy (scripts/build.mjs); the declarations keep the `postgres` package's types. All of this goes
// away once a postgres.js release fixes those issues: drop the patch and the build step, and
// depend on that release. test/store/connection-death.test.ts fails without the patch, and
// test/package/packed-install.test.ts checks that an installed leasehold, and an app's bundle of
// it, run the patched copy. One driver bug is worked around here instead: a transaction's
// callback outliving its connection (`endingWithConnection`, src/store/transactions.ts).

/**
 * Open a postgres.js pool for `url` (a `postgres://` connection string) or a
 * {@link ConnectTarget}.
 *
 * Notices are silenced (migrations use `if not exists`), bigint counts come back as numbers
 * (bigint ids are read as text by their statements),
 * timestamps as `Date`, statements time out after `statementTimeoutMs`, lock waits after
 * `lockTimeoutMs`, a session idle in a transaction is ended after `idleInTransactionTimeoutMs`, and
 * no plan is JIT-compiled (`jit = off`). A statement that
 * fails with `25006` (a write on a read-only server, as after a failover) replaces the whole pool
 * with a fresh one, at a bounded rate while the server keeps refusing (see `onReadOnly` and
 * `replaceOnReadOnly` in `failover.ts`); that statement still fails, and is
 * retried where leasehold retries store errors. Throws nothing itself; connection errors surface
 * on the first query.
 */
export function connect(url: string | ConnectTarget, options: ConnectOptions = {}): Sql {
  const session = sessionSettings(options);
  const pooled = options.pooler === 'transaction';
  // Behind a transaction-mode pooler only application_name goes in the startup packet (PgBouncer
  // tracks it per client); the rest is set in each transaction (see `settingEachTransaction`).
  const connection: Record<string, string> = pooled ? { application_name: session.application_name! } : session;
  const settings = {
    max: options.max ?? 10,
    idle_timeout: options.idleTimeoutS ?? 30,
    ...(options.maxLifetimeS !== undefined ? { max_lifetime: options.maxLifetimeS } : {}),
    ...(options.connectTimeoutS !== undefined ? { connect_timeout: options.connectTimeoutS } : {}),
    onnotice: () => {},
    // Type discovery runs a catalog query on every new connection whose failure postgres.js
    // leaves unhandled (a connection killed at that moment crashed the process); leasehold
    // uses only built-in types, so it is not needed.
    fetch_types: false,
    // A named prepared statement lives in one server session; behind a transaction-mode pooler
    // the next statement may reach another, where it does not exist.
    ...(pooled ? { prepare: false } : {}),
    connection,
    types: {
      // count(*) and other int8 results: safe as numbers far beyond any item count. An int8 *id*
      // (the outbox's message id, the one id sequence) passes 2^53, where a number rounds it to a
      // neighbour's: its statements read it as text (`id::text`) and bind it back with `::bigint`.
      bigint: {
        to: 20,
        from: [20],
        serialize: (x: number) => x.toString(),
        parse: (x: string) => Number(x),
      },
    },
  };
  const open =
    typeof url === 'string'
      ? (max = settings.max) => postgres(url, { ...settings, max }) as unknown as Sql
      : (max = settings.max) =>
          postgres({
            ...settings,
            max,
            host: url.host,
            port: url.port ?? 5432,
            database: url.database,
            username: url.user,
            ...(url.password !== undefined ? { password: url.password } : {}),
            ssl: url.ssl ?? false,
          }) as unknown as Sql;
  const pool = replaceOnReadOnly(open, options.onReadOnly);
  // A transaction's statements stop with its connection (see `endingWithConnection`).
  return endingWithConnection(pooled ? settingEachTransaction(pool, session) : pool);
}

/**
 * Whether `sql` is a pool in pooler mode (`pooler: 'transaction'`), whose statements are parsed
 * and planned by the server at every call (no named prepared statement: docs/development.md,
 * "Behind a transaction-mode pooler every statement is planned"). The hottest statements then go
 * through server-side functions, whose plans each server session keeps.
 */
export function plansEachStatement(sql: Sql): boolean {
  return (sql as { options?: { prepare?: boolean } }).options?.prepare === false;
}

/** The server settings of a pool's sessions, by name, as `connect` applies them. */
function sessionSettings(options: ConnectOptions): Record<string, string> {
  const s: Record<string, string> = { application_name: options.applicationName ?? 'leasehold' };
  if (options.schema) s.search_path = options.schema;
  s.statement_timeout = String(options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS);
  s.lock_timeout = String(options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS);
  s.idle_in_transaction_session_timeout = String(options.idleInTransactionTimeoutMs ?? DEFAULT_IDLE_IN_TRANSACTION_MS);
  // No JIT compilation (docs/design.md, "Database connections"): leasehold's statements run in
  // milliseconds, and a server with JIT compiles any plan whose estimate passes jit_above_cost
  // (100,000 by default) for tens of milliseconds to seconds, every time it runs.
  s.jit = 'off';
  return s;
}

/** A SQL string literal of `value` (standard_conforming_strings, on since PostgreSQL 9.1). */
const literal = (value: string) => `'${value.replaceAll("'", "''")}'`;

/**
 * `pool` whose every transaction (`begin`, with or without options) first sets the pool's
 * settings but `application_name` for itself alone: one `select set_config(name, value, true), …`
 * (`SET LOCAL`), without parameters, so postgres.js sends it in one message with no describe
 * round trip and pipelines the transaction's first statement behind it. The settings end with
 * the transaction, so the server session the pooler lends it goes back as it came.
 */
function settingEachTransaction(pool: Sql, session: Record<string, string>): Sql {
  const text = `select ${Object.entries(session)
    .filter(([name]) => name !== 'application_name')
    .map(([name, value]) => `set_config(${literal(name)}, ${literal(value)}, true)`)
    .join(', ')}`;
  type AnyFn = (...args: unknown[]) => unknown;
  const begin = (...args: unknown[]) => {
    const i = args.findIndex((a) => typeof a === 'function');
    if (i >= 0) {
      const fn = args[i] as (tx: Sql) => unknown;
      args[i] = async (tx: Sql) => {
        // Sent now, before the callback's first statement; awaited after it, so a failure of
        // its own is the one reported (the transaction is aborted and its statements fail too).
        const set = tx.unsafe(text);
        set.catch(() => {});
        try {
          const result = await fn(tx);
          await set;
          return result;
        } catch (e) {
          await set;
          throw e;
        }
      };
    }
    return (pool.begin as unknown as AnyFn)(...args);
  };
  return new Proxy(pool, {
    get: (target, prop) => (prop === 'begin' ? begin : Reflect.get(target, prop)),
  });
}
