// Plain-text tables for the CLI's lists: every column as wide as its widest cell.

/** A column of {@link formatTable}: its heading, and `right` for numbers (aligned on the right). */
export interface Column {
  title: string;
  align?: 'left' | 'right';
}

/**
 * Lines of a table: the heading line, then one line per row. Each column is as wide as its
 * widest cell (the heading included) and columns are two spaces apart, so every cell of a
 * column starts at the same place; a line ends at its last character (no trailing spaces). A row
 * with fewer cells than columns leaves the rest empty.
 *
 * Widths count UTF-16 code units, right for the ASCII these lists hold (ids, names, numbers,
 * ISO times).
 */
export function formatTable(columns: Column[], rows: (string | number)[][]): string[] {
  const cells = rows.map((row) => columns.map((_, i) => String(row[i] ?? '')));
  const widths = columns.map((c, i) => Math.max(c.title.length, ...cells.map((row) => row[i].length)));
  const line = (row: string[]) =>
    row
      .map((cell, i) => (columns[i].align === 'right' ? cell.padStart(widths[i]) : cell.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.title)), ...cells.map(line)];
}
