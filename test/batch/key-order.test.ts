// S3's order of keys (UTF-8 bytes), as the listing chains compare them (src/batch/source.ts,
// compareKeys; docs/design.md, "Sources and results"): checked against the bytes themselves on
// keys drawn from characters on both sides of every boundary where UTF-16 order and byte order
// could part (U+0080, U+0800, the surrogates, U+E000, U+10000).
import { describe, expect, it } from 'vitest';
import { compareKeys } from '../../src/batch/source.js';

const CHARS = [
  'a',
  'Z',
  ' ',
  '~',
  '\u0000',
  '\u007f',
  'é',
  '\u07ff',
  '\u0800',
  '中',
  '\ud7ff',
  '\ue000',
  '\uffff',
  '😀',
  '\u{10000}',
  '\u{10ffff}',
];

describe("S3's key order", () => {
  it('is the order of the UTF-8 bytes, for 100,000 pairs of mixed keys', () => {
    // A fixed sequence (a linear congruential generator), so a failure repeats.
    let seed = 12345;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const key = () => Array.from({ length: 1 + next(4) }, () => CHARS[next(CHARS.length)]).join('');
    const wrong: string[] = [];
    for (let i = 0; i < 100_000; i++) {
      const [a, b] = [key(), key()];
      if (Math.sign(compareKeys(a, b)) !== Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
        wrong.push(`${JSON.stringify(a)} ${JSON.stringify(b)}`);
      }
    }
    expect(wrong.slice(0, 5)).toEqual([]);
    // The pair JavaScript's < gets wrong.
    expect('\u{1f600}' < '\uffff').toBe(true);
    expect(compareKeys('\u{1f600}', '\uffff')).toBeGreaterThan(0);
    expect(compareKeys('a', 'ab')).toBeLessThan(0);
    expect(compareKeys('ab', 'ab')).toBe(0);
  });
});
