// Debian's PgBouncer in transaction mode in front of a test PostgreSQL, as a child process with a
// generated configuration in a temp folder (docs/design.md, "Database connections": poolers).
//
// Every database name is routed to the server (`* = host=… port=…`), so a pool may name any
// database of it; the admin console (database `pgbouncer`) answers `SHOW STATS`, `SHOW SERVERS`
// and the like. No startup parameter is ignored (`ignore_startup_parameters` stays empty): a
// client that sends a setting PgBouncer does not track (`statement_timeout`, `search_path`, …)
// is refused with "unsupported startup parameter", so a pool that is not made for a pooler fails
// loudly instead of losing its settings. PgBouncer 1.18 (Debian 12) keeps no prepared statements
// across server sessions either: a named one made in one session is missing in the next.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect as netConnect, createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { installed, PGBOUNCER } from './programs.js';

/** Where Debian's package installs it; `LEASEHOLD_TEST_PGBOUNCER` names another binary. */
export const PGBOUNCER_BINARY = PGBOUNCER.path;

/** A running PgBouncer from {@link startPgbouncer}. */
export interface Pgbouncer {
  /** Its port on 127.0.0.1. */
  port: number;
  /** The server's URL with PgBouncer's host and port in its place (and `database`, when given). */
  url(database?: string): string;
  /** URL of the admin console (database `pgbouncer`, the server URL's user as admin). */
  adminUrl: string;
  /** The last lines it logged (for a failed start or test). */
  log(): string;
  /** Stop it (SIGTERM: client and server connections are closed at once) and remove its folder. */
  stop(): Promise<void>;
}

/** Options of {@link startPgbouncer}. */
export interface PgbouncerOptions {
  /** Server sessions per database and user (`default_pool_size`). Default 20. */
  poolSize?: number;
  /** Most client connections (`max_client_conn`). Default 1,000. */
  maxClients?: number;
  /**
   * `server_check_delay`, s: a server connection idle longer than this gets PgBouncer's
   * `server_check_query` (`select 1`) before it is lent again. Default 0, checked every time (see
   * the configuration below): each lending then costs the server one transaction more, which a
   * count of server transactions (`pg_stat_database`) must not include. PgBouncer's own default
   * is 30.
   */
  serverCheckDelayS?: number;
}

/** Whether PgBouncer is installed where {@link startPgbouncer} looks. */
export function pgbouncerInstalled(): boolean {
  return installed(PGBOUNCER);
}

/**
 * Start PgBouncer with `pool_mode = transaction` on a free port of 127.0.0.1 in front of the
 * server of `serverUrl` (a `postgres://` URL with user and, if the server wants one, password).
 * Clients are trusted (`auth_type = trust`); PgBouncer logs in to the server as the client's
 * user with the password from its `auth_file`, which holds the URL's. Run as root (CI), it runs as
 * user `postgres` (PgBouncer refuses to run as root).
 * @throws {Error} PgBouncer is not installed (`apt-get install pgbouncer`), or it did not start
 *   listening within 10 s (the message carries its log).
 */
export async function startPgbouncer(serverUrl: string, options: PgbouncerOptions = {}): Promise<Pgbouncer> {
  if (!pgbouncerInstalled()) throw new Error(`PgBouncer is not installed at ${PGBOUNCER_BINARY} (apt-get install -y pgbouncer)`);
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username || userInfo().username);
  const password = decodeURIComponent(server.password);
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-pgbouncer-'));
  // The folder is 0700 from mkdtemp; as root PgBouncer runs as `postgres`, which must read it.
  await chmod(dir, 0o755);
  const port = await freePort();
  const quote = (s: string) => `"${s.replaceAll('"', '""')}"`;
  await writeFile(join(dir, 'users.txt'), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 });
  const ini = [
    '[databases]',
    `* = host=${server.hostname} port=${server.port || 5432}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${join(dir, 'users.txt')}`,
    `admin_users = ${user}`,
    `stats_users = ${user}`,
    'pool_mode = transaction',
    `default_pool_size = ${options.poolSize ?? 20}`,
    `max_client_conn = ${options.maxClients ?? 1000}`,
    // Tests end servers' sessions (terminated backends, dropped databases): a server connection
    // that was closed is found at once rather than handed to a client.
    `server_check_delay = ${options.serverCheckDelayS ?? 0}`,
    'server_login_retry = 1',
    // No ignore_startup_parameters: refused, never ignored (see the module comment).
    'log_connections = 0',
    'log_disconnections = 0',
    '',
  ].join('\n');
  await writeFile(join(dir, 'pgbouncer.ini'), ini, { mode: 0o644 });

  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn(PGBOUNCER_BINARY, [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const keep = (chunk: Buffer) => {
    lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    if (lines.length > 200) lines.splice(0, lines.length - 200);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  const stop = async () => {
    if (!exited) child.kill('SIGTERM');
    await exit;
    await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 10_000;
  while (!(await accepts(port))) {
    if (exited || Date.now() > deadline) {
      await stop();
      throw new Error(`PgBouncer did not start listening on port ${port}:\n${lines.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = (database?: string) => {
    const u = new URL(serverUrl);
    u.hostname = '127.0.0.1';
    u.port = String(port);
    if (database !== undefined) u.pathname = `/${encodeURIComponent(database)}`;
    return u.toString();
  };
  return { port, url, adminUrl: url('pgbouncer'), log: () => lines.join('\n'), stop };
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

/** A TCP port the OS says is free on 127.0.0.1 now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}
