// The built-in `checksum` job (the README's demo): its definition. Listing a folder and hashing
// a file, the work itself, are ./checksum-files.ts, loaded on a start's or an item's first use.
import * as z from '../zod.js';
import type { ChecksumOutput } from './checksum-files.js';
import { defineJob } from './job.js';

export type { ChecksumOutput } from './checksum-files.js';

/**
 * Default `parallel` of the `checksum` job: items it hashes at once per run. Reads wait on I/O,
 * so 64 keep the thread pool busy while moves are in flight; 16 left the run waiting on its
 * round trips (bench: 2.5–3.0× plain hashing at 16, 1.6–1.9× at 64). Each item reads into one
 * buffer of at most 1 MiB (`READ_BYTES`, ./checksum-files.ts), so a run holds at most 64 MiB of them.
 */
export const CHECKSUM_PARALLEL = 64;

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
  params: z.strictObject({ dir: z.string().check(z.minLength(1, 'must be a non-empty path')) }),
  // I/O-bound: most of an item is waiting on the file system, so many run at once.
  parallel: CHECKSUM_PARALLEL,
  // Listing and reading load on first use (./checksum-files.ts): a worker's cold start runs
  // neither, and a function that never starts or runs a checksum batch never loads them.
  async expand(params, ctx) {
    return (await import('./checksum-files.js')).listFiles(params, ctx);
  },
  async run(item) {
    return (await import('./checksum-files.js')).hashFile(item);
  },
});
