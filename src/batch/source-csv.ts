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
  let records: string[][];
  try {
    // Without csv-parse's `info` (an object per record), which halves its speed: a record's line
    // is only wanted for an error, and found then by parsing the chunk again with it.
    records = parseCsv(chunk, options) as never;
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
    columns.forEach((name, i) => (input[name] = record[i]));
    const key = s.keyColumn === undefined ? numberedKey(row, s.size) : input[s.keyColumn];
    if (key === '') {
      const line = lineOf(index);
      throw new SourceReadError(`line ${line}: the key column ${JSON.stringify(s.keyColumn)} is empty`, line);
    }
    try {
      checkInput(input, 0, settings);
    } catch {
      checkInput(input, lineOf(index), settings);
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
