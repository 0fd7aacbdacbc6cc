// CSV into items (docs/design.md, "Items in, results out, events"): the header row names the
// columns (kept in the cursor for later pages), each record is an item keyed by its row number
// (zero-padded, numberedKey) or its key column.
import { checkInput } from './source-jsonl.js';
import { numberedKey, SourceReadError, type ObjectCursor, type ObjectSource, type ReadSettings } from './source-page.js';
import type { ItemInput } from './types.js';

/**
 * The records of `chunk` (from cursor `c`) as items: the first record of the object is its
 * header; every other must have the header's number of fields and a non-empty key.
 * @throws {SourceReadError} the CSV cannot be parsed, a ragged row, a missing or empty key column.
 */
export function csvRows(
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
    const key = s.keyColumn === undefined ? numberedKey(row, s.size) : input[s.keyColumn];
    if (key === '') throw new SourceReadError(`line ${line}: the key column ${JSON.stringify(s.keyColumn)} is empty`, line);
    checkInput(input, line, settings);
    items.push({ key, input });
  }
  return { items, row, columns };
}
