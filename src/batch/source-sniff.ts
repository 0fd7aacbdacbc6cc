// What an object source holds, found from its first bytes (docs/design.md, "Sources and
// results", "What an object holds"): gzip (by its magic bytes or `Content-Encoding`), then, in
// the text it decodes to, a byte order mark (UTF-8 skipped, UTF-16 decoded, UTF-32 refused) or
// the magic bytes of a format that is not text, which ends the batch `failed` naming it.
import { SourceReadError } from './source-page.js';
import type { SourceEncoding } from './types.js';

/** Formats that are not text, by their first bytes: what a reason calls them. */
const NOT_TEXT: { magic: number[]; name: string }[] = [
  { magic: [0x89, 0x50, 0x4e, 0x47], name: 'a PNG image' },
  { magic: [0xff, 0xd8, 0xff], name: 'a JPEG image' },
  { magic: [0x47, 0x49, 0x46, 0x38], name: 'a GIF image' },
  { magic: [0x25, 0x50, 0x44, 0x46], name: 'a PDF document' },
  { magic: [0x50, 0x4b, 0x03, 0x04], name: 'a ZIP archive' },
  { magic: [0x50, 0x4b, 0x05, 0x06], name: 'a ZIP archive (empty)' },
  { magic: [0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c], name: 'a 7-Zip archive' },
  { magic: [0x42, 0x5a, 0x68], name: 'bzip2-compressed data' },
  { magic: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], name: 'xz-compressed data' },
  { magic: [0x28, 0xb5, 0x2f, 0xfd], name: 'Zstandard-compressed data' },
  { magic: [0x1f, 0x8b], name: 'gzip-compressed data inside gzip' },
  { magic: [0x50, 0x41, 0x52, 0x31], name: 'a Parquet file' },
  { magic: [0x4f, 0x62, 0x6a, 0x01], name: 'an Avro file' },
  { magic: [0x4f, 0x52, 0x43], name: 'an ORC file' },
  { magic: [0x7f, 0x45, 0x4c, 0x46], name: 'an ELF executable' },
];

const startsWith = (b: Buffer, magic: number[]) => b.length >= magic.length && magic.every((m, i) => b[i] === m);

const hex = (b: Buffer) => [...b.subarray(0, 8)].map((x) => x.toString(16).toUpperCase().padStart(2, '0')).join(' ') || '(none)';

/**
 * Whether an object's raw bytes are gzip: its first bytes `1F 8B`, or its `Content-Encoding`
 * says gzip. Another content coding (br, deflate, zstd) is refused.
 * @throws {SourceReadError} a `Content-Encoding` other than gzip or identity.
 */
export function isGzip(head: Buffer, contentEncoding: string | undefined, where: string): boolean {
  const codings = (contentEncoding ?? '')
    .toLowerCase()
    .split(',')
    .map((c) => c.trim())
    .filter((c) => c !== '' && c !== 'identity');
  const other = codings.find((c) => c !== 'gzip' && c !== 'x-gzip');
  if (other !== undefined) {
    throw new SourceReadError(`${where} has Content-Encoding ${other}, which is not read (gzip is)`, null);
  }
  return codings.length > 0 || (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b);
}

/**
 * What the first bytes of an object's text (after any gzip) say: its character set and the
 * length of its byte order mark, or the format found instead of text.
 * @throws {SourceReadError} UTF-32, a known format that is not text, or a NUL byte among them.
 */
export function sniffText(head: Buffer, where: string): { charset: SourceEncoding['charset']; bom: number } {
  if (startsWith(head, [0xff, 0xfe, 0, 0]) || startsWith(head, [0, 0, 0xfe, 0xff])) {
    throw new SourceReadError(
      `${where} is UTF-32 text (byte order mark ${hex(head.subarray(0, 4))}), which is not read: give UTF-8 or UTF-16`,
    );
  }
  if (startsWith(head, [0xef, 0xbb, 0xbf])) return { charset: 'utf-8', bom: 3 };
  if (startsWith(head, [0xff, 0xfe])) return { charset: 'utf-16le', bom: 2 };
  if (startsWith(head, [0xfe, 0xff])) return { charset: 'utf-16be', bom: 2 };
  const known = NOT_TEXT.find((f) => startsWith(head, f.magic));
  if (known) throw new SourceReadError(`${where} is ${known.name} (first bytes ${hex(head)}), not text`, null);
  checkNoNul(head, 0, 0, where);
  return { charset: 'utf-8', bom: 0 };
}

/**
 * Throw when `text` (from byte `offset` of the object's text, after `line` lines) holds a NUL
 * byte: text never does, and PostgreSQL cannot store it.
 * @throws {SourceReadError} naming the byte, its line and what the bytes look like.
 */
export function checkNoNul(text: Buffer, offset: number, line: number, where: string): void {
  const at = text.indexOf(0);
  if (at === -1) return;
  let lines = line + 1;
  for (let i = text.indexOf(0x0a); i !== -1 && i < at; i = text.indexOf(0x0a, i + 1)) lines++;
  // Every other byte NUL (ASCII as UTF-16): UTF-16 without its byte order mark, most likely.
  const w = text.subarray(at & ~1, (at & ~1) + 32);
  const zeros = [0, 1].map((p) => [...w].filter((b, i) => i % 2 === p && b === 0).length);
  const utf16 = w.length >= 8 && Math.min(...zeros) === 0 && Math.max(...zeros) >= (w.length / 2) * 0.8;
  throw new SourceReadError(
    `${where} holds a NUL byte at byte ${offset + at} (line ${lines}): binary data, not text` +
      (utf16 ? ' (UTF-16 without a byte order mark? give it one, FF FE or FE FF, or give UTF-8)' : ''),
    lines,
  );
}
