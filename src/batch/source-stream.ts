// An object read as one stream (docs/design.md, "Sources and results", "What an object holds"):
// gzip is decompressed and UTF-16 decoded to UTF-8 as the body streams in, and a page is the
// text up to its last complete line or record. Neither can be read from the middle, so the
// cursor's offset is a byte of the decoded text: a reader keeps the stream open from one page
// to the next (SourceStreams), and a takeover (or a reader claiming again) opens the object at
// its byte 0 and decodes and skips up to the stored offset.
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { S3Client } from '@aws-sdk/client-s3';
import { sniffText } from './source-sniff.js';
import { s3Call, sdk, SourceReadError, type ObjectSource, type OpenStream, type ReadSettings } from './source-page.js';
import type { SourceEncoding } from './types.js';

const where = (s: ObjectSource) => `s3://${s.bucket}/${s.key}`;

/** A zlib error (`Z_DATA_ERROR`, `Z_BUF_ERROR`: not gzip, corrupt, cut short): the object's fault, never passing. */
const zlibError = (e: unknown) => typeof (e as { code?: unknown })?.code === 'string' && /^Z_/.test((e as { code: string }).code);

/** An object open as one stream of its decoded text. */
export class TextStream implements OpenStream {
  /** Text offset of `rest[0]` (or of the next chunk when `rest` is empty). */
  pos = 0;
  /** Text read past the last page, or past the stored offset. */
  rest: Buffer = Buffer.alloc(0);
  ended = false;

  constructor(
    readonly id: string,
    private readonly chunks: AsyncIterator<Buffer>,
    readonly destroy: () => void,
  ) {}

  /** The next chunk of text; null at its end. */
  async next(): Promise<Buffer | null> {
    if (this.ended) return null;
    const n = await this.chunks.next();
    if (n.done) {
      this.ended = true;
      return null;
    }
    return n.value;
  }

  /**
   * Skip the text to offset `to` (a takeover's stored cursor).
   * @throws {SourceReadError} the text ends before it (the object changed).
   */
  async skipTo(to: number, s: ObjectSource): Promise<void> {
    while (this.pos + this.rest.length < to) {
      this.pos += this.rest.length;
      this.rest = Buffer.alloc(0);
      const n = await this.next();
      if (!n)
        throw new SourceReadError(
          `${where(s)} ends at byte ${this.pos} of its text, before ${to} where reading stopped: it changed`,
        );
      this.rest = n;
    }
    this.rest = this.rest.subarray(to - this.pos);
    this.pos = to;
  }
}

/** Which stream a cursor needs: the object, its ETag and its encoding. */
export const streamId = (s: ObjectSource, e: SourceEncoding) => `${s.bucket}\n${s.key}\n${s.etag}\n${e.gzip}\n${e.charset}`;

/**
 * Open object `s` at byte 0 as a stream of UTF-8 text: gunzipped when `gzip`, its byte order
 * mark skipped, UTF-16 decoded. `charset` undefined: found from the text's first bytes.
 * Answers the stream (at text offset 0) and the encoding found.
 * @throws {SourceReadError} the object changed (ETag), is not text, or not the charset asked.
 */
export async function openText(
  client: S3Client,
  s: ObjectSource,
  settings: ReadSettings,
  gzip: boolean,
  charset?: SourceEncoding['charset'],
): Promise<{ stream: TextStream; encoding: SourceEncoding }> {
  const { GetObjectCommand } = await sdk();
  // The version found at start (versioned buckets); SlowDown retried. The stream outlives the
  // page that opened it (kept for the next page), so the page's abort signal is not its own: the
  // reader's streams are closed at a handoff instead (SourceStreams.close).
  const r = await s3Call({ ...settings, signal: undefined }, () =>
    client.send(new GetObjectCommand({ Bucket: s.bucket, Key: s.key, VersionId: s.versionId })),
  );
  const body = r.Body as Readable;
  let source: Readable = body;
  if (gzip) {
    // 64 KiB chunks (default 16): fewer trips through the iterators per page. Reading alone,
    // 500,000 lines went from 193,000-269,000 to 454,000-500,000 lines/s.
    const gunzip = createGunzip({ chunkSize: 64 * 1024 });
    // Its errors (and the body's) reach the reader through the gunzip's iterator.
    pipeline(body, gunzip, () => {});
    source = gunzip;
  }
  const destroy = () => {
    body.destroy();
    source.destroy();
  };
  try {
    if (s.etag && r.ETag && r.ETag !== s.etag) {
      throw new SourceReadError(`${where(s)} changed while it was read (ETag ${r.ETag}, started at ${s.etag})`);
    }
    const raw = wrapErrors(source[Symbol.asyncIterator]() as AsyncIterator<Buffer>, s);
    // The first bytes of the text: its byte order mark, or what it is instead of text.
    const heads: Buffer[] = [];
    let head = Buffer.alloc(0);
    while (head.length < 8) {
      const n = await raw.next();
      if (n.done) break;
      heads.push(n.value);
      head = Buffer.concat(heads);
    }
    const found = sniffText(head, where(s));
    if (charset !== undefined && found.charset !== charset) {
      throw new SourceReadError(`${where(s)} changed while it was read: its text was ${charset}, it is now ${found.charset}`);
    }
    const encoding: SourceEncoding = { gzip, charset: found.charset };
    let chunks = withHead(head.subarray(found.bom), raw);
    if (found.charset !== 'utf-8') chunks = utf16(chunks, found.charset, s);
    return { stream: new TextStream(streamId(s, encoding), chunks, destroy), encoding };
  } catch (e) {
    destroy();
    throw e;
  }
}

/** `raw`'s chunks, its zlib errors made the object's fault ({@link SourceReadError}). */
function wrapErrors(raw: AsyncIterator<Buffer>, s: ObjectSource): AsyncIterator<Buffer> {
  return {
    next: async () => {
      try {
        return await raw.next();
      } catch (e) {
        if (zlibError(e)) throw new SourceReadError(`${where(s)} cannot be decompressed as gzip: ${(e as Error).message}`);
        throw e;
      }
    },
  };
}

async function* withHead(head: Buffer, rest: AsyncIterator<Buffer>): AsyncGenerator<Buffer> {
  if (head.length > 0) yield head;
  for (;;) {
    const n = await rest.next();
    if (n.done) return;
    yield n.value;
  }
}

/** UTF-16 chunks decoded to UTF-8 (a character split between chunks is kept for the next). */
async function* utf16(chunks: AsyncIterator<Buffer>, charset: 'utf-16le' | 'utf-16be', s: ObjectSource): AsyncGenerator<Buffer> {
  const decoder = new TextDecoder(charset, { fatal: true, ignoreBOM: true });
  const decode = (b?: Buffer) => {
    try {
      return b ? decoder.decode(b, { stream: true }) : decoder.decode();
    } catch (e) {
      throw new SourceReadError(`${where(s)} is not valid ${charset.toUpperCase()}: ${(e as Error).message}`);
    }
  };
  for (;;) {
    const n = await chunks.next();
    if (n.done) break;
    const t = decode(n.value);
    if (t !== '') yield Buffer.from(t, 'utf8');
  }
  const t = decode();
  if (t !== '') yield Buffer.from(t, 'utf8');
}

/**
 * The text of the next page from `ts` (standing at the cursor): its next `want` bytes up to the
 * last line or record end `boundary` finds in them, or to the text's end; with none, up to
 * `longest` bytes are read before the line is called too long (`null`). Answers the page's text
 * and whether the text ends with it; the bytes after it stay in `ts` for the next page.
 */
export async function streamPage(
  ts: TextStream,
  want: number,
  longest: number,
  boundary: (b: Buffer) => number,
): Promise<{ text: Buffer; atEnd: boolean } | null> {
  const parts: Buffer[] = [ts.rest];
  let have = ts.rest.length;
  for (;;) {
    // One byte past `want`, so the text's end is known as a range's is (the object's size):
    // pages are cut where a range read would cut them, whatever the chunks were.
    while (have <= want) {
      const n = await ts.next();
      if (!n) break;
      parts.push(n);
      have += n.length;
    }
    const buf = parts.length === 1 ? parts[0] : Buffer.concat(parts, have);
    parts.length = 0;
    parts.push(buf);
    const atEnd = ts.ended && have <= want;
    const end = atEnd ? buf.length : boundary(buf.subarray(0, want));
    if (end === -1) {
      if (want >= longest) return null;
      want = Math.min(want * 2, longest);
      continue;
    }
    ts.rest = buf.subarray(end);
    ts.pos += end;
    return { text: buf.subarray(0, end), atEnd };
  }
}
