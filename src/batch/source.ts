// Items from S3 (docs/design.md, "Sources and results"): what a source is, the checks a start
// makes before it stores anything, and the reading of one page from a cursor. A page is a few
// ListObjectsV2 calls (continuation tokens) or one byte range of an object (GetObject Range),
// cut after its last complete line or CSV record: the cursor is the byte after it, so memory per
// page is bounded by the range, however large the object.
import type { S3Client } from '@aws-sdk/client-s3';
import { LeaseholdError } from '../errors.js';
import { INPUT_JSON, UNSTORABLE_ESCAPE, type ItemWithJson } from './items.js';
import { s3Fault } from './s3.js';
import type { BatchSource, ItemInput, ListChain, ResultsTarget, SourceCursor, StoredSource } from './types.js';

export type { BatchSource, ListChain, ResultsTarget, SourceCursor, StoredSource } from './types.js';

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

/**
 * A source that cannot be read into items (a line that is not JSON, a ragged CSV row, an object
 * that changed or disappeared while read): the batch ends `failed` with this `reason`, and
 * `line`, the object's first bad line (1-based), when known.
 */
export class SourceReadError extends Error {
  constructor(
    readonly reason: string,
    readonly line: number | null = null,
  ) {
    super(reason);
  }
}

/** Settings of reading. */
export interface ReadSettings {
  /** Largest JSON input of one item, bytes (`LEASEHOLD_MAX_INPUT_BYTES`, 65,536). */
  maxInputBytes: number;
  /** Bytes of an object one page reads (default 2 MiB; the first page a sixteenth of it, at least 64 KiB). */
  rangeBytes?: number;
  /** Objects of a prefix one page lists, at least (default 10,000; the first page 1,000). */
  pageObjects?: number;
  /**
   * JSON Lines: give the page's items as the JSON text of a store ({@link SourcePage.json})
   * rather than as `items` (default false). A reader's way: no object per line outlives its line,
   * so a page leaves little for the garbage collector to promote.
   */
  asJson?: boolean;
}

/** One page read from the source. */
export interface SourcePage {
  /** Its items; a JSON Lines item may carry its line as its input's JSON text ({@link INPUT_JSON}) instead of `input`. */
  items: ItemWithJson[];
  cursor: SourceCursor;
  /** The source is read to its end with this page. */
  done: boolean;
  /**
   * With `asJson` (JSON Lines), the items as the JSON text of `[{"k", "i"}, …]`, checked as a
   * start's items are, and their count; `items` is then empty.
   */
  json?: { text: string; count: number };
}

// The SDK and the CSV parser load on first use, not with the library.
const sdk = () => import('@aws-sdk/client-s3');

const where = (s: BatchSource['s3'] | ResultsTarget['s3']) =>
  'key' in s ? `s3://${s.bucket}/${s.key}` : `s3://${s.bucket}/${s.prefix}`;

/** The start's error for a failed S3 call on `what`. */
function startError(e: unknown, what: string, field: string): SourceError {
  const f = s3Fault(e);
  if (f.denied) return new SourceError('source_access_denied', `${field}: access to ${what} is denied (${f.name})`);
  if (f.missing) return new SourceError('source_not_found', `${field}: ${what} does not exist (${f.name})`);
  if (f.status !== undefined && f.status < 500)
    return new SourceError('invalid_source', `${field}: ${what}: ${f.name} (HTTP ${f.status})`);
  return new SourceError('source_unavailable', `${field}: S3 did not answer for ${what}: ${(e as Error)?.message ?? String(e)}`);
}

/**
 * The checks a start makes, before it stores anything (docs/design.md, "Sources and results"):
 * the bucket exists and may be read (HeadBucket); a prefix holds at least one object; an object
 * exists (HeadObject) and is not empty. Answers the source to store, with the object's size and
 * ETag (every range read later must match that ETag).
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
  if (!('key' in s)) {
    let listed;
    try {
      listed = await client.send(new ListObjectsV2Command({ Bucket: s.bucket, Prefix: s.prefix, MaxKeys: 1 }));
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
  return { s3: object };
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
 * the source is gone or denied become {@link SourceReadError}; others (a timeout, a 5xx) are
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
    if (!('key' in s)) return await readListing(client, s, cursor, settings);
    const c = (cursor ?? { offset: 0, line: 0, row: 0 }) as ObjectCursor;
    return await readRange(client, s, c, settings, cursor === null);
  } catch (e) {
    if (e instanceof SourceReadError) throw e;
    const f = s3Fault(e);
    if (f.denied || f.missing) {
      throw new SourceReadError(`${where(source.s3)} can no longer be read: ${f.name} (HTTP ${f.status ?? '?'})`);
    }
    throw e;
  }
}

/** Listing chains a prefix's listing is cut into after its first page (see {@link readListing}). */
export const LIST_CHAINS = 4;

/**
 * S3's order of keys: by their UTF-8 bytes, which is code point order. JavaScript's `<` orders
 * UTF-16 code units, which differs only where a surrogate (U+D800-DFFF, half of a character past
 * U+FFFF) meets a unit from U+E000: that pair is compared as code points would be. No copy.
 */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Surrogates above every unit from U+E000 (they stand for code points past U+FFFF).
      x += x >= 0xe000 ? -0x800 : 0x2000;
      y += y >= 0xe000 ? -0x800 : 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

/**
 * A page of a prefix's listing. The first page is one call from the prefix's start (at most
 * 1,000 objects, so work starts at once). After it the rest of the prefix is cut into
 * {@link LIST_CHAINS} disjoint key ranges, each listed by a chain of its own, all at once: one
 * chain of calls waits for each answer's continuation token, so its pace is a call's round trip
 * (on the local S3 about 30 ms per 1,000 keys). The cuts only balance the chains; every key lies
 * in exactly one range whatever they are, so no object is missed or read twice.
 */
async function readListing(
  client: S3Client,
  s: { bucket: string; prefix: string },
  cursor: SourceCursor | null,
  settings: ReadSettings,
): Promise<SourcePage> {
  let chains: ListChain[];
  let split = true;
  let alphabet: string | undefined;
  if (cursor === null) {
    chains = [{ after: '', token: null, until: null }];
    split = false;
  } else if ('token' in cursor) {
    chains = cursor.token === null ? [] : [{ after: '', token: cursor.token, until: null }];
  } else if ('chains' in cursor) {
    ({ chains, split, alphabet } = cursor);
  } else {
    throw new Error('an object cursor for a prefix source');
  }
  // A directory bucket (S3 Express One Zone, named `…--x-s3`) lists keys out of order and takes
  // no StartAfter: it is listed along one chain.
  if (!split && chains.length === 1 && chains[0].after !== '' && !s.bucket.endsWith('--x-s3')) {
    chains = await splitChain(client, s, chains[0], alphabet ?? '', LIST_CHAINS);
    split = true;
    alphabet = undefined;
  }
  const want = cursor === null ? Math.min(1000, settings.pageObjects ?? 1000) : (settings.pageObjects ?? 10_000);
  const each = Math.max(1, Math.ceil(want / Math.max(1, chains.length)));
  const listed = await Promise.all(chains.map((c) => listChain(client, s, c, each)));
  const items = listed.flatMap((l) => l.items);
  const next = listed.flatMap((l) => (l.chain ? [l.chain] : []));
  if (!split && next.length > 0) alphabet = alphabetOf(items.map((i) => i.key).map((k) => k.slice(s.prefix.length)));
  return {
    items,
    cursor: { chains: next, split, ...(alphabet === undefined ? {} : { alphabet }) },
    done: next.length === 0,
  };
}

/** List on along `chain` until `want` objects (or its range's end); answers them and the chain to go on with (null: it ended). */
async function listChain(
  client: S3Client,
  s: { bucket: string; prefix: string },
  chain: ListChain,
  want: number,
): Promise<{ items: ItemInput[]; chain: ListChain | null }> {
  const { ListObjectsV2Command } = await sdk();
  const items: ItemInput[] = [];
  let { after, token } = chain;
  for (;;) {
    const r = await client.send(
      new ListObjectsV2Command({
        Bucket: s.bucket,
        Prefix: s.prefix,
        MaxKeys: Math.min(1000, want - items.length),
        ContinuationToken: token ?? undefined,
        StartAfter: token === null && after !== '' ? after : undefined,
      }),
    );
    for (const o of r.Contents ?? []) {
      if (o.Key === undefined) continue;
      // Past the range: the next chain lists it.
      if (chain.until !== null && compareKeys(o.Key, chain.until) > 0) return { items, chain: null };
      items.push({ key: o.Key, input: { bucket: s.bucket, key: o.Key, size: o.Size ?? 0, etag: o.ETag ?? '' } });
      after = o.Key;
    }
    token = r.IsTruncated && r.NextContinuationToken ? r.NextContinuationToken : null;
    if (token === null) return { items, chain: null };
    if (items.length >= want) return { items, chain: { after, token, until: chain.until } };
  }
}

/** The printable ASCII characters of `keys` (after the prefix), sorted: the digits the cuts are written in. */
function alphabetOf(keys: string[]): string {
  const seen = new Set<number>();
  for (const k of keys) for (let i = 0; i < k.length; i++) seen.add(k.charCodeAt(i));
  return String.fromCharCode(...[...seen].filter((c) => c >= 0x20 && c <= 0x7e).sort((a, b) => a - b));
}

/**
 * Cut the rest of a listing, the keys after `chain.after`, into up to `n` chains. The last key is
 * estimated by one-key listings (a binary search per character, {@link lastKeyNear}); the cuts
 * are spaced evenly between the two keys as numbers written in `alphabet`. When there is no room
 * (the keys end near), the chain goes on alone.
 */
async function splitChain(
  client: S3Client,
  s: { bucket: string; prefix: string },
  chain: ListChain,
  alphabet: string,
  n: number,
): Promise<ListChain[]> {
  const last = await lastKeyNear(client, s, chain.after);
  const cuts = cutsBetween(chain.after, last, alphabet, n);
  if (cuts.length === 0) return [chain];
  return [
    { ...chain, until: cuts[0] },
    ...cuts.map((after, i) => ({ after, token: null, until: i + 1 < cuts.length ? cuts[i + 1] : chain.until })),
  ];
}

/** The first key of the prefix after `after`, or null (a one-key listing). */
async function firstAfter(client: S3Client, s: { bucket: string; prefix: string }, after: string): Promise<string | null> {
  const { ListObjectsV2Command } = await sdk();
  const r = await client.send(new ListObjectsV2Command({ Bucket: s.bucket, Prefix: s.prefix, MaxKeys: 1, StartAfter: after }));
  return r.Contents?.[0]?.Key ?? null;
}

/**
 * About the last key of the prefix: from `from`, a known key, character by character, the
 * largest printable character any later key has there, down to 3 characters past the first that
 * differs from `from`. One one-key listing asks whether any later key has a larger character
 * there at all (a character every remaining key shares costs just that one); only then a binary
 * search over one-key listings, jumping to the key each one answers. At most 64 listings.
 */
async function lastKeyNear(client: S3Client, s: { bucket: string; prefix: string }, from: string): Promise<string> {
  let last = from;
  let probes = 0;
  let differs = -1;
  for (let j = s.prefix.length; j < last.length && probes < 64; j++) {
    const base = last.slice(0, j);
    let lo = last.charCodeAt(j);
    let hi = 0x7e;
    for (let first = true; lo < hi && probes < 64; first = false) {
      const mid = first ? lo + 1 : (lo + hi + 1) >> 1;
      probes++;
      const k = await firstAfter(client, s, base + String.fromCharCode(mid));
      if (k === null) hi = mid - 1;
      else if (k.startsWith(base)) {
        last = k;
        lo = Math.max(mid, k.charCodeAt(j));
      } else {
        // A key past every key that starts with `base`: an estimate is enough.
        return k;
      }
    }
    if (differs === -1 && last.charCodeAt(j) !== from.charCodeAt(j)) differs = j;
    if (differs !== -1 && j >= differs + 2) break;
  }
  return last;
}

/**
 * Up to `n - 1` keys strictly between `lo` and `hi` (S3's order), evenly spaced when the keys
 * past their common start are read as 3-digit numbers in `alphabet` (its characters in order).
 */
function cutsBetween(lo: string, hi: string, alphabet: string, n: number): string[] {
  let common = 0;
  while (common < lo.length && common < hi.length && lo[common] === hi[common]) common++;
  // Never between the two halves of a surrogate pair.
  if (common > 0 && /[\uD800-\uDBFF]/.test(lo[common - 1])) common--;
  const digits = alphabet.length >= 2 ? alphabet : ' ~';
  const base = digits.length;
  const digit = (k: string, i: number): number => {
    const c = k[common + i];
    if (c === undefined) return 0;
    let d = 0;
    while (d + 1 < base && digits[d + 1] <= c) d++;
    return d;
  };
  const width = 3;
  const value = (k: string) => digit(k, 0) * base * base + digit(k, 1) * base + digit(k, 2);
  const from = value(lo);
  const to = value(hi);
  const cuts: string[] = [];
  let prev = lo;
  for (let i = 1; i < n; i++) {
    let v = from + Math.floor(((to - from) * i) / n);
    let cut = '';
    for (let p = 0; p < width; p++, v = Math.floor(v / base)) cut = digits[v % base] + cut;
    cut = lo.slice(0, common) + cut;
    if (compareKeys(cut, prev) > 0 && compareKeys(cut, hi) < 0) {
      cuts.push(cut);
      prev = cut;
    }
  }
  return cuts;
}

type ObjectSource = { bucket: string; key: string; format: 'jsonl' | 'csv'; keyColumn?: string; size: number; etag: string };
type ObjectCursor = Extract<SourceCursor, { offset: number }>;

/** The end (exclusive) of the last complete line or CSV record in `buf`; -1 when none ends there. */
function lastBoundary(buf: Buffer, csv: boolean): number {
  if (!csv) return buf.lastIndexOf(0x0a) + 1 || -1;
  // A newline inside double quotes is part of a field (RFC 4180; "" is an escaped quote and
  // toggles twice).
  let quoted = false;
  let end = -1;
  for (let i = 0; i < buf.length; i++) {
    const b = buf[i];
    if (b === 0x22) quoted = !quoted;
    else if (b === 0x0a && !quoted) end = i + 1;
  }
  return end;
}

function countLines(buf: Buffer): number {
  let n = 0;
  for (let i = buf.indexOf(0x0a); i !== -1; i = buf.indexOf(0x0a, i + 1)) n++;
  return n;
}

async function getRange(client: S3Client, s: ObjectSource, from: number, to: number): Promise<Buffer> {
  const { GetObjectCommand } = await sdk();
  const r = await client.send(new GetObjectCommand({ Bucket: s.bucket, Key: s.key, Range: `bytes=${from}-${to - 1}` }));
  if (s.etag && r.ETag && r.ETag !== s.etag) {
    throw new SourceReadError(`s3://${s.bucket}/${s.key} changed while it was read (ETag ${r.ETag}, started at ${s.etag})`);
  }
  // Copied into one buffer of the range's length as the body streams in (collecting the chunks
  // and joining them after would hold the range twice; a range is 2 MiB by default, two pages at a time).
  const out = Buffer.allocUnsafe(to - from);
  let at = 0;
  for await (const chunk of r.Body as AsyncIterable<Uint8Array>) {
    if (at + chunk.length > out.length) {
      throw new Error(`s3://${s.bucket}/${s.key}: the range ${from}-${to - 1} answered more than ${to - from} bytes`);
    }
    out.set(chunk, at);
    at += chunk.length;
  }
  return out.subarray(0, at);
}

async function readRange(
  client: S3Client,
  s: ObjectSource,
  c: ObjectCursor,
  settings: ReadSettings,
  first: boolean,
): Promise<SourcePage> {
  const full = settings.rangeBytes ?? 2 * 1024 * 1024;
  // A line may be as long as the largest input (plus whitespace): a range grows up to that.
  const longest = Math.max(full, settings.maxInputBytes * 2 + 1024);
  let want = first ? Math.min(full, Math.max(64 * 1024, Math.floor(full / 16))) : full;
  for (;;) {
    const to = Math.min(s.size, c.offset + want);
    const buf = await getRange(client, s, c.offset, to);
    const atEnd = to >= s.size;
    let end = atEnd ? buf.length : lastBoundary(buf, s.format === 'csv');
    if (end === -1) {
      if (want >= longest) {
        throw new SourceReadError(
          `line ${c.line + 1} of s3://${s.bucket}/${s.key} is longer than ${longest} bytes (no line end within them)`,
          c.line + 1,
        );
      }
      want = Math.min(want * 2, longest);
      continue;
    }
    if (atEnd && s.format === 'csv') end = buf.length;
    const chunk = buf.subarray(0, end);
    const next = {
      offset: c.offset + end,
      line: c.line + countLines(chunk) + (atEnd && chunk.length > 0 && chunk[chunk.length - 1] !== 0x0a ? 1 : 0),
    };
    if (s.format === 'jsonl' && settings.asJson) {
      const { text, count, row } = jsonLinesText(chunk, c, settings, next.line - c.line);
      return { items: [], cursor: { ...next, row }, done: atEnd, json: { text, count } };
    }
    const parsed =
      s.format === 'jsonl'
        ? jsonLines(chunk, c, settings)
        : csvRows((await import('csv-parse/sync')).parse, chunk, c, s, settings);
    return {
      items: parsed.items,
      cursor: { ...next, row: parsed.row, ...(parsed.columns ? { columns: parsed.columns } : {}) },
      done: atEnd,
    };
  }
}

/**
 * Throw when `input` as JSON is past the batch's input limit. `sourceBytes`, the line's own bytes
 * when known, spares the JSON text for a line far below the limit: parsed and written again, a
 * JSON value grows by at most 6 times (a number such as `1e20` writes as 21 digits; strings,
 * escapes and whitespace only shrink), so a line of at most a sixth of the limit always fits.
 */
function checkInput(input: unknown, line: number, settings: ReadSettings, sourceBytes?: number): void {
  if (sourceBytes !== undefined && sourceBytes * 6 <= settings.maxInputBytes) return;
  let json: string;
  try {
    json = JSON.stringify(input) ?? 'null';
  } catch (e) {
    // Nested deeper than JSON.stringify goes (about 5,000 levels): never storable, so the
    // source's fault, not a passing one to try again.
    throw new SourceReadError(`line ${line} cannot be stored as JSON: ${(e as Error).message}`, line);
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > settings.maxInputBytes) {
    throw new SourceReadError(
      `input bytes: line ${line} is ${bytes} bytes of JSON; the limit is ${settings.maxInputBytes}`,
      line,
    );
  }
}

/**
 * What sends a line down the slower way, parsed and written again, rather than stored as its own
 * text: an exponent (`1e400` is Infinity, so null, to JavaScript, and a numeric of 401 digits to
 * PostgreSQL, which refuses past 131,072), a run of 16 digits (past a double's precision; a
 * fraction of over 16,383 digits is refused), or a `\u` escape (written again, a valid pair is
 * a character and only a lone surrogate or NUL stays an escape, which the store check refuses).
 * Strings that merely look so (`"v1e5"`) take the slower way too.
 */
const REWRITE = /\d[eE][+-]?\d|\d{16}|\\u/;

/**
 * Longest line stored as its own text, bytes. A longer one may nest deeper than PostgreSQL's
 * parser goes (it stops at about 15,000 levels; JSON.stringify throws past about 5,000, which
 * ends the batch with a clear reason), and its size is measured as JSON written again.
 */
const AS_IS_BYTES = 4_096;

/**
 * A JSON Lines item stored as its line's text ({@link INPUT_JSON}); `input`, for callers of
 * {@link readPage}, parses it when asked.
 */
class LineItem {
  readonly [INPUT_JSON]: string;
  constructor(
    readonly key: string,
    text: string,
  ) {
    this[INPUT_JSON] = text;
  }
  get input(): unknown {
    return JSON.parse(this[INPUT_JSON]) as unknown;
  }
}

function jsonLines(
  chunk: Buffer,
  c: ObjectCursor,
  settings: ReadSettings,
): { items: ItemWithJson[]; row: number; columns?: string[] } {
  const items: ItemWithJson[] = [];
  let row = c.row;
  let line = c.line;
  let start = 0;
  while (start < chunk.length) {
    let nl = chunk.indexOf(0x0a, start);
    if (nl === -1) nl = chunk.length;
    line++;
    let text = chunk.toString('utf8', start, nl);
    let lineBytes = nl - start;
    start = nl + 1;
    if (text.endsWith('\r')) {
      text = text.slice(0, -1);
      lineBytes--;
    }
    if (text.trim() === '') continue;
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (e) {
      throw new SourceReadError(`line ${line} is not JSON: ${(e as Error).message}`, line);
    }
    row++;
    // As it is when short and plain: written again, such a line is no longer (whitespace and
    // `\/` go, `1.0` is `1`), so it is within the input limit as the line is.
    if (lineBytes <= Math.min(AS_IS_BYTES, settings.maxInputBytes) && !REWRITE.test(text)) {
      items.push(new LineItem(String(line), text));
    } else {
      checkInput(input, line, settings, lineBytes);
      items.push({ key: String(line), input });
    }
  }
  return { items, row };
}

/**
 * The lines of `chunk` as the JSON text a store takes, `[{"k":"<line>","i":<value>}, …]`, built
 * in one buffer: each line is checked with JSON.parse as {@link jsonLines} checks it, then its
 * own bytes are copied (short and plain) or its value is written again. The strings and values
 * of a line die with it.
 * @throws {SourceReadError} a line that is not JSON, past the input limit or not storable.
 */
function jsonLinesText(
  chunk: Buffer,
  c: ObjectCursor,
  settings: ReadSettings,
  lines: number,
): { text: string; count: number; row: number } {
  // Room for every line as it is and its `{"k":"<line>","i":…}`, so the buffer grows only for
  // lines written again longer than they were.
  let out = Buffer.allocUnsafe(chunk.length + (lines + 1) * (String(c.line + lines + 1).length + 12) + 2);
  let at = 0;
  const put = (b: Buffer | string) => {
    const n = typeof b === 'string' ? Buffer.byteLength(b) : b.length;
    if (at + n > out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(out.length * 2, at + n + 1024));
      out.copy(bigger, 0, 0, at);
      out = bigger;
    }
    at += typeof b === 'string' ? out.write(b, at) : b.copy(out, at);
  };
  let row = c.row;
  let line = c.line;
  let count = 0;
  let start = 0;
  put('[');
  while (start < chunk.length) {
    let nl = chunk.indexOf(0x0a, start);
    if (nl === -1) nl = chunk.length;
    line++;
    let end = nl;
    const from = start;
    start = nl + 1;
    if (end > from && chunk[end - 1] === 0x0d) end--;
    const text = chunk.toString('utf8', from, end);
    if (text.trim() === '') continue;
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (e) {
      throw new SourceReadError(`line ${line} is not JSON: ${(e as Error).message}`, line);
    }
    row++;
    put(count === 0 ? `{"k":"${line}","i":` : `,{"k":"${line}","i":`);
    count++;
    // As it is when short and plain (see jsonLines).
    if (end - from <= Math.min(AS_IS_BYTES, settings.maxInputBytes) && !REWRITE.test(text)) {
      put(chunk.subarray(from, end));
    } else {
      checkInput(input, line, settings, end - from);
      const json = JSON.stringify(input) ?? 'null';
      if (json.includes('\\u') && UNSTORABLE_ESCAPE.test(json)) {
        throw new SourceReadError(`line ${line} holds a NUL character or an unpaired surrogate, which cannot be stored`, line);
      }
      put(json);
    }
    put('}');
  }
  put(']');
  return { text: out.toString('utf8', 0, at), count, row };
}

function csvRows(
  parseCsv: typeof import('csv-parse/sync').parse,
  chunk: Buffer,
  c: ObjectCursor,
  s: ObjectSource,
  settings: ReadSettings,
): { items: ItemInput[]; row: number; columns?: string[] } {
  let records: { record: string[]; info: { lines: number } }[];
  try {
    records = parseCsv(chunk, { relax_column_count: true, skip_empty_lines: true, bom: c.offset === 0, info: true }) as never;
  } catch (e) {
    const lines = (e as { lines?: number }).lines;
    const line = lines === undefined ? null : c.line + lines;
    throw new SourceReadError(
      `the CSV cannot be parsed${line === null ? '' : ` at line ${line}`}: ${(e as Error).message}`,
      line,
    );
  }
  let columns = c.columns;
  let row = c.row;
  const items: ItemInput[] = [];
  for (const { record, info } of records) {
    const line = c.line + info.lines;
    if (columns === undefined) {
      columns = record;
      if (s.keyColumn !== undefined && !columns.includes(s.keyColumn)) {
        throw new SourceReadError(
          `keyColumn ${JSON.stringify(s.keyColumn)} is not a column of the header (${columns.join(', ')})`,
          line,
        );
      }
      continue;
    }
    if (record.length !== columns.length) {
      throw new SourceReadError(`line ${line} has ${record.length} fields; the header has ${columns.length}`, line);
    }
    row++;
    const input: Record<string, string> = {};
    columns.forEach((name, i) => (input[name] = record[i]));
    const key = s.keyColumn === undefined ? String(row) : input[s.keyColumn];
    if (key === '') throw new SourceReadError(`line ${line}: the key column ${JSON.stringify(s.keyColumn)} is empty`, line);
    checkInput(input, line, settings);
    items.push({ key, input });
  }
  return { items, row, columns };
}
