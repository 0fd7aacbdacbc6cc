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
  return (await sharesOf(totalWeight, live, heavy, more)).fairShare;
}

/** The fair share and the exact share it is rounded up from. */
export interface Shares {
  /** {@link fairShareOf}: whole weight, at least 1 with weight to own; 0 with none or no process. */
  fairShare: number;
  /**
   * What a process owns in an exact split, before rounding up: the weight left after the heavy
   * units over the processes left (8 over 3 processes: 2.67, whose fair share is 3); 0 with no
   * weight or no process. A process's weight against it is its real share of the work.
   */
  evenShare: number;
}

/**
 * {@link fairShareOf} and the exact share it rounds up ({@link Shares}); the same arguments,
 * the same reads.
 */
export async function sharesOf(totalWeight: number, live: number, heavy: number[], more: MoreHeavy): Promise<Shares> {
  if (live <= 0 || totalWeight <= 0) return { fairShare: 0, evenShare: 0 };
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
  return { fairShare: Math.max(1, Math.ceil(rest / n)), evenShare: rest / n };
}

/**
 * The weight below which a live process is starving: `fairShare × (1 − hysteresis)`, but never
 * above `fairShare − 1`. The fair share is rounded up, so a fleet split as evenly as it can be
 * has processes one below it (8 over 3 processes: 3, 3 and 2); they are not starving.
 * @param hysteresis the shedding hysteresis (`LeaseConfig.shedHysteresis`, default 0.2).
 */
export function starvingBelow(fairShare: number, hysteresis: number): number {
  return Math.min(fairShare * (1 - hysteresis), fairShare - 1);
}

/** How evenly live processes own their weight against the fair share. */
export interface Balance {
  /** Least weight a live process owns; 0 when there is none. */
  minWeight: number;
  /** Most weight a live process owns; 0 when there is none. */
  maxWeight: number;
  /** Processes owning less than {@link starvingBelow} the fair share: they are starving. */
  starving: number;
}

/**
 * The spread of `weights` (one per live fleet process) and how many are starving.
 * @param hysteresis the shedding hysteresis (`LeaseConfig.shedHysteresis`, default 0.2).
 */
export function balanceOf(weights: readonly number[], fairShare: number, hysteresis: number): Balance {
  if (weights.length === 0) return { minWeight: 0, maxWeight: 0, starving: 0 };
  const line = starvingBelow(fairShare, hysteresis);
  return {
    minWeight: Math.min(...weights),
    maxWeight: Math.max(...weights),
    starving: weights.filter((w) => w < line).length,
  };
}
