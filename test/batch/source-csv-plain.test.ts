// The plain-CSV reader (src/batch/source-csv.ts, plainCsv) against csv-parse with the options a
// CSV source reads with: the same records whenever it answers, and no answer where csv-parse
// must judge (docs/design.md, "Sources and results").
import { parse } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import { plainCsv } from '../../src/batch/source-csv.js';

const csvParse = (text: string, delimiter: string, quote: string) => {
  try {
    return parse(Buffer.from(text), {
      relax_column_count: true,
      skip_empty_lines: true,
      delimiter,
      quote,
      escape: quote,
    }) as string[][];
  } catch (e) {
    return (e as Error).message;
  }
};

describe('plain CSV', () => {
  it('gives the records csv-parse gives, for plain text of every shape', () => {
    const cases = [
      '',
      'a,b,c\n1,2,3\n',
      'a,b,c\n1,2,3',
      '"bench-src","data/obj+0000001.json","1","2024-05-01T00:00:00.000Z","1","STANDARD"\n',
      '"a ""quoted"" word",x\n"",""\n',
      '"two\nlines",y\n',
      'a,\n,b\n,\n',
      'a,b,',
      'é,ü✓,"😀"\n',
      'ragged\na,b,c\n',
      '"""",x\n',
    ];
    for (const text of cases)
      expect(plainCsv(Buffer.from(text), ',', '"'), JSON.stringify(text)).toEqual(csvParse(text, ',', '"'));
    expect(plainCsv(Buffer.from("a;'b;c'\n"), ';', "'")).toEqual(csvParse("a;'b;c'\n", ';', "'"));
    expect(plainCsv(Buffer.from('a\tb\n'), '\t', '"')).toEqual([['a', 'b']]);
  });

  it('leaves to csv-parse what only it may judge: CR, empty lines, stray quotes, bytes that are not UTF-8', () => {
    const cases = ['a,b\r\n1,2\r\n', 'a\n\nb\n', '\n', 'a"b,c\n', '"a"b,c\n', '"open,c\n', '"a" ,b\n'];
    for (const text of cases) expect(plainCsv(Buffer.from(text), ',', '"'), JSON.stringify(text)).toBeUndefined();
    expect(plainCsv(Buffer.from([0x61, 0xff, 0x2c, 0x62, 0x0a]), ',', '"')).toBeUndefined();
    expect(plainCsv(Buffer.from('a,b\n'), ',', ',')).toBeUndefined();
  });

  it('agrees with csv-parse on random text of quotes, delimiters and line ends', () => {
    const alphabet = ['a', 'b', ',', '"', '\n', ' ', 'é', '""'];
    let seed = 7;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31);
    let answered = 0;
    for (let round = 0; round < 5_000; round++) {
      let text = '';
      const len = next() % 24;
      for (let i = 0; i < len; i++) text += alphabet[next() % alphabet.length];
      const mine = plainCsv(Buffer.from(text), ',', '"');
      if (mine === undefined) continue;
      answered++;
      expect(mine, JSON.stringify(text)).toEqual(csvParse(text, ',', '"'));
    }
    // Most random texts hold a stray quote or an empty line; enough are plain to mean something.
    expect(answered).toBeGreaterThan(500);
  });
});
