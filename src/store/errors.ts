import { LeaseholdError } from '../errors.js';
// Which database errors mean the connection, not the statement, failed, and which of those a
// caller may simply try again (docs/design.md, "Database connections"). Read by SQLSTATE (and
// postgres.js's client codes), never by class: errors of another copy of the driver count too.

const codeOf = (error: unknown): string | undefined => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
};

/**
 * SQLSTATEs and client error codes that mean the connection, not the statement, failed: a retry
 * on another (new) connection may succeed.
 */
const CONNECTION_CODES = new Set([
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ECONNREFUSED',
  'ENOTCONN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  // admin_shutdown, crash_shutdown, cannot_connect_now
  '57P01',
  '57P02',
  '57P03',
  // read_only_sql_transaction: the server is no longer the writer (a failover); the pool that
  // met it has been replaced (see `connect`), so a retry reaches the new writer.
  '25006',
]);

/**
 * Whether `error` is an RDS IAM login refused for its rate (SQLSTATE `28000`
 * invalid_authorization_specification with "too many competing requests"): RDS limits how many
 * IAM authentications it serves at once, and refuses the rest before the session starts. Any
 * other `28000` (a role that may not log in, a `pg_hba.conf` reject) is not: trying again cannot
 * help.
 */
export function isIamLoginThrottled(error: unknown): boolean {
  if (codeOf(error) !== '28000') return false;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && /too many competing requests/i.test(message);
}

/**
 * Whether `error` is a failure of the connection (reset, closed, server shutting the session
 * down, SQLSTATE class 08, or a server that turned read-only, `25006`) rather than of the
 * statement. A connection refused at login (`53300`, an IAM login refused for its rate) is
 * {@link isConnectionRefused} instead.
 */
export function isConnectionError(error: unknown): boolean {
  const code = codeOf(error);
  if (code === undefined) return false;
  return CONNECTION_CODES.has(code) || /^08[0-9A-Z]{3}$/.test(code);
}

/**
 * SQLSTATEs and client codes of a connection the server (or the network) refused before any
 * statement ran on it: `53300` too_many_connections (the database's, a role's or the server's
 * limit), `57P03` cannot_connect_now (starting up, or `reserved_connections` reached),
 * `ECONNREFUSED` and postgres.js's `CONNECT_TIMEOUT`; and an IAM login refused for its rate
 * ({@link isIamLoginThrottled}). Trying again later can succeed, and is safe: nothing ran.
 */
const REFUSED_CODES = new Set(['53300', '57P03', 'ECONNREFUSED', 'CONNECT_TIMEOUT']);

/** Whether `error` is a refused connection (see `retryRefusedConnection` in `src/runtime/db.ts`). */
export function isConnectionRefused(error: unknown): boolean {
  const code = codeOf(error);
  return (code !== undefined && REFUSED_CODES.has(code)) || isIamLoginThrottled(error);
}

/**
 * Whether `error` is `55P03` lock_not_available: a statement gave up waiting for a lock after its
 * `lock_timeout` (another session holds the row or table). Nothing it did stays; trying again
 * once that session has ended can succeed.
 */
export function isLockTimeout(error: unknown): boolean {
  return codeOf(error) === '55P03';
}

/**
 * Whether `error` is one a caller should answer "try again soon" to: a connection error, a
 * refused connection or a lock timeout (see the functions above).
 */
export function isRetryableStoreError(error: unknown): boolean {
  return isConnectionError(error) || isConnectionRefused(error) || isLockTimeout(error);
}

/**
 * Whether `error` is a pooler's refusal of a setting in the startup packet: PgBouncer answers a
 * client that sends one it does not track (`statement_timeout`, `search_path`, …) with
 * `08P01` "unsupported startup parameter" and closes the connection. Every new connection of
 * that pool meets it again: it is a setting to change, never a fault to retry.
 */
export function isUnsupportedStartupParameter(error: unknown): boolean {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' && /unsupported startup parameter/i.test(message);
}

/**
 * A connection pooler stands between the pool and the server, and the pool was not made for it:
 * it refused a setting of the startup packet ({@link isUnsupportedStartupParameter}). Code
 * `pooler_mode`; `cause` is the pooler's error. The pool that met it fails every later statement
 * with this same error at once, opening no connection (docs/design.md, "Database connections":
 * poolers). Set `LEASEHOLD_DB_POOLER=transaction` (`ConnectOptions.pooler: 'transaction'`).
 */
export class PoolerModeError extends LeaseholdError {
  constructor(cause: unknown) {
    super(
      'pooler_mode',
      `a connection pooler refused this pool's settings (${(cause as Error)?.message ?? String(cause)}): ` +
        'set LEASEHOLD_DB_POOLER=transaction (ConnectOptions.pooler) to connect through a transaction-mode pooler',
      { cause },
    );
  }
}
