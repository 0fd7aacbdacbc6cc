// Reading an object source (docs/design.md, "Items in, results out, events"): one page is one
// byte range (GetObject Range, pinned to the ETag seen at start), cut after its last complete
// line or CSV record, so memory per page is bounded by the range however large the object; the
// lines are parsed by source-jsonl.ts or source-csv.ts.
import type { S3Client } from '@aws-sdk/client-s3';
import { csvRows } from './source-csv.js';
import { jsonLines, jsonLinesText } from './source-jsonl.js';
import { discardBody } from './s3.js';
import {
  s3Call,
  sdk,
  SourceReadError,
  type ObjectCursor,
  type ObjectSource,
  type ReadSettings,
  type SourcePage,
} from './source-page.js';

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

async function getRange(client: S3Client, s: ObjectSource, from: number, to: number, settings: ReadSettings): Promise<Buffer> {
  const { GetObjectCommand } = await sdk();
  // The version found at start, when the bucket keeps versions: a rewrite since changes nothing.
  const r = await s3Call(settings, (abortSignal) =>
    client.send(
      new GetObjectCommand({ Bucket: s.bucket, Key: s.key, Range: `bytes=${from}-${to - 1}`, VersionId: s.versionId }),
      { abortSignal },
    ),
  );
  if (s.etag && r.ETag && r.ETag !== s.etag) {
    // Its body is never read: destroyed now, or its socket stays in use for good.
    discardBody(r.Body);
    throw new SourceReadError(`s3://${s.bucket}/${s.key} changed while it was read (ETag ${r.ETag}, started at ${s.etag})`);
  }
  // Copied into one buffer of the range's length as the body streams in (collecting the chunks
  // and joining them after would hold the range twice; a range is 2 MiB by default, two pages at a time).
  const out = Buffer.allocUnsafe(to - from);
  let at = 0;
  try {
    for await (const chunk of r.Body as AsyncIterable<Uint8Array>) {
      if (at + chunk.length > out.length) {
        throw new Error(`s3://${s.bucket}/${s.key}: the range ${from}-${to - 1} answered more than ${to - from} bytes`);
      }
      out.set(chunk, at);
      at += chunk.length;
    }
  } catch (e) {
    // Left early (a body too long, an abort): the rest is dropped with its socket.
    discardBody(r.Body);
    throw e;
  }
  return out.subarray(0, at);
}

/**
 * The page of object `s` that starts at cursor `c`: the first page reads a sixteenth of a range
 * (at least 64 KiB) so work starts at once; a range with no line end grows, up to twice the
 * input limit, before the line is called too long.
 * @throws {SourceReadError} a line too long, not JSON or not storable; the object changed.
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
  let want = first ? Math.min(full, Math.max(64 * 1024, Math.floor(full / 16))) : full;
  for (;;) {
    const to = Math.min(s.size, c.offset + want);
    const buf = await getRange(client, s, c.offset, to, settings);
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
      const { text, count, row } = jsonLinesText(chunk, c, settings, next.line - c.line, s.size);
      return { items: [], cursor: { ...next, row }, done: atEnd, json: { text, count } };
    }
    const parsed =
      s.format === 'jsonl'
        ? jsonLines(chunk, c, settings, s.size)
        : csvRows((await import('csv-parse/sync')).parse, chunk, c, s, settings);
    return {
      items: parsed.items,
      cursor: { ...next, row: parsed.row, ...(parsed.columns ? { columns: parsed.columns } : {}) },
      done: atEnd,
    };
  }
}
