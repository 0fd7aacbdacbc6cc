/**
 * What the runner waits with. Beats, retry waits and move backoff all sleep through a clock,
 * so tests can drive time without sleeping. Times are application-side only and are never
 * compared with stored timestamps (invariant 5 (docs/design.md)).
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolve after `ms` milliseconds, or at once (resolving) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The real clock: `Date.now()` and `setTimeout`. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const onAbort = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(
        () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        Math.max(0, ms),
      );
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};

/** The reason {@link sleepUntil}'s own signal is aborted with. */
const WAKE = 'woken';

/**
 * Sleep on `clock` for `ms`, until `signal` aborts, or until one of `ends` settles, whichever
 * comes first. The sleep has a signal of its own, aborted as the wait ends, so neither its timer
 * nor a listener on `signal` outlives the wait: a plain `clock.sleep(ms, signal)` raced with
 * other promises keeps its listener on `signal` until its time is up, and a loop that waits so,
 * woken early turn after turn, piles listeners up on `signal` (Node's MaxListenersExceededWarning).
 */
export async function sleepUntil(clock: Clock, ms: number, signal: AbortSignal, ends: Promise<unknown>[] = []): Promise<void> {
  if (signal.aborted) return;
  const woken = new AbortController();
  // With a reason (nobody reads it): aborting without one builds a DOMException and its stack.
  const wake = () => woken.abort(WAKE);
  signal.addEventListener('abort', wake, { once: true });
  try {
    await Promise.race([clock.sleep(ms, woken.signal), ...ends]);
  } finally {
    signal.removeEventListener('abort', wake);
    woken.abort(WAKE);
  }
}

/**
 * A clock that only moves when told to: `advance(ms)` wakes every sleeper whose time has come.
 * `freeze()` makes every sleep hang until the signal aborts, which stalls a runner's beats while
 * its items keep running (the fencing tests use this).
 */
export class ManualClock implements Clock {
  private t: number;
  private frozen = false;
  private sleepers: { at: number; wake: () => void }[] = [];

  constructor(start = Date.now()) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      // Woken by time, the sleeper lets go of the signal: a loop sleeping on one long-lived
      // signal must not add a listener to it per turn.
      const entry = {
        at: this.t + Math.max(0, ms),
        wake: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.sleepers = this.sleepers.filter((s) => s !== entry);
        resolve();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (!this.frozen && ms <= 0) return entry.wake();
      this.sleepers.push(entry);
    });
  }

  /** Move time forward by `ms` milliseconds and wake due sleepers (unless frozen). */
  advance(ms: number): void {
    this.t += ms;
    if (this.frozen) return;
    const due = this.sleepers.filter((s) => s.at <= this.t);
    this.sleepers = this.sleepers.filter((s) => s.at > this.t);
    for (const s of due) s.wake();
  }

  /** Stop waking sleepers until {@link ManualClock.thaw}. */
  freeze(): void {
    this.frozen = true;
  }

  /** Resume waking sleepers; wakes those already due. */
  thaw(): void {
    this.frozen = false;
    this.advance(0);
  }
}
