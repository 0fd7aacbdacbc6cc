import { LeaseholdError } from '../errors.js';
import { dropPoolOf, dropPoolsWithUnanswered } from './failover.js';
/** A store statement was not answered in time. */
export class StoreTimeoutError extends LeaseholdError {
  constructor(readonly ms: number) {
    super('store_timeout', `store statement did not answer within ${ms} ms`);
  }
}

/**
 * Settle with `query`, or reject with {@link StoreTimeoutError} after `ms` (cancelling the query
 * when it can be, and retiring the pool it was sent on, see `dropPoolOf`; `ms` ≤ 0 waits for ever). A connection that goes silent is otherwise only
 * noticed by TCP keepalive, minutes later, and a run or a process waiting on it would hold its
 * batch or units meanwhile. The statement may still complete on the server after the timeout:
 * callers treat a timeout like any store error whose outcome is unknown.
 */
export async function withTimeout<T>(query: Promise<T>, ms: number): Promise<T> {
  if (!(ms > 0)) return query;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      (query as { cancel?: () => void }).cancel?.();
      // Its connection may be silent: nothing more may be sent to it (docs/design.md, "Database
      // connections": silent connections).
      if (!dropPoolOf(query)) dropPoolsWithUnanswered(ms);
      reject(new StoreTimeoutError(ms));
    }, ms);
  });
  query.catch(() => {});
  try {
    return await Promise.race([query, expired]);
  } finally {
    clearTimeout(timer);
  }
}
