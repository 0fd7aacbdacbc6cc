// startBy of a trigger firing (docs/design.md, "Pause, deadline and startBy"): a start-batch
// event's `detail.startBy` (an instant) or `detail.startByMs` (ms after the event's `time`), and
// a chain rule's `startByMs` (ms after the batch that ended finished). A firing not started by
// then — late to arrive, or deferred at `maxOpen` for longer — is dropped with a reason, never
// started. Every comparison is made by the database clock.
import type { Log } from '../log.js';
import type { Sql } from '../store/index.js';
import * as q from './sql.js';

/** The code of a firing dropped because its startBy passed. */
export const START_BY_PASSED = 'start_by_passed';

/** The instant `ms` after the ISO 8601 `from`; undefined without `ms`. */
export function startByAfter(from: string, ms: number | undefined): Date | undefined {
  return ms === undefined ? undefined : new Date(Date.parse(from) + ms);
}

/** Why a firing was dropped for its startBy. */
export function lateReason(startBy: Date): string {
  return `not started by its startBy ${startBy.toISOString()}`;
}

/**
 * Whether a firing with `startBy` may no longer start: `startBy` has passed by the database
 * clock. A firing without one always may.
 */
export async function tooLate(sql: Sql, startBy: Date | undefined): Promise<boolean> {
  return startBy !== undefined && (await q.passed(sql, startBy));
}

/**
 * Drop the deferred firings whose startBy passed while they waited for a slot (one statement),
 * logging each at `warn` with its reason. Resolves to how many were dropped.
 */
export async function dropLateDeferred(sql: Sql, log: Log, count?: () => void): Promise<number> {
  const late = await q.dropLateDeferred(sql);
  for (const d of late) {
    log('warn', 'deferred trigger event dropped: its startBy passed', {
      tenant: d.tenant,
      requestKey: d.request_key,
      datasource: d.datasource,
      code: START_BY_PASSED,
      reason: lateReason(d.start_by),
    });
    count?.();
  }
  return late.length;
}
