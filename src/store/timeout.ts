import { LeaseholdError } from '../errors.js';
import { cancelQuery, dropPoolOf, dropPoolsWithUnanswered, queryWait, trackQueries } from './failover.js';
/** A store statement was not answered in time. */
export class StoreTimeoutError extends LeaseholdError {
  constructor(readonly ms: number) {
    super('store_timeout', `store statement did not answer within ${ms} ms`);
  }
}

/**
 * Settle with `query`, or reject with {@link StoreTimeoutError} once it has taken `ms` (`ms` ≤ 0
 * waits for ever). A connection that goes silent is otherwise only noticed by TCP keepalive,
 * minutes later, and a run or a process waiting on it would hold its batch or units meanwhile
 * (docs/design.md, "Database connections").
 *
 * `query` is a query of a pool from `connect`, or a function that runs statements (an async
 * function of the `q.*` kind): its statements are then known, which the rules below need.
 * - Time spent waiting for a connection (in the pool's queue, or pipelined behind a busy
 *   statement of its connection) does not count: a statement is timed from when the server
 *   begins on it. A busy pool is not a silent server. But a statement that waits `ms` while its
 *   pool makes no progress at all (no statement of the pool begun or answered: a connection
 *   that cannot be opened, a server gone silent) times out.
 * - On the timeout every statement of `query` still unanswered is cancelled on the server
 *   (postgres.js's cancel request), so a timed-out claim or move holds no lock after it; and the
 *   pool it ran on is retired (see `dropPoolOf`): later statements open fresh connections, and
 *   the old connections are ended within `ms / 2`, so a silent one is gone within `ms` of the
 *   timeout. For a promise that is neither, nothing is cancelled and every pool with a statement
 *   unanswered for `ms` is retired.
 *
 * The statement may still complete on the server before the cancel reaches it: callers treat a
 * timeout like any store error whose outcome is unknown.
 */
export async function withTimeout<T>(query: Promise<T> | (() => Promise<T>), ms: number): Promise<T> {
  const made = new Set<object>();
  const promise = typeof query === 'function' ? trackQueries(query, made) : query;
  if (typeof query !== 'function') made.add(query);
  if (!(ms > 0)) return promise;
  let timer: NodeJS.Timeout | undefined;
  const started = performance.now();
  const expired = new Promise<never>((_, reject) => {
    const check = () => {
      // A statement that waited for a connection gets that wait back; one still waiting is
      // looked at again once the time it would have left passed.
      const now = performance.now();
      let waited = 0;
      let queued = false;
      let stalled = false;
      for (const q of made) {
        const w = queryWait(q, now);
        waited += w.queuedMs;
        queued ||= w.state === 'queued';
        // Waiting while its pool answers nothing at all for `ms` (no connection can be opened,
        // the server went silent) is no busy pool: it counts.
        stalled ||= w.state === 'queued' && w.stalledMs >= ms;
      }
      const left = started + ms + waited - now;
      if (!stalled && (left > 0 || queued)) return void (timer = setTimeout(check, Math.max(1, Math.ceil(left))));
      expire();
    };
    const expire = () => {
      const endAfterMs = Math.max(100, ms / 2);
      const known = [...made].filter((q) => queryWait(q).state !== 'unknown');
      // Its connection may be silent: nothing more may be sent to it.
      // A pool that answered nothing while a statement waited in its queue is retired too.
      for (const q of known) if (queryWait(q).state === 'running' || queryWait(q).stalledMs >= ms) dropPoolOf(q, endAfterMs);
      if (known.length === 0) dropPoolsWithUnanswered(ms, endAfterMs);
      for (const q of known) cancelQuery(q);
      reject(new StoreTimeoutError(ms));
    };
    timer = setTimeout(check, ms);
  });
  promise.catch(() => {});
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}
