// Reading an S3 Inventory report (docs/design.md, "Sources and results"; docs/api.md, "source"):
// its manifest.json, read once at start, names the report's columns (`fileSchema`) and its CSV
// parts (`files`, gzip as S3 writes them); each part is read as a CSV object source with those
// columns given as its header (source-object.ts: ranges, or one stream for gzip), and each row is
// an item, the object it lists. No listing call is made: the report is the listing, as Step
// Functions' Distributed Map reads one with its MANIFEST reader.
import type { S3Client } from '@aws-sdk/client-s3';
import type { ItemWithJson } from './items.js';
import { listedKey } from './s3.js';
import { readRange } from './source-object.js';
import { SourceReadError, type ObjectCursor, type ObjectSource, type ReadSettings, type SourcePage } from './source-page.js';
import type { SourceCursor, StoredManifestSource } from './types.js';

/** Largest manifest.json read at start, bytes (a report of a billion objects names a few thousand parts). */
export const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;

/** Most parts a manifest may name. */
export const MAX_MANIFEST_PARTS = 100_000;

/**
 * The name a report's column has in an item's input: its first letter in lower case (`Bucket`
 * `bucket`, `LastModifiedDate` `lastModifiedDate`), `ETag` `etag`, as a prefix source's items
 * name theirs (`{ bucket, key, size, etag }`).
 */
export function inputName(column: string): string {
  return column === 'ETag' ? 'etag' : column.charAt(0).toLowerCase() + column.slice(1);
}

/**
 * The columns and parts of a manifest.json's text (`where` names it in messages): `fileFormat`
 * must be `CSV` (an ORC or Parquet report is refused), `fileSchema` must name a `Key` column,
 * `files` must list at least one part `{ key, size }`. Parts of 0 bytes hold no row and are left out.
 * Answers the report, or what is wrong with it.
 */
export function parseManifest(
  text: string,
  where: string,
): { columns: string[]; parts: { key: string; size: number }[] } | { error: string } {
  let m: { fileFormat?: unknown; fileSchema?: unknown; files?: unknown };
  try {
    m = JSON.parse(text) as typeof m;
  } catch (e) {
    return { error: `${where} is not JSON: ${(e as Error).message}` };
  }
  if (m === null || typeof m !== 'object') return { error: `${where} is not an S3 Inventory manifest (a JSON object)` };
  if (m.fileFormat !== 'CSV') {
    return {
      error: `${where}: fileFormat is ${JSON.stringify(m.fileFormat)}; only a CSV inventory report can be read (not ORC or Parquet)`,
    };
  }
  if (typeof m.fileSchema !== 'string' || m.fileSchema.trim() === '') return { error: `${where}: fileSchema is missing` };
  const columns = m.fileSchema.split(',').map((c) => c.trim());
  if (!columns.includes('Key')) return { error: `${where}: fileSchema has no Key column (${columns.join(', ')})` };
  if (columns.some((c, i) => c === '' || columns.indexOf(c) !== i)) {
    return { error: `${where}: fileSchema names an empty or repeated column (${columns.join(', ')})` };
  }
  if (!Array.isArray(m.files) || m.files.length === 0) return { error: `${where}: files lists no part` };
  if (m.files.length > MAX_MANIFEST_PARTS) {
    return { error: `${where}: files lists ${m.files.length} parts; the limit is ${MAX_MANIFEST_PARTS}` };
  }
  const parts: { key: string; size: number }[] = [];
  for (const [i, f] of (m.files as { key?: unknown; size?: unknown }[]).entries()) {
    if (typeof f?.key !== 'string' || f.key === '' || typeof f.size !== 'number' || !Number.isSafeInteger(f.size) || f.size < 0) {
      return { error: `${where}: files[${i}] must be { key, size } (a key and a size in bytes)` };
    }
    if (f.size > 0) parts.push({ key: f.key, size: f.size });
  }
  if (parts.length === 0) return { error: `${where}: every part it lists is empty (0 bytes): it holds no items` };
  return { columns, parts };
}

/**
 * The page of report `s` that starts at `cursor` (null: its first): a page of one part, read as
 * that CSV part is (source-object.ts), its rows made items keyed by the object's key (`Key`,
 * URL-encoded in the report, decoded) with the row's columns as input ({@link inputName}; `Size`
 * a number). The cursor is the part's, with its index; after a part's last page the next page is
 * the next part's first.
 * @throws {SourceReadError} a part that cannot be read (not CSV, a ragged row, a key not URL-encoded).
 */
export async function readManifestPage(
  client: S3Client,
  s: StoredManifestSource,
  cursor: SourceCursor | null,
  settings: ReadSettings,
): Promise<SourcePage> {
  const c = (cursor ?? { offset: 0, line: 0, row: 0 }) as ObjectCursor;
  const index = c.part ?? 0;
  const part = s.parts[index];
  if (part === undefined) throw new Error(`a cursor past the report's last part (${index} of ${s.parts.length})`);
  const object: ObjectSource = {
    bucket: s.bucket,
    key: part.key,
    format: 'csv',
    header: s.columns,
    keyColumn: 'Key',
    size: part.size,
    etag: '',
  };
  const { part: _, ...at } = c;
  let page: SourcePage;
  try {
    page = await readRange(client, object, at, settings, cursor === null);
  } catch (e) {
    if (!(e instanceof SourceReadError)) throw e;
    throw new SourceReadError(`part ${index + 1} of ${s.parts.length} (s3://${s.bucket}/${part.key}): ${e.reason}`, e.line);
  }
  const items = page.items.map((item) => reportItem(item, s.columns, index, s.parts.length));
  if (page.done && index + 1 < s.parts.length) {
    return { items, cursor: { offset: 0, line: 0, row: 0, part: index + 1 }, done: false };
  }
  return { items, cursor: { ...(page.cursor as ObjectCursor), part: index }, done: page.done };
}

/** A report's row (CSV columns as strings, keyed by its URL-encoded `Key`) as the item of the object it lists. */
function reportItem(item: ItemWithJson, columns: string[], index: number, parts: number): ItemWithJson {
  const row = item.input as Record<string, string>;
  let key: string;
  try {
    key = listedKey(row.Key, 'url');
  } catch {
    throw new SourceReadError(`part ${index + 1} of ${parts}: the key ${JSON.stringify(row.Key)} is not URL-encoded`);
  }
  const input: Record<string, unknown> = {};
  for (const column of columns) {
    const value = row[column];
    if (column === 'Key') input.key = key;
    else if (column === 'Size' && /^\d+$/.test(value)) input.size = Number(value);
    else input[inputName(column)] = value;
  }
  return { key, input };
}
