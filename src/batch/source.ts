// Items from S3 (docs/design.md, "Sources and results"): what a source is, the checks a start
// makes before it stores anything, and the reading of one page from a cursor. A page is a few
// ListObjectsV2 calls (continuation tokens), one byte range of an object (GetObject Range), or
// one page of an inventory report's part (source-manifest.ts),
// cut after its last complete line or CSV record: the cursor is the byte after it, so memory per
// page is bounded by the range, however large the object.
// This file is the face: the start's checks and readPage; a prefix's listing is
// source-listing.ts, an object's ranges source-object.ts, its lines source-jsonl.ts and
// source-csv.ts, and the page and its error source-page.ts.
import type { S3Client } from '@aws-sdk/client-s3';
import { LeaseholdError } from '../errors.js';
import { discardBody, s3Fault } from './s3.js';
import { readListing } from './source-listing.js';
import { MAX_MANIFEST_BYTES, parseManifest, readManifestPage } from './source-manifest.js';
import { readRange } from './source-object.js';
import { sdk, SourceReadError, type ObjectCursor, type ObjectSource, type ReadSettings, type SourcePage } from './source-page.js';
import type { BatchSource, ResultsTarget, SourceCursor, StoredSource } from './types.js';

export type {
  BatchSource,
  CsvDelimiter,
  CsvOptions,
  ManifestSourceSpec,
  StoredManifestSource,
  ListChain,
  ResultsTarget,
  SourceCursor,
  SourceEncoding,
  StoredSource,
} from './types.js';
export { CSV_DELIMITERS } from './source-csv.js';
export { compareKeys, LIST_CHAINS } from './source-listing.js';
export { SourceReadError, SourceStreams, type ReadSettings, type SourcePage } from './source-page.js';

/**
 * A source or results target refused at start, before anything is stored: `invalid_source` (400:
 * an empty object, no object under the prefix), `source_not_found` (404: no such bucket or key),
 * `source_access_denied` (403), `source_unavailable` (503: S3 did not answer).
 */
export class SourceError extends LeaseholdError {
  constructor(code: 'invalid_source' | 'source_not_found' | 'source_access_denied' | 'source_unavailable', message: string) {
    super(code, message);
  }
}

const where = (s: BatchSource['s3'] | ResultsTarget['s3']) =>
  `s3://${s.bucket}/${'key' in s ? s.key : 'manifest' in s ? s.manifest : s.prefix}`;

/** The start's error for a failed S3 call on `what`. */
function startError(e: unknown, what: string, field: string): SourceError {
  const f = s3Fault(e);
  if (f.denied) return new SourceError('source_access_denied', `${field}: access to ${what} is denied (${f.name})`);
  if (f.missing) {
    // A bucket is made beforehand: say how, for the local S3 at least.
    const make = what.startsWith('bucket ') ? `; make it first (locally: leasehold s3 mb ${what.slice(7)})` : '';
    return new SourceError('source_not_found', `${field}: ${what} does not exist (${f.name})${make}`);
  }
  if (f.status !== undefined && f.status < 500)
    return new SourceError('invalid_source', `${field}: ${what}: ${f.name} (HTTP ${f.status})`);
  return new SourceError('source_unavailable', `${field}: S3 did not answer for ${what}: ${(e as Error)?.message ?? String(e)}`);
}

/**
 * The checks a start makes, before it stores anything (docs/design.md, "Sources and results"):
 * the bucket exists and may be read (HeadBucket); a prefix holds at least one object; an object
 * exists (HeadObject) and is not empty; an inventory report's manifest describes a CSV report
 * (checkManifest). Answers the source to store, with the object's size and
 * ETag (every range read later must match that ETag) and, on a versioned bucket, its VersionId
 * (every range read later reads that version).
 * @throws {SourceError} naming what was wrong.
 */
export async function checkSource(client: S3Client, source: BatchSource): Promise<StoredSource> {
  const { HeadBucketCommand, HeadObjectCommand, ListObjectsV2Command } = await sdk();
  const s = source.s3;
  try {
    await client.send(new HeadBucketCommand({ Bucket: s.bucket }));
  } catch (e) {
    throw startError(e, `bucket ${s.bucket}`, 'source.s3.bucket');
  }
  if ('manifest' in s) return checkManifest(client, s);
  if (!('key' in s)) {
    let listed;
    try {
      listed = await client.send(
        new ListObjectsV2Command({ Bucket: s.bucket, Prefix: s.prefix, MaxKeys: 1, EncodingType: 'url' }),
      );
    } catch (e) {
      throw startError(e, where(s), 'source.s3.prefix');
    }
    if (!listed.KeyCount && !(listed.Contents?.length ?? 0)) {
      throw new SourceError('invalid_source', `source.s3.prefix: no object under ${where(s)}`);
    }
    return { s3: { bucket: s.bucket, prefix: s.prefix } };
  }
  let head;
  try {
    head = await client.send(new HeadObjectCommand({ Bucket: s.bucket, Key: s.key }));
  } catch (e) {
    throw startError(e, where(s), 'source.s3.key');
  }
  const size = head.ContentLength ?? 0;
  if (size === 0) throw new SourceError('invalid_source', `source.s3.key: ${where(s)} is empty (0 bytes): it holds no items`);
  const object: ObjectSource = { bucket: s.bucket, key: s.key, format: s.format, size, etag: head.ETag ?? '' };
  if (s.keyColumn !== undefined) object.keyColumn = s.keyColumn;
  // A versioned bucket: every range reads the version seen now (docs/design.md, "Sources and results").
  if (head.VersionId) object.versionId = head.VersionId;
  if (s.delimiter !== undefined) object.delimiter = s.delimiter;
  if (s.header !== undefined) object.header = s.header;
  if (s.quote !== undefined) object.quote = s.quote;
  return { s3: object };
}

/**
 * An inventory report's checks at start: its manifest.json is read (at most
 * {@link MAX_MANIFEST_BYTES}) and must describe a CSV report (parseManifest); its columns and
 * parts are stored with the batch, so no run reads the manifest again and none lists anything.
 * @throws {SourceError} naming what was wrong (field `source.s3.manifest`).
 */
async function checkManifest(client: S3Client, s: { bucket: string; manifest: string }): Promise<StoredSource> {
  const { GetObjectCommand } = await sdk();
  let text: string;
  try {
    const r = await client.send(new GetObjectCommand({ Bucket: s.bucket, Key: s.manifest }));
    if ((r.ContentLength ?? 0) > MAX_MANIFEST_BYTES) {
      discardBody(r.Body);
      throw new SourceError(
        'invalid_source',
        `source.s3.manifest: ${where(s)} is ${r.ContentLength} bytes; the limit is ${MAX_MANIFEST_BYTES}`,
      );
    }
    text = (await r.Body?.transformToString('utf-8')) ?? '';
  } catch (e) {
    if (e instanceof SourceError) throw e;
    throw startError(e, where(s), 'source.s3.manifest');
  }
  const m = parseManifest(text, where(s));
  if ('error' in m) throw new SourceError('invalid_source', `source.s3.manifest: ${m.error}`);
  return { s3: { bucket: s.bucket, manifest: s.manifest, columns: m.columns, parts: m.parts } };
}

/**
 * The checks of a results target at start: its bucket exists and is reachable (HeadBucket).
 * @throws {SourceError} naming what was wrong (field `results.s3.bucket`).
 */
export async function checkResults(client: S3Client, target: ResultsTarget): Promise<void> {
  const { HeadBucketCommand } = await sdk();
  try {
    await client.send(new HeadBucketCommand({ Bucket: target.s3.bucket }));
  } catch (e) {
    throw startError(e, `bucket ${target.s3.bucket}`, 'results.s3.bucket');
  }
}

/**
 * Read the page of `source` that starts at `cursor` (null: its first page). S3 errors that say
 * the source is gone or denied, or (416 `InvalidRange`) that an object is now shorter than
 * where reading stopped, become {@link SourceReadError}; others (a timeout, a 5xx) are
 * thrown as they are, for the reader to try again.
 * @throws {SourceReadError} the source cannot be read into items.
 */
export async function readPage(
  client: S3Client,
  source: StoredSource,
  cursor: SourceCursor | null,
  settings: ReadSettings,
): Promise<SourcePage> {
  try {
    const s = source.s3;
    if ('manifest' in s) return await readManifestPage(client, s, cursor, settings);
    if (!('key' in s)) return await readListing(client, s, cursor, settings);
    const c = (cursor ?? { offset: 0, line: 0, row: 0 }) as ObjectCursor;
    return await readRange(client, s, c, settings, cursor === null);
  } catch (e) {
    if (e instanceof SourceReadError) throw e;
    const f = s3Fault(e);
    if (f.denied || f.missing) {
      throw new SourceReadError(`${where(source.s3)} can no longer be read: ${f.name} (HTTP ${f.status ?? '?'})`);
    }
    // A range past the object's end: the object was rewritten shorter than what was read (S3
    // answers 416 before it compares the ETag), which no retry mends.
    if (f.badRange && 'key' in source.s3) {
      throw new SourceReadError(
        `${where(source.s3)} changed while it was read: it now ends before where reading stopped (${f.name}, HTTP ${f.status ?? '?'})`,
      );
    }
    throw e;
  }
}
