// Batch deadlines: open batches whose deadline has passed end `failed` with reason `deadline`
// (docs/design.md, "Pause, deadline and startBy"), found through the partial index of open
// batches with a deadline, never a scan of the batches.
import { endPastDeadlines } from '../../batch/index.js';
import type { MaintenanceService } from './service.js';

/** What ending batches past their deadline reads besides the database clock. */
export interface DeadlineSettings {
  /** The most batches one pass ends; the rest wait for the next pass. @defaultValue 100 */
  limit: number;
}

/** The deadline service's settings when none are given. */
export const DEADLINE_DEFAULTS: Readonly<DeadlineSettings> = { limit: 100 };

/** What ending batches past their deadline did. */
export interface DeadlinesPart {
  /** Batches this pass ended for their deadline. */
  pastDeadline: number;
}

/**
 * End every open batch past its deadline (at most `limit` a pass, soonest first): `failed` with
 * reason `deadline`, its runs told to stop, its Batch Finished event written (the events service
 * later in the same scheduler run sends it). Runs before the deferred firings, so a slot a
 * deadline frees is used in the same pass.
 */
export function deadlinesService(settings: Partial<DeadlineSettings> = {}): MaintenanceService<'deadlines', DeadlinesPart> {
  const s = { ...DEADLINE_DEFAULTS, ...settings };
  return {
    name: 'deadlines',
    run: async ({ sql }) => ({ pastDeadline: (await endPastDeadlines(sql, s.limit)).length }),
  };
}
