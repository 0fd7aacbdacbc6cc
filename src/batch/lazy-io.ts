// A run's doors to the source readers and the results writer, which only batches with a source or
// a results target use: each imports its module on first call, so a worker's cold start does not
// load them (esbuild places whole files by static reachability: docs/design.md, "Cold starts
// and code splitting"). Same signatures and errors as the functions they stand for.
import type { S3Client } from '@aws-sdk/client-s3';
import type { Sql } from '../store/connect.js';
import type { ResultsSettings } from './results.js';
import type { ReadSettings, SourcePage } from './source-page.js';
import type { SourceCursor, StoredSource } from './types.js';

/**
 * `readPage` of src/batch/source.ts, loaded on first call.
 * @throws {SourceReadError} the source cannot be read into items (others as they are).
 */
export async function readPage(
  client: S3Client,
  source: StoredSource,
  cursor: SourceCursor | null,
  settings: ReadSettings,
): Promise<SourcePage> {
  const { readPage: read } = await import('./source.js');
  return read(client, source, cursor, settings);
}

/**
 * `writeResultsAfterFinish` of src/batch/results.ts, loaded on first call: like it, never throws
 * (a module that fails to load is reported to `onError` too).
 */
export async function writeResultsAfterFinish(
  sql: Sql,
  client: S3Client,
  batchId: string,
  onError: (e: unknown) => void,
  settings?: ResultsSettings & { signal?: AbortSignal },
): Promise<void> {
  let results: typeof import('./results.js');
  try {
    results = await import('./results.js');
  } catch (e) {
    onError(e);
    return;
  }
  await results.writeResultsAfterFinish(sql, client, batchId, onError, settings);
}
