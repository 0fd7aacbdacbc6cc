// CSV into items (docs/design.md, "Items in, results out, events"): its options as Step
// Functions' ItemReader has them (delimiter, header row or given columns, quote character); the
// header row names the columns (kept in the cursor for later pages), each record is an item
// keyed by its row number (zero-padded, numberedKey) or its key column.
import { checkInput } from './source-jsonl.js';
import { numberedKey, SourceReadError, type ObjectCursor, type ObjectSource, type ReadSettings } from './source-page.js';
import type { CsvDelimiter, ItemInput } from './types.js';

/** The character of each delimiter name. */
export const CSV_DELIMITERS: Record<CsvDelimiter, string> = { comma: ',', tab: '\t', semicolon: ';', pipe: '|', space: ' ' };

/** The quote byte of a CSV source (default `"`), null when it has no quoting. */
export function csvQuote(s: Pick<ObjectSource, 'quote'>): number | null {
  if (s.quote === null) return null;
  return (s.quote ?? '"').charCodeAt(0);
}

/**
 * The records of `chunk` (from cursor `c`) as items: the object's first record is its header
 * unless the source gives the columns (`header: [...]`); every other record must have the
 * header's number of fields and a non-empty key. Each item's input is an object with one own
 * property per column and no prototype, so a column named `__proto__` is kept as any other.
 * @throws {SourceReadError} the CSV cannot be parsed, a column named twice, a ragged row, a
 * missing or empty key column.
 */
export function csvRows(
  parseCsv: typeof import('csv-parse/sync').parse,
  chunk: Buffer,
  c: ObjectCursor,
  s: ObjectSource,
  settings: ReadSettings,
): { items: ItemInput[]; row: number; columns?: string[] } {
  const quote = s.quote === null ? false : (s.quote ?? '"');
  const options = {
    relax_column_count: true,
    skip_empty_lines: true,
    delimiter: CSV_DELIMITERS[s.delimiter ?? 'comma'],
    quote,
    escape: quote === false ? null : quote,
  };
  let records: string[][] | undefined = quote === false ? undefined : plainCsv(chunk, options.delimiter, quote);
  try {
    // Without csv-parse's `info` (an object per record), which halves its speed: a record's line
    // is only wanted for an error, and found then by parsing the chunk again with it.
    records ??= parseCsv(chunk, options) as never;
  } catch (e) {
    const lines = (e as { lines?: number }).lines;
    const line = lines === undefined ? null : c.line + lines;
    throw new SourceReadError(
      `the CSV cannot be parsed${line === null ? '' : ` at line ${line}`}: ${(e as Error).message}`,
      line,
    );
  }
  const lineOf = (index: number) =>
    c.line + (parseCsv(chunk, { ...options, info: true }) as unknown as { info: { lines: number } }[])[index].info.lines;
  const given = Array.isArray(s.header) ? s.header : undefined;
  if (given) uniqueColumns(given, 'given header', null);
  let columns = given ?? c.columns;
  let row = c.row;
  const items: ItemInput[] = [];
  for (const [index, record] of records.entries()) {
    if (columns === undefined) {
      columns = record;
      uniqueColumns(columns, 'header', lineOf(index));
      if (s.keyColumn !== undefined && !columns.includes(s.keyColumn)) {
        throw new SourceReadError(
          `keyColumn ${JSON.stringify(s.keyColumn)} is not a column of the header (${columns.join(', ')})`,
          lineOf(index),
        );
      }
      continue;
    }
    if (record.length !== columns.length) {
      const line = lineOf(index);
      throw new SourceReadError(
        `line ${line} has ${record.length} fields; the ${given ? 'given header' : 'header'} has ${columns.length}`,
        line,
      );
    }
    row++;
    // No prototype: a column named `__proto__` is an own property, not the object's prototype
    // (an assignment on `{}` would drop it, and JSON.stringify with it).
    const input = Object.create(null) as Record<string, string>;
    // `bound`: a sixth of the most bytes the input's JSON can take (each UTF-16 unit of a name or
    // value writes as at most 6 bytes, `\u001f`; each column adds 6 of quotes, colon and comma),
    // so checkInput writes the JSON only for a row that may be past the limit.
    let bound = 1;
    for (let i = 0; i < columns.length; i++) {
      input[columns[i]] = record[i];
      bound += 1 + columns[i].length + record[i].length;
    }
    const key = s.keyColumn === undefined ? numberedKey(row, s.size) : input[s.keyColumn];
    if (key === '') {
      const line = lineOf(index);
      throw new SourceReadError(`line ${line}: the key column ${JSON.stringify(s.keyColumn)} is empty`, line);
    }
    try {
      checkInput(input, 0, settings, bound);
    } catch {
      checkInput(input, lineOf(index), settings, bound);
    }
    items.push({ key, input });
  }
  // Given columns are the source's, not the cursor's.
  return { items, row, ...(given || columns === undefined ? {} : { columns }) };
}

/**
 * Refuse a header that names a column twice: one of the two would be lost from every item.
 * @throws {SourceReadError} naming the column, `what` (`header`, `given header`) and its line.
 */
function uniqueColumns(columns: readonly string[], what: string, line: number | null): void {
  const seen = new Set<string>();
  for (const name of columns) {
    if (seen.has(name)) {
      throw new SourceReadError(
        `the ${what} names the column ${JSON.stringify(name)} twice: each column must have a name of its own`,
        line,
      );
    }
    seen.add(name);
  }
}

/**
 * The records of `chunk` when it is plain CSV, else undefined (csv-parse reads it then): every
 * line ends with LF (the last may end the chunk instead), none is empty, no CR anywhere, and each
 * field is either unquoted with no `quote` in it, or quoted from its first character to its last
 * (a doubled quote inside is one quote; a line end inside is the field's). On such text
 * csv-parse with csvRows' options gives these same records; it took 10-20 µs a record of an
 * S3 Inventory report under load, most of reading one, where this takes about 1.
 * `delimiter` and `quote` are one character each.
 */
export function plainCsv(chunk: Buffer, delimiter: string, quote: string): string[][] | undefined {
  if (quote === delimiter || quote === '\n' || quote === '\r') return undefined;
  const text = chunk.toString('utf8');
  // A byte that is not UTF-8: csv-parse decodes field by field, which this leaves to it.
  if (text.includes('\r') || text.includes('\uFFFD')) return undefined;
  const d = delimiter.charCodeAt(0);
  const q = quote.charCodeAt(0);
  const records: string[][] = [];
  let record: string[] = [];
  let i = 0;
  const n = text.length;
  while (i < n) {
    // At a field's start (or at a line's start: an empty line is left to csv-parse).
    if (record.length === 0 && text.charCodeAt(i) === 0x0a) return undefined;
    let value: string;
    if (text.charCodeAt(i) === q) {
      value = '';
      let from = i + 1;
      for (;;) {
        const close = text.indexOf(quote, from);
        if (close === -1) return undefined;
        value += text.slice(from, close);
        if (text.charCodeAt(close + 1) === q) {
          value += quote;
          from = close + 2;
          continue;
        }
        i = close + 1;
        break;
      }
    } else {
      let end = i;
      for (; end < n; end++) {
        const c = text.charCodeAt(end);
        if (c === d || c === 0x0a) break;
        if (c === q) return undefined;
      }
      value = text.slice(i, end);
      i = end;
    }
    record.push(value);
    if (i >= n) break;
    const c = text.charCodeAt(i);
    if (c === d) {
      i++;
      // A delimiter that ends the text leaves an empty last field.
      if (i >= n) record.push('');
    } else if (c === 0x0a) {
      records.push(record);
      record = [];
      i++;
    } else return undefined;
  }
  if (record.length > 0) records.push(record);
  return records;
}
