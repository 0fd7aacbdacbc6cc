import { Leaser } from '../lease/leaser.js';
import { isConnectionError, settleAfterThaw } from './db.js';

/**
 * A {@link Leaser} whose heartbeat, when it fails on a dead connection (reset, closed, the
 * server ending the session: see {@link isConnectionError}), is retried once on another
 * connection (docs/design.md, "Serverless runtime": a heartbeat that fails on a stale connection is
 * retried once on a fresh one). A heartbeat not answered in time is given up by the leaser
 * itself (`LeaseConfig.storeTimeoutMs`).
 *
 * Why here and not in `src/lease`: connections dying while a Lambda container is frozen is a
 * runtime concern; the leaser stays as it is and this subclass only wraps `heartbeat()`, which
 * its `run()` loop calls.
 *
 * The retry waits one event-loop turn first: postgres.js rejects the statement on a reset before
 * it has seen the socket close, and a statement sent in between is queued on the dead connection
 * and never answered (seen with postgres.js 3.4.9). After that turn the dead connection is
 * closed, so the retry runs on another one — a new connection when no other idle one is left
 * (after a thaw, `settleAfterThaw` has already closed the connections idle past the idle
 * timeout).
 *
 * Any other error, a timeout, or a second failure is thrown as before (the leaser reports it and
 * tries on the next interval). A heartbeat that upserted its row but failed while re-reading a
 * lapsed ownership is retried too: the retry sees no lapse, and the next tick re-reads ownership.
 */
export class ReconnectingLeaser extends Leaser {
  /** Called when a heartbeat is retried (metrics, logs). */
  onRetry: ((error: unknown) => void) | undefined;

  override async heartbeat(): Promise<{ lapsed: boolean }> {
    try {
      return await super.heartbeat();
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      this.onRetry?.(error);
      await settleAfterThaw();
      return super.heartbeat();
    }
  }
}
