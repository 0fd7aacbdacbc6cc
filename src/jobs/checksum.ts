import { createHash } from 'node:crypto';
import { constants, type Dirent } from 'node:fs';
import { open, readdir, readlink, realpath, stat, type FileHandle } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { z } from 'zod';
import { PermanentItemError, type ItemInput } from '../batch/index.js';
import { defineJob, InvalidParamsError } from './job.js';

/** Output of one `checksum` item. */
export interface ChecksumOutput {
  /** Hex SHA-256 of the file's bytes. */
  sha256: string;
  /** File size in bytes. */
  bytes: number;
}

/** Whether `path` is `root` or lies below it (both absolute, real paths). */
export function isUnder(path: string, root: string): boolean {
  const rel = relative(root, path);
  // `..name` is a legitimate name below root; only `..` itself or `../…` climbs out.
  return rel === '' || (rel !== '..' && !rel.startsWith('..' + sep) && !isAbsolute(rel));
}

/**
 * Every regular file under `root` as an item keyed by its path relative to `root` (with `/`),
 * listed one folder at a time (names in code-unit order, a folder's files before its
 * subfolders), so a start streams them into its insert instead of holding the whole tree.
 * Links are never followed: a symlinked file or folder is not an item.
 * @throws {InvalidParamsError} a folder cannot be listed (refused rather than skipped: it hides items).
 */
async function* walk(root: string): AsyncGenerator<ItemInput> {
  const folders: { path: string; rel: string }[] = [{ path: root, rel: '' }];
  while (folders.length > 0) {
    const { path, rel } = folders.pop()!;
    let entries: Dirent[];
    try {
      entries = await readdir(path, { withFileTypes: true });
    } catch (e) {
      throw new InvalidParamsError('params.dir', `cannot list ${rel || '.'}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const sub: { path: string; rel: string }[] = [];
    for (const e of entries) {
      const key = rel ? `${rel}/${e.name}` : e.name;
      if (e.isFile()) yield { key };
      else if (e.isDirectory()) sub.push({ path: join(path, e.name), rel: key });
    }
    for (let i = sub.length - 1; i >= 0; i--) folders.push(sub[i]);
  }
}

/**
 * The example job: one item per regular file under `params.dir`, keyed by its path relative
 * to `dir` (with `/`), output `{ sha256, bytes }`. `dir` must lie under an allowed root
 * ({@link JobContext.allowedRoots}); symbolic links are not followed, neither while listing
 * nor when reading, so nothing outside `dir` is read. A file that vanished, became unreadable
 * or was replaced by a link fails its item with a message saying so.
 */
export const checksum = defineJob<{ dir: string }, ChecksumOutput>({
  name: 'checksum',
  description: 'SHA-256 and size of every regular file under params.dir',
  params: z.object({ dir: z.string().min(1, 'must be a non-empty path') }).strict(),
  parallel: 4,
  async expand(params, ctx) {
    let dir: string;
    try {
      dir = await realpath(resolve(params.dir));
    } catch {
      throw new InvalidParamsError('params.dir', `${params.dir} does not exist`);
    }
    const roots = await Promise.all(ctx.allowedRoots.map((r) => realpath(r).catch(() => resolve(r))));
    if (!roots.some((root) => isUnder(dir, root))) {
      const via = dir === resolve(params.dir) ? '' : ` (it resolves to ${dir})`;
      throw new InvalidParamsError('params.dir', `${params.dir}${via} is not under an allowed root (${roots.join(', ')})`);
    }
    if (!(await stat(dir)).isDirectory()) {
      throw new InvalidParamsError('params.dir', `${params.dir} is not a directory`);
    }
    // Listed while the batch starts: the start refuses more than its item count limit.
    return { items: walk(dir), params: { dir } };
  },
  async run(item) {
    const root = item.params.dir;
    const path = join(root, ...item.key.split('/'));
    // Open once, without following a link at the last step, then check what was opened: a
    // folder on the way swapped for a link between a check and the open cannot lead outside.
    let handle: FileHandle;
    try {
      handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ELOOP') {
        throw new PermanentItemError(`${item.key} is now a symbolic link; links are not followed`);
      }
      throw fileError(item.key, e);
    }
    try {
      const info = await handle.stat();
      if (!info.isFile()) throw new PermanentItemError(`${item.key} is no longer a regular file`);
      const real = await openedPath(handle, path);
      if (!isUnder(real, root)) throw new PermanentItemError(`${item.key} resolves outside ${root}; links are not followed`);
      const hash = createHash('sha256');
      let bytes = 0;
      // A stream made with an already-aborted signal emits an 'error' nobody listens to yet, and
      // Node 20 ends the process with it; the signal may have aborted during the awaits above.
      if (item.signal.aborted) throw new Error(`${item.key}: reading was aborted`);
      try {
        for await (const chunk of handle.createReadStream({ signal: item.signal, autoClose: false })) {
          bytes += (chunk as Buffer).length;
          hash.update(chunk as Buffer);
        }
      } catch (e) {
        throw fileError(item.key, e);
      }
      return { sha256: hash.digest('hex'), bytes };
    } finally {
      await handle.close().catch(() => {});
    }
  },
});

/**
 * The real path of an open file: the kernel's own record of it on Linux (`/proc/self/fd`), so
 * it is the file actually opened; elsewhere the path's real path, checked to be the same file.
 */
async function openedPath(handle: FileHandle, path: string): Promise<string> {
  try {
    return await readlink(`/proc/self/fd/${handle.fd}`);
  } catch {
    const real = await realpath(path);
    const [a, b] = await Promise.all([handle.stat(), stat(real)]);
    if (a.dev !== b.dev || a.ino !== b.ino) throw new PermanentItemError(`${path} changed while it was opened`);
    return real;
  }
}

function fileError(key: string, e: unknown): Error {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === 'ENOENT') return new PermanentItemError(`${key} vanished (no such file)`);
  if (code === 'EACCES' || code === 'EPERM') return new PermanentItemError(`${key} is not readable (permission denied)`);
  if (code === 'ABORT_ERR') return new Error(`${key}: reading was aborted`);
  return new Error(`${key} could not be read: ${(e as Error)?.message ?? e}`);
}
