// Reading an object source (docs/design.md, "Items in, results out, events"; "What an object
// holds"): plain UTF-8 text is read a page per byte range (GetObject Range, pinned to the ETag
// seen at start), cut after its last complete line or CSV record, so memory per page is bounded
// by the range however large the object; gzip and UTF-16, found on the first page, are read as
// one stream (source-stream.ts). The lines are parsed by source-jsonl.ts or source-csv.ts.
import type { S3Client } from '@aws-sdk/client-s3';
import { csvQuote, csvRows } from './source-csv.js';
import { jsonLines, jsonLinesRows } from './source-jsonl.js';
import {
  s3Call,
  sdk,
  SourceReadError,
  type ObjectCursor,
  type ObjectSource,
  type ReadSettings,
  type SourcePage,
} from './source-page.js';
import { checkNoNul, isGzip, sniffText } from './source-sniff.js';
import { openText, streamId, streamPage, type TextStream } from './source-stream.js';
import type { SourceEncoding } from './types.js';

const where = (s: ObjectSource) => `s3://${s.bucket}/${s.key}`;

/**
 * The end (exclusive) of the last complete line or CSV record in `buf`; -1 when none ends there.
 * `quote`: CSV's quote byte (a newline between quotes is part of a field; a doubled quote
 * toggles twice), null for CSV without quoting, undefined for JSON Lines.
 */
function lastBoundary(buf: Buffer, quote: number | null | undefined): number {
  if (quote === undefined || quote === null) return buf.lastIndexOf(0x0a) + 1 || -1;
  let quoted = false;
  let end = -1;
  for (let i = 0; i < buf.length; i++) {
    const b = buf[i];
    if (b === quote) quoted = !quoted;
    else if (b === 0x0a && !quoted) end = i + 1;
  }
  return end;
}

function countLines(buf: Buffer): number {
  let n = 0;
  for (let i = buf.indexOf(0x0a); i !== -1; i = buf.indexOf(0x0a, i + 1)) n++;
  return n;
}

async function getRange(
  client: S3Client,
  s: ObjectSource,
  from: number,
  to: number,
  settings: ReadSettings,
): Promise<{ buf: Buffer; contentEncoding: string | undefined }> {
  const { GetObjectCommand } = await sdk();
  // The version found at start, when the bucket keeps versions: a rewrite since changes nothing.
  const r = await s3Call(settings, (abortSignal) =>
    client.send(
      new GetObjectCommand({ Bucket: s.bucket, Key: s.key, Range: `bytes=${from}-${to - 1}`, VersionId: s.versionId }),
      { abortSignal },
    ),
  );
  const body = r.Body as AsyncIterable<Uint8Array> & { destroy?: () => void };
  try {
    if (s.etag && r.ETag && r.ETag !== s.etag) {
      throw new SourceReadError(`${where(s)} changed while it was read (ETag ${r.ETag}, started at ${s.etag})`);
    }
    // Copied into one buffer of the range's length as the body streams in (collecting the chunks
    // and joining them after would hold the range twice; a range is 2 MiB by default, two pages at a time).
    const out = Buffer.allocUnsafe(to - from);
    let at = 0;
    for await (const chunk of body) {
      if (at + chunk.length > out.length) {
        throw new Error(`${where(s)}: the range ${from}-${to - 1} answered more than ${to - from} bytes`);
      }
      out.set(chunk, at);
      at += chunk.length;
    }
    return { buf: out.subarray(0, at), contentEncoding: r.ContentEncoding };
  } finally {
    // A body not read to its end (a changed ETag, a range too long, an abort) holds its socket.
    body.destroy?.();
  }
}

/** Deflate's largest ratio of inflated to compressed bytes, rounded up (zlib's technical notes: 1,032 to 1). */
const GZIP_MAX_RATIO = 1_032;

/** What a page's text was: where it starts (cursor `c`), its bytes, and whether the object ends with it. */
interface PageText {
  c: ObjectCursor;
  text: Buffer;
  /** Bytes of the object (or of its decoded text) the page moves the cursor by: its text and a byte order mark skipped. */
  advance: number;
  atEnd: boolean;
  encoding?: SourceEncoding;
}

/**
 * The page of object `s` that starts at cursor `c`: the first page reads a sixteenth of a range
 * (at least 64 KiB) so work starts at once; a range with no line end grows, up to twice the
 * input limit, before the line is called too long. The first page finds what the object holds
 * (source-sniff.ts): gzip or UTF-16 goes on as one stream, another format ends here.
 * @throws {SourceReadError} a line too long, not JSON or not storable; the object changed or is not text.
 */
export async function readRange(
  client: S3Client,
  s: ObjectSource,
  c: ObjectCursor,
  settings: ReadSettings,
  first: boolean,
): Promise<SourcePage> {
  const full = settings.rangeBytes ?? 2 * 1024 * 1024;
  // A line may be as long as the largest input (plus whitespace): a range grows up to that.
  const longest = Math.max(full, settings.maxInputBytes * 2 + 1024);
  const want = first ? Math.min(full, Math.max(64 * 1024, Math.floor(full / 16))) : full;
  const quote = s.format === 'csv' ? csvQuote(s) : undefined;
  const boundary = (b: Buffer) => lastBoundary(b, quote);
  const page = c.encoding
    ? await streamed(client, s, c, c.encoding, settings, want, longest, boundary)
    : await ranged(client, s, c, settings, want, longest, boundary);
  return parsePage(s, page, settings);
}

const tooLong = (s: ObjectSource, c: ObjectCursor, longest: number) =>
  new SourceReadError(`line ${c.line + 1} of ${where(s)} is longer than ${longest} bytes (no line end within them)`, c.line + 1);

/** A page of plain UTF-8 text read by byte range; the first page's bytes say whether the object is that. */
async function ranged(
  client: S3Client,
  s: ObjectSource,
  c: ObjectCursor,
  settings: ReadSettings,
  want: number,
  longest: number,
  boundary: (b: Buffer) => number,
): Promise<PageText> {
  let w = want;
  for (;;) {
    const to = Math.min(s.size, c.offset + w);
    const { buf, contentEncoding } = await getRange(client, s, c.offset, to, settings);
    let bom = 0;
    if (c.offset === 0) {
      const gzip = isGzip(buf, contentEncoding, where(s));
      const found = gzip ? undefined : sniffText(buf.subarray(0, 8), where(s));
      if (gzip || found?.charset !== 'utf-8') {
        return streamed(client, s, c, { gzip, charset: found?.charset ?? 'utf-8' }, settings, w, longest, boundary, !gzip);
      }
      bom = found.bom;
    }
    const atEnd = to >= s.size;
    const end = atEnd ? buf.length : boundary(buf);
    if (end === -1) {
      if (w >= longest) throw tooLong(s, c, longest);
      w = Math.min(w * 2, longest);
      continue;
    }
    return { c, text: buf.subarray(bom, end), advance: end, atEnd };
  }
}

/**
 * A page of an object read as one stream: from the stream the reader kept open at the cursor,
 * else the object opened at byte 0 and its text skipped to the cursor (a takeover, a reader
 * claiming again). `known`: the charset in `e` is the object's (found on the raw bytes, or
 * stored in the cursor); else found from the decompressed text.
 */
async function streamed(
  client: S3Client,
  s: ObjectSource,
  c: ObjectCursor,
  e: SourceEncoding,
  settings: ReadSettings,
  want: number,
  longest: number,
  boundary: (b: Buffer) => number,
  known = c.encoding !== undefined,
): Promise<PageText> {
  let ts = settings.streams?.take<TextStream>(streamId(s, e), c.offset);
  let encoding = e;
  if (!ts) {
    const opened = await openText(client, s, settings, e.gzip, known ? e.charset : undefined);
    ts = opened.stream;
    encoding = opened.encoding;
  }
  let keep = false;
  try {
    if (ts.pos !== c.offset) await ts.skipTo(c.offset, s);
    const page = await streamPage(ts, want, longest, boundary);
    if (!page) throw tooLong(s, c, longest);
    keep = !page.atEnd;
    return { c, text: page.text, advance: page.text.length, atEnd: page.atEnd, encoding };
  } finally {
    if (keep && settings.streams) settings.streams.put(ts);
    else ts.destroy();
  }
}

/** The page's lines as items (or as a store's JSON text), with the cursor after them. */
async function parsePage(s: ObjectSource, p: PageText, settings: ReadSettings): Promise<SourcePage> {
  const { c, text, atEnd } = p;
  checkNoNul(text, c.offset + p.advance - text.length, c.line, where(s));
  const next = {
    offset: c.offset + p.advance,
    line: c.line + countLines(text) + (atEnd && text.length > 0 && text[text.length - 1] !== 0x0a ? 1 : 0),
    ...(p.encoding ? { encoding: p.encoding } : {}),
  };
  // Keys are padded to the digits of the most lines the object can hold (numberedKey): one per
  // byte, or for gzip one per byte of the most its bytes can inflate to (deflate's limit is
  // about 1,032 to 1), so a source's keys keep one width, whoever reads which page.
  const gzip = (p.encoding ?? c.encoding)?.gzip ?? false;
  const keyed = gzip ? { ...s, size: s.size * GZIP_MAX_RATIO } : s;
  if (s.format === 'jsonl' && settings.asJson) {
    const { row, ...rows } = jsonLinesRows(text, c, settings, keyed.size);
    return { items: [], cursor: { ...next, row }, done: atEnd, rows };
  }
  const parsed =
    s.format === 'jsonl'
      ? jsonLines(text, c, settings, keyed.size)
      : csvRows((await import('csv-parse/sync')).parse, text, c, keyed, settings);
  return {
    items: parsed.items,
    cursor: { ...next, row: parsed.row, ...(parsed.columns ? { columns: parsed.columns } : {}) },
    done: atEnd,
  };
}
