// Fleet sizing: the desired count of live processes, the scheduler's invocations and
// retirements that follow it, and the fleet as the process rows tell it (docs/design.md, "Process
// membership and unit ownership"); the statements are in sql/fleet.ts.
import { InvalidSettingError } from '../errors.js';
import type { Sql } from '../store/index.js';
import { sharesOf } from './share.js';
import * as q from './sql/fleet-size.js';
import { heavyUnits } from './sql/ownership.js';

/**
 * Set the desired count of live processes.
 * @throws {InvalidSettingError} not a whole number from 0 to 1,000.
 */
export function setDesired(sql: Sql, desired: number): Promise<void> {
  if (!Number.isInteger(desired) || desired < 0 || desired > 1000) {
    throw new InvalidSettingError('desired', `must be a whole number from 0 to 1000, got ${desired}`);
  }
  return q.setDesired(sql, desired);
}

/** The fleet against its knob, and the weight its processes own. */
export interface Fleet {
  /** The desired count of live fleet processes. */
  desired: number;
  /** Live fleet processes not retiring: what the desired count is compared with. */
  live: number;
  /** Invocations sent and not yet confirmed, within their confirmation window. */
  coming: number;
  /** Live fleet processes asked to retire, not gone yet. */
  retiring: number;
  /** Live batch workers (sent for a batch; not counted, owning no unit). */
  batch: number;
  /** Total claimable weight (units with weight > 0). */
  totalWeight: number;
  /** The fair share of a live fleet process (see {@link sharesOf}); 0 with none live. */
  fairShare: number;
  /** The exact share the fair share is rounded up from (see {@link sharesOf}); 0 with none live. */
  evenShare: number;
  /** Weight each live fleet process not retiring owned at its last heartbeat, in no order. */
  reportedWeights: number[];
}

/**
 * Read the fleet from the process rows, the settings, the invocations and the totals row (never
 * a scan of the units; a few heavy units through their index).
 */
export async function readFleet(sql: Sql): Promise<Fleet> {
  const r = await q.fleetRows(sql);
  const { fairShare, evenShare } = await sharesOf(r.totalWeight, r.live, r.heavy, (a) => heavyUnits(sql, a));
  return {
    desired: r.desired,
    live: r.live,
    coming: r.coming,
    retiring: r.retiring,
    batch: r.batch,
    totalWeight: r.totalWeight,
    fairShare,
    evenShare,
    reportedWeights: r.weights,
  };
}
