// The sweep: process rows expired past the cutoff are deleted and their units freed
// (docs/design.md, "Process membership and unit ownership").
import { LEASE_DEFAULTS, sweep, type LeaseConfig } from '../../lease/index.js';
import type { MaintenanceService } from './service.js';

/** What the sweep reads; the scheduler passes its `config.lease`. */
export type SweepSettings = Pick<LeaseConfig, 'sweepCutoffMs' | 'maxUnitCrashes' | 'quarantineMs' | 'maxQuarantineMs'>;

/** The sweep's settings when none are given: the lease's own defaults. */
export const SWEEP_DEFAULTS: Readonly<SweepSettings> = {
  /** How long a row stays after it expired before it is deleted, ms. @defaultValue `LEASE_DEFAULTS.sweepCutoffMs` (1 h) */
  sweepCutoffMs: LEASE_DEFAULTS.sweepCutoffMs,
  /** Crashes that quarantine a unit. @defaultValue `LEASE_DEFAULTS.maxUnitCrashes` (3) */
  maxUnitCrashes: LEASE_DEFAULTS.maxUnitCrashes,
  /** A first quarantine, ms. @defaultValue `LEASE_DEFAULTS.quarantineMs` (5 min) */
  quarantineMs: LEASE_DEFAULTS.quarantineMs,
  /** The longest quarantine, ms. @defaultValue `LEASE_DEFAULTS.maxQuarantineMs` (1 day) */
  maxQuarantineMs: LEASE_DEFAULTS.maxQuarantineMs,
};

/** What the sweep did. */
export interface SweepPart {
  /** Processes deleted by the sweep and units it freed. */
  swept: { processes: number; units: number };
}

/**
 * The sweep (docs/design.md, "Crashes and quarantine"): delete processes expired longer than
 * `sweepCutoffMs` and free their units; a unit whose job ran when its owner died counts a
 * crash. Gives up on a lock timeout, reporting nothing swept.
 */
export function sweepService(settings: Partial<SweepSettings> = {}): MaintenanceService<'sweep', SweepPart> {
  const s = { ...SWEEP_DEFAULTS, ...settings };
  return {
    name: 'sweep',
    run: async ({ sql }) => ({ swept: await sweep(sql, s.sweepCutoffMs, s) }),
    onLockTimeout: () => ({ swept: { processes: 0, units: 0 } }),
  };
}
