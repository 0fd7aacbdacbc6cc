// The checksum job's file work (./checksum.ts defines the job): listing a folder into items when
// a batch starts, hashing one file per item. Loaded on a start's or an item's first use.
import { createHash } from 'node:crypto';
import { close, constants, fstat, open, read, type Dirent } from 'node:fs';
import { readdir, readlink, realpath, stat } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { promisify } from 'node:util';
import { PermanentItemError } from '../batch/errors.js';
import type { ItemInput } from '../batch/types.js';
import { InvalidParamsError } from './errors.js';
import type { JobContext, JobItem } from './job.js';

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
      throw new InvalidParamsError(
        'params.dir',
        `cannot list ${rel || '.'}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
      );
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
 * The items of a `checksum` start: `params.dir` resolved (it must be a folder under an allowed
 * root), listed lazily by {@link walk}.
 * @throws {InvalidParamsError} `dir` does not exist, is not a folder or is not under an allowed root.
 */
export async function listFiles(
  params: { dir: string },
  ctx: JobContext,
): Promise<{ items: AsyncGenerator<ItemInput>; params: { dir: string } }> {
  let dir: string;
  try {
    dir = await realpath(resolve(params.dir));
  } catch {
    throw new InvalidParamsError('params.dir', `${params.dir} does not exist`);
  }
  const roots = await Promise.all(ctx.allowedRoots.map((r) => realpath(r).catch(() => resolve(r))));
  if (!roots.some((root) => isUnder(dir, root))) {
    const via = dir === resolve(params.dir) ? '' : ` (it resolves to ${dir})`;
    throw new InvalidParamsError(
      'params.dir',
      `${params.dir}${via} is not under an allowed root (${roots.join(', ')}; LEASEHOLD_ALLOWED_ROOTS sets them, ` +
        'and `leasehold dev --demo DIR` allows DIR too)',
    );
  }
  if (!(await stat(dir)).isDirectory()) {
    throw new InvalidParamsError('params.dir', `${params.dir} is not a directory`);
  }
  // Listed while the batch starts: the start refuses more than its item count limit.
  return { items: walk(dir), params: { dir } };
}

/** SHA-256 and size of one `checksum` item's file, read without following links. */
export async function hashFile(item: JobItem<{ dir: string }>): Promise<ChecksumOutput> {
  const root = item.params.dir;
  const path = join(root, ...item.key.split('/'));
  // Open once, without following a link at the last step, then check what was opened: a
  // folder on the way swapped for a link between a check and the open cannot lead outside.
  let fd: number;
  try {
    fd = await fsOpen(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ELOOP') {
      throw new PermanentItemError(`${item.key} is now a symbolic link; links are not followed`);
    }
    throw fileError(item.key, e);
  }
  try {
    const [info, real] = await Promise.all([fsFstat(fd), openedPath(fd, path)]);
    if (!info.isFile()) throw new PermanentItemError(`${item.key} is no longer a regular file`);
    if (!isUnder(real, root)) throw new PermanentItemError(`${item.key} resolves outside ${root}; links are not followed`);
    return await hashOpened(fd, info.size, item.key, item.signal);
  } finally {
    await fsClose(fd).catch(() => {});
  }
}

// The descriptor calls of node:fs rather than FileHandle: an item is a handful of calls on a
// small file, and FileHandle's own bookkeeping cost about a third of an item's time.
const fsOpen = promisify(open);
const fsFstat = promisify(fstat);
const fsRead = promisify(read);
const fsClose = promisify(close);

/** Largest read of one `checksum` item, bytes: a file up to this size is read in one call. */
const READ_BYTES = 1024 * 1024;

/**
 * SHA-256 and size of open regular file `fd` of about `size` bytes (its fstat size), read from
 * the start into one buffer of at most {@link READ_BYTES}: a small file costs one read. Like
 * Node's own `readFile`, a short read ends the file.
 */
async function hashOpened(fd: number, size: number, key: string, signal: AbortSignal): Promise<ChecksumOutput> {
  const hash = createHash('sha256');
  // One byte more than the size, so the read that reaches the end is short and ends the loop.
  const buffer = Buffer.allocUnsafe(Math.min(size + 1, READ_BYTES));
  let bytes = 0;
  for (;;) {
    if (signal.aborted) throw new Error(`${key}: reading was aborted`);
    let bytesRead: number;
    try {
      ({ bytesRead } = await fsRead(fd, buffer, 0, buffer.length, bytes));
    } catch (e) {
      throw fileError(key, e);
    }
    hash.update(buffer.subarray(0, bytesRead));
    bytes += bytesRead;
    if (bytesRead < buffer.length) return { sha256: hash.digest('hex'), bytes };
  }
}

/**
 * The real path of open file `fd`: the kernel's own record of it on Linux (`/proc/self/fd`), so
 * it is the file actually opened; elsewhere the path's real path, checked to be the same file.
 */
async function openedPath(fd: number, path: string): Promise<string> {
  try {
    return await readlink(`/proc/self/fd/${fd}`);
  } catch {
    const real = await realpath(path);
    const [a, b] = await Promise.all([fsFstat(fd), stat(real)]);
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
