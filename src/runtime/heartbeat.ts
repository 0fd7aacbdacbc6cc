import { Leaser } from '../lease/index.js';
import { isConnectionError, settleAfterThaw } from './db.js';

/** A heartbeat not answered within {@link ReconnectingLeaser.timeoutMs}. */
export class HeartbeatTimeoutError extends Error {
  readonly code = 'heartbeat_timeout';
  constructor(ms: number) {
    super(`heartbeat not answered within ${ms} ms`);
    this.name = 'HeartbeatTimeoutError';
  }
}

/**
 * A {@link Leaser} whose heartbeat, when it fails on a dead connection (reset, closed, the
 * server ending the session: see {@link isConnectionError}), is retried once on another
 * connection (DESIGN.md, "Serverless runtime": a heartbeat that fails on a stale connection is
 * retried once on a fresh one), and which gives up on a heartbeat not answered within
 * `timeoutMs`.
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
  /**
   * A heartbeat not answered within this is given up, ms (the statement may still complete
   * later); 0 waits for ever. A statement on a connection that went silent is otherwise only
   * ended by TCP keepalive, minutes later, and the leaser loop would wait for it. Default 0.
   */
  timeoutMs = 0;

  override async heartbeat(): Promise<{ lapsed: boolean }> {
    try {
      return await this.bounded(super.heartbeat());
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      this.onRetry?.(error);
      await settleAfterThaw();
      return this.bounded(super.heartbeat());
    }
  }

  private bounded<T>(p: Promise<T>): Promise<T> {
    if (!(this.timeoutMs > 0)) return p;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new HeartbeatTimeoutError(this.timeoutMs)), this.timeoutMs);
    });
    // A heartbeat given up on may still fail later: nobody awaits it then.
    p.catch(() => {});
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  }
}
