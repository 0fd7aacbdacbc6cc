// Waiting in tests: poll a condition until it holds, or hold a promise whose settling the test
// decides.
import { sleep } from './time.js';

/** Options of `waitFor`: give up after `timeoutMs` (default 10,000 ms), check every `everyMs` (default 10 ms). */
export interface WaitOptions {
  timeoutMs?: number;
  everyMs?: number;
}

/**
 * Poll `check` until it returns a truthy value and return that value.
 * @throws Error `timed out after … ms waiting for <what>` once `timeoutMs` has passed.
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T> | T,
  { timeoutMs = 10_000, everyMs = 10 }: WaitOptions = {},
): Promise<NonNullable<T>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v as NonNullable<T>;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** A promise with its resolve and reject in hand. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** A promise the test settles itself, when it decides. */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
