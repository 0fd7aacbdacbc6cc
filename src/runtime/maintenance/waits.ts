// Waiting items' expiry (docs/design.md, "Waiting items: callbacks and sleeps"): callbacks past
// their timeout or heartbeat timeout, sleeps past their wake time, and answers that came before
// their item parked wake (pending, due now), found through the index of waits by wake time, never
// a scan of the items. Runs before dispatch, so a batch a wake gives runs again is sent workers in
// the same pass.
import { expireWaits } from '../../batch/index.js';
import type { MaintenanceService } from './service.js';

/** What waking due waits reads besides the database clock. */
export interface WaitsSettings {
  /**
   * The most waits one statement finds and wakes (a page: each statement is short, its locks held
   * briefly, whatever is due). @defaultValue 250
   */
  limit: number;
  /** The most statements one pass sends (more while each one is full). @defaultValue 80 */
  maxRounds: number;
}

/** The waits service's settings when none are given: up to 20,000 waits woken per pass, 250 a statement. */
export const WAITS_DEFAULTS: Readonly<WaitsSettings> = { limit: 250, maxRounds: 80 };

/** What waking due waits did. */
export interface WaitsPart {
  /** Items this pass woke (timed out, slept, or answered before they parked). */
  waitsWoken: number;
}

/**
 * Wake the waits due by the database clock, soonest first, `limit` per statement, while a
 * statement finds a full `limit` (at most `maxRounds`): their items are pending again, and their
 * parked batches want runs (the dispatch service sends them).
 */
export function waitsService(settings: Partial<WaitsSettings> = {}): MaintenanceService<'waits', WaitsPart> {
  const s = { ...WAITS_DEFAULTS, ...settings };
  return {
    name: 'waits',
    run: async ({ sql }) => {
      let woken = 0;
      for (let round = 0; round < s.maxRounds; round++) {
        const r = await expireWaits(sql, s.limit);
        woken += r.woken;
        if (r.woken + r.dropped + r.deferred < s.limit) break;
      }
      return { waitsWoken: woken };
    },
  };
}
