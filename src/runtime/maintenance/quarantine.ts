// Quarantine lifts: units whose quarantine is over are served again (docs/design.md, "Crashes
// and quarantine").
import { liftQuarantines } from '../../lease/index.js';
import type { MaintenanceService } from './service.js';

/** What lifting reads: nothing but the database clock (a quarantine's end is stored with it). */
export type QuarantineSettings = Record<string, never>;

/** Lifting's settings: it has none; the lengths of quarantines are the sweep's (`SWEEP_DEFAULTS`). */
export const QUARANTINE_DEFAULTS: Readonly<QuarantineSettings> = {};

/** What lifting did. */
export interface QuarantinePart {
  /** Units whose quarantine ended now. */
  lifted: number;
}

/** End every quarantine that is over, by the database clock (invariant 5). */
export function quarantineService(): MaintenanceService<'quarantine', QuarantinePart> {
  return { name: 'quarantine', run: async ({ sql }) => ({ lifted: await liftQuarantines(sql) }) };
}
