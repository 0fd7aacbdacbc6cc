// The fair share and the balance of the fleet (docs/design.md, "Process membership and unit
// ownership"): pure arithmetic over figures the statements of sql.ts read through indexes.

/**
 * Reads more heavy units: weights in `(above, atMost]` (and above 1), heaviest first, at most
 * `limit` of them.
 */
export type MoreHeavy = (a: { above: number; atMost: number; limit: number }) => Promise<number[]>;

/**
 * The fair share of `live` processes over `totalWeight`: `ceil(totalWeight / live)`, except that
 * a unit heavier than that is one process's whole share — it cannot be split, so counting it
 * against the others would leave them short — and the rest is shared by the other processes,
 * repeated while some unit is heavier than the new share (water-filling). At most `live − 1`
 * units are left out. With weight left to own, the share is at least 1, so an empty process
 * can always take a unit.
 *
 * @param heavy weights of the units heavier than `floor(totalWeight / live)` (and than 1),
 *   heaviest first, at most `live` of them (as the share read returns them).
 * @param more reads the units between a lower share and the previous bound, when every unit of
 *   `heavy` turned out heavier than the share (rare: a second index probe, then done).
 * @returns the share, in weight; 0 when nothing is claimable or no process is live.
 */
export async function fairShareOf(totalWeight: number, live: number, heavy: number[], more: MoreHeavy): Promise<number> {
  if (live <= 0 || totalWeight <= 0) return 0;
  let rest = totalWeight;
  let n = live;
  let bound = Math.floor(totalWeight / live);
  let batch = heavy;
  for (;;) {
    let settled = false;
    for (const w of batch) {
      // A unit no heavier than an even split of what is left is not heavy, nor is any lighter one.
      if (n <= 1 || w * n <= rest) {
        settled = true;
        break;
      }
      rest -= w;
      n--;
    }
    const level = Math.floor(rest / n);
    if (settled || batch.length === 0 || n <= 1 || level >= bound) break;
    // Every unit read was heavy: units between the new level and the old bound may be too.
    batch = await more({ above: level, atMost: bound, limit: n - 1 });
    bound = level;
  }
  return Math.max(1, Math.ceil(rest / n));
}

/** How evenly live processes own their weight against the fair share. */
export interface Balance {
  /** Least weight a live process owns; 0 when there is none. */
  minWeight: number;
  /** Most weight a live process owns; 0 when there is none. */
  maxWeight: number;
  /** Processes owning less than `fairShare × (1 − hysteresis)`: they are starving. */
  starving: number;
}

/**
 * The spread of `weights` (one per live fleet process) and how many are starving.
 * @param hysteresis the shedding hysteresis (`LeaseConfig.shedHysteresis`, default 0.2).
 */
export function balanceOf(weights: readonly number[], fairShare: number, hysteresis: number): Balance {
  if (weights.length === 0) return { minWeight: 0, maxWeight: 0, starving: 0 };
  const line = fairShare * (1 - hysteresis);
  return {
    minWeight: Math.min(...weights),
    maxWeight: Math.max(...weights),
    starving: weights.filter((w) => w < line).length,
  };
}
