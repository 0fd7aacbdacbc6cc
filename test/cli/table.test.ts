// The CLI's lists as tables: each column as wide as its widest cell, whatever the cells hold.
import { describe, expect, it } from 'vitest';
import { formatTable } from '../../src/cli/table.js';

/** Where each cell of `line` starts, given the cells in order. */
function starts(line: string, cells: string[]): number[] {
  let from = 0;
  return cells.map((cell) => {
    const at = line.indexOf(cell, from);
    from = at + cell.length;
    return at;
  });
}

describe('a CLI table', () => {
  it('starts every cell of a column at the same place, a long tenant name or a wide count included', () => {
    const rows = [
      ['c19884d8', 'open', 'slow', 5, '40/400', 'globex-longer-name/local', '2026-12-02T04:18:30.447Z'],
      ['76e9669b', 'succeeded', 'checksum-with-a-long-name', 9, '12345/12345', 'a/b', '2026-12-02T04:18:29.127Z'],
      ['f2068520', 'failed', 'x', 0, '1/1', 'acme/local', '2026-12-02T04:18:27.844Z'],
    ];
    const lines = formatTable(
      [
        { title: 'id' },
        { title: 'status' },
        { title: 'job' },
        { title: 'prio', align: 'right' },
        { title: 'finished/total', align: 'right' },
        { title: 'tenant/datasource' },
        { title: 'created' },
      ],
      rows,
    );
    expect(lines).toHaveLength(4);
    // Left-aligned columns start together; right-aligned ones end together.
    const at = rows.map((row, i) => starts(lines[i + 1], row.map(String)));
    for (const c of [0, 1, 2, 5, 6]) expect(new Set(at.map((a) => a[c])).size, `column ${c}`).toBe(1);
    for (const c of [3, 4]) expect(new Set(at.map((a, r) => a[c] + String(rows[r][c]).length)).size, `column ${c}`).toBe(1);
    // The heading sits over its column; two spaces between the widest cells; no trailing space.
    const head = starts(lines[0], ['id', 'status', 'job', 'prio', 'finished/total', 'tenant/datasource', 'created']);
    expect(head[5]).toBe(at[0][5]);
    expect(head[4] + 'finished/total'.length).toBe(at[0][4] + '40/400'.length);
    expect(lines[2]).toBe(
      '76e9669b  succeeded  checksum-with-a-long-name     9     12345/12345  a/b                       2026-12-02T04:18:29.127Z',
    );
    expect(lines.every((l) => l === l.trimEnd())).toBe(true);
  });

  it('gives a short row empty cells', () => {
    expect(formatTable([{ title: 'a' }, { title: 'b' }], [['xyz']])).toEqual(['a    b', 'xyz']);
  });
});
