// Completing a waiting item's callback (docs/design.md, "Waiting items: callbacks and sleeps"):
// the token is checked (its signature, before any statement touches an item), then one
// transaction stores the answer and wakes the item. What a completion may meet — a timeout that
// came first, a second completion, a cancelled batch, a forged or stale token — each has one
// answer here, which the API maps to a status.
import type { Sql } from '../store/index.js';
import { verifyCallbackToken } from './callback-token.js';
import { CallbackTimeoutError } from './errors.js';
import { BatchFinishedError, CallbackCompletedError, CallbackNotFoundError } from './request-errors.js';
import { InvalidRequestError } from '../errors.js';
import { completeWait, type Completion } from './sql/waits.js';
import { encodeOutput, storableText } from './values.js';

export { expireWaits, type ExpiryResult } from './sql/waits.js';

/** What a completion posts: `succeed` with a JSON result, `fail` with an error text, or `heartbeat`. */
export type CallbackCompletion =
  { action: 'succeed'; result: unknown } | { action: 'fail'; error: string } | { action: 'heartbeat' };

/** How a completion was taken. */
export interface CallbackAnswer {
  batchId: string;
  key: string;
  /**
   * `completed`: stored now; `repeated`: the same answer was stored before (nothing changed);
   * `heartbeat`: the heartbeat deadline moved.
   */
  outcome: 'completed' | 'repeated' | 'heartbeat';
  /** The item is pending again (false: its attempt still runs and wakes once it parks). */
  woken: boolean;
  /** The batch had parked and wants a run again: send it a worker. */
  unparked: boolean;
}

/** Largest callback result, bytes of JSON (256 KiB, an item output's default bound). */
export const MAX_CALLBACK_RESULT_BYTES = 262_144;

/** Tries of a completion that PostgreSQL aborted to break a deadlock (a completion racing an end). */
const DEADLOCK_TRIES = 3;

/**
 * Complete (or heartbeat) the callback `token` names. Idempotent: the same answer again answers
 * `repeated`.
 * @throws {InvalidCallbackTokenError} the token is malformed or not signed by this deployment.
 * @throws {CallbackNotFoundError} no wait matches: its attempt ended, or a later wait replaced it.
 * @throws {CallbackCompletedError} completed before with another answer, or heartbeat after a completion.
 * @throws {CallbackTimeoutError} the wait timed out first.
 * @throws {BatchFinishedError} the item's batch is finished or cancelled: nothing is stored.
 * @throws {InvalidRequestError} a `succeed` result that cannot be stored (over 256 KiB of JSON, a
 *   NUL or a lone surrogate, a cycle): nothing is stored.
 */
export async function completeCallback(sql: Sql, token: string, c: CallbackCompletion): Promise<CallbackAnswer> {
  const claims = await verifyCallbackToken(sql, token);
  let completion: Completion;
  if (c.action === 'succeed') {
    const e = encodeOutput(c.result, MAX_CALLBACK_RESULT_BYTES, { subject: 'result:', limit: null });
    // A result that cannot be stored is the caller's to fix: a 400, never a 500 it may retry.
    if (e.error !== undefined) throw new InvalidRequestError(e.error);
    completion = { action: 'succeed', result: e.json ?? 'null' };
  } else if (c.action === 'fail') {
    completion = { action: 'fail', error: storableText(String(c.error)) };
  } else completion = c;
  for (let tries = 1; ; tries++) {
    try {
      const r = await completeWait(sql, { batchId: claims.batchId, key: claims.key, id: claims.waitId, completion });
      const base = { batchId: claims.batchId, key: claims.key };
      switch (r.outcome) {
        case 'completed':
          return { ...base, outcome: 'completed', woken: r.woken, unparked: r.unparked };
        case 'repeated':
          return { ...base, outcome: 'repeated', woken: false, unparked: false };
        case 'beaten':
          return { ...base, outcome: 'heartbeat', woken: false, unparked: false };
        case 'conflict':
          if (r.status === 'timedOut') throw new CallbackTimeoutError('timeout');
          throw new CallbackCompletedError(r.status);
        case 'finished':
          throw new BatchFinishedError(claims.batchId, r.status);
        case 'gone':
          throw new CallbackNotFoundError();
      }
    } catch (e) {
      if ((e as { code?: unknown } | null)?.code !== '40P01' || tries >= DEADLOCK_TRIES) throw e;
    }
  }
}
