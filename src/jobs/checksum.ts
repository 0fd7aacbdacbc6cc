import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, readdir, realpath, stat } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { PermanentItemError } from '../batch/index.js';
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
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

async function walk(root: string, dir: string, out: string[], limit: number): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    // A folder that cannot be listed hides items: refuse the start rather than skip them.
    const where = relative(root, dir) || '.';
    throw new InvalidParamsError('params.dir', `cannot list ${where}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  for (const e of entries) {
    const full = join(dir, e.name);
    // Links are never followed: a symlinked file or folder is not an item.
    if (e.isDirectory()) await walk(root, full, out, limit);
    else if (e.isFile()) out.push(relative(root, full).split(sep).join('/'));
    if (out.length > limit) return;
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
    const keys: string[] = [];
    await walk(dir, dir, keys, ctx.maxItems);
    if (keys.length > ctx.maxItems) {
      throw new InvalidParamsError('params.dir', `holds more than ${ctx.maxItems} files; at most ${ctx.maxItems} items are allowed (LEASEHOLD_MAX_ITEMS)`);
    }
    keys.sort();
    return { items: keys.map((key) => ({ key })), params: { dir } };
  },
  async run(item) {
    const root = item.params.dir;
    const path = join(root, ...item.key.split('/'));
    let info;
    try {
      info = await lstat(path);
    } catch (e) {
      throw fileError(item.key, e);
    }
    if (info.isSymbolicLink()) throw new PermanentItemError(`${item.key} is now a symbolic link; links are not followed`);
    if (!info.isFile()) throw new PermanentItemError(`${item.key} is no longer a regular file`);
    // A parent folder replaced by a link would lead outside dir: compare real paths.
    const real = await realpath(path).catch((e) => {
      throw fileError(item.key, e);
    });
    if (!isUnder(real, root)) throw new PermanentItemError(`${item.key} resolves outside ${root}; links are not followed`);
    const hash = createHash('sha256');
    let bytes = 0;
    try {
      await pipeline(
        createReadStream(real, { signal: item.signal }),
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            bytes += chunk.length;
            hash.update(chunk);
          }
        },
      );
    } catch (e) {
      throw fileError(item.key, e);
    }
    return { sha256: hash.digest('hex'), bytes };
  },
});

/** A vanished or unreadable file fails its item at once: retrying cannot help. */
function fileError(key: string, e: unknown): Error {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === 'ENOENT') return new PermanentItemError(`${key} vanished (no such file)`);
  if (code === 'EACCES' || code === 'EPERM') return new PermanentItemError(`${key} is not readable (permission denied)`);
  if (code === 'ABORT_ERR') return new Error(`${key}: reading was aborted`);
  return new Error(`${key} could not be read: ${(e as Error)?.message ?? e}`);
}
