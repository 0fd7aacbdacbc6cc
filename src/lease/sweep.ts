// The scheduler's sweep with the lease settings' crash rule (docs/design.md, "Process membership
// and unit ownership"); its statement is ./sql/sweep.ts.
import type { Sql } from '../store/index.js';
import { LEASE_DEFAULTS, crashRuleOf, type LeaseConfig } from './leaser.js';
import * as q from './sql/sweep.js';

/**
 * Delete processes expired longer than `cutoffMs` and free their units, in one statement
 * (the scheduler's sweep); a unit whose job ran when its owner died counts a crash, by
 * `crash` (`maxUnitCrashes`, `quarantineMs`, `maxQuarantineMs` of {@link LeaseConfig}; default
 * {@link LEASE_DEFAULTS}). Returns both counts.
 */
export function sweep(
  sql: Sql,
  cutoffMs: number = LEASE_DEFAULTS.sweepCutoffMs,
  crash: Partial<Pick<LeaseConfig, 'maxUnitCrashes' | 'quarantineMs' | 'maxQuarantineMs'>> = {},
): Promise<{ processes: number; units: number }> {
  return q.sweep(sql, cutoffMs, crashRuleOf({ ...LEASE_DEFAULTS, ...crash }));
}
