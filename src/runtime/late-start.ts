// A worker invocation that starts past its deadline (docs/deploy.md, "Faults and how leasehold
// answers them"): an init that spilled into the invoke (a slow cold start in a VPC) leaves it
// less than its deadline margin, or nothing. It acts on nothing and hands its event on once.
import type { Dispatcher, WorkerEvent } from '../batch/dispatch.js';
import { errorFields, type Log } from '../log.js';

/** What a late invocation answers (the worker adds its process id and role). */
export interface LateStart {
  runs: [];
  reason: 'late';
  continued: [];
  /** 1 when the event was sent again, else 0. */
  replacements: number;
}

/** The longest a late invocation spends re-sending its event, ms: it returns within a second. */
export const LATE_RESEND_MS = 800;

/**
 * The worker's answer when its invocation began with `remaining time ≤ deadlineMarginMs` (or its
 * deadline signal already aborted): no statement at all (no process row, no claim of its
 * invocation, a unit or a batch), one warning, and the same event sent again once, marked
 * `late`, so the invocation it carries (still pending, unclaimed) is served by a delivery that
 * has time; a `late` event that starts late too is not sent again (the invocation lapses and the
 * scheduler invokes anew). The re-send waits at most {@link LATE_RESEND_MS}; its failure is logged
 * in the same warning, never thrown.
 */
export async function startedLate(
  event: WorkerEvent,
  context: { getRemainingTimeInMillis(): number },
  deps: { dispatcher: Dispatcher; log: Log },
): Promise<LateStart> {
  const remainingMs = context.getRemainingTimeInMillis();
  let replacements = 0;
  let error: unknown;
  if (!event.late) {
    try {
      // An invoke, not a statement: a plain time limit (the store's withTimeout would look for
      // statements of its pools to cancel).
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the re-send took over ${LATE_RESEND_MS} ms`)), LATE_RESEND_MS);
      });
      try {
        await Promise.race([deps.dispatcher.invoke({ ...event, late: true }), late]);
      } finally {
        clearTimeout(timer);
      }
      replacements = 1;
    } catch (e) {
      error = e;
    }
  }
  deps.log('warn', 'invocation started past its deadline (its init took the time): acted on nothing', {
    remainingMs,
    ...event,
    resent: replacements === 1,
    ...(error === undefined ? {} : { error: errorFields(error) }),
  });
  return { runs: [], reason: 'late', continued: [], replacements };
}
