// Seeded random numbers for tests and benches whose draws must repeat run after run.

/** A small seeded PRNG (mulberry32): repeatable random numbers in [0, 1), the same for one seed. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * How many of `values` fall in each of `bins` equal bins of `[0, top)` (a value ≥ `top` counts in
 * the last bin, one below 0 in the first).
 */
export function histogram(values: readonly number[], top: number, bins: number): number[] {
  const counts = new Array<number>(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.max(0, Math.floor((v / top) * bins)))]++;
  return counts;
}

/** One line of a histogram: a bar per bin (▁ to █, scaled to the largest) and the counts. */
export function histogramLine(counts: readonly number[]): string {
  const bars = '▁▂▃▄▅▆▇█';
  const most = Math.max(1, ...counts);
  const bar = counts.map((c) => (c === 0 ? ' ' : bars[Math.min(7, Math.floor((c / most) * 7.999))])).join('');
  return `${bar} ${counts.join(' ')}`;
}

/** The most of `times` (ms, any order) that fall within one window of `windowMs`. */
export function mostInWindow(times: readonly number[], windowMs: number): number {
  const t = [...times].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < t.length; i++) {
    while (t[i]! - t[j]! >= windowMs) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}
