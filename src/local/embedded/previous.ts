// Previous servers on the embedded data folder: found by their pid and owner files, stopped
// when they are ours to stop (part of src/local/embedded/index.ts).
import { execFile } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { platform } from 'node:os';
import { join, parse } from 'node:path';
import { promisify } from 'node:util';
import { EmbeddedDataDirInUseError, OWNER_FILE } from './common.js';

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
export async function clearPreviousServer(dir: string, stopTimeoutMs: number, log: (line: string) => void): Promise<void> {
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
