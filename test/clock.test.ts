// The clocks leave no listener behind: a loop that sleeps on one long-lived signal, turn after
// turn, must not pile listeners up on it (Node warns past 10: MaxListenersExceededWarning).
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ManualClock, sleepUntil, systemClock } from '../src/clock.js';

const listeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;

describe('a clock', () => {
  it('lets go of the signal when a sleep ends by its time (the real clock and the manual one)', async () => {
    const stop = new AbortController();
    for (let i = 0; i < 20; i++) await systemClock.sleep(1, stop.signal);
    expect(listeners(stop.signal)).toBe(0);

    const clock = new ManualClock(0);
    for (let i = 0; i < 20; i++) {
      const slept = clock.sleep(100, stop.signal);
      clock.advance(100);
      await slept;
    }
    for (let i = 0; i < 5; i++) await clock.sleep(0, stop.signal);
    expect(listeners(stop.signal)).toBe(0);
  });

  it('sleepUntil ends at the first of its time, the signal or another end, and leaves no listener either way', async () => {
    const stop = new AbortController();
    // Woken early by another end, turn after turn, as a worker's loop is by its runs.
    for (let i = 0; i < 20; i++) await sleepUntil(systemClock, 60_000, stop.signal, [Promise.resolve()]);
    expect(listeners(stop.signal)).toBe(0);
    // A plain sleep raced the same way keeps its listener until its time is up: what this fixes.
    const plain = new AbortController();
    for (let i = 0; i < 3; i++) await Promise.race([systemClock.sleep(60_000, plain.signal), Promise.resolve()]);
    expect(listeners(plain.signal)).toBe(3);
    plain.abort();

    const t0 = Date.now();
    await sleepUntil(systemClock, 30, stop.signal);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(25);
    expect(listeners(stop.signal)).toBe(0);

    const waiting = sleepUntil(systemClock, 60_000, stop.signal);
    expect(listeners(stop.signal)).toBe(1);
    stop.abort();
    await waiting;
    expect(listeners(stop.signal)).toBe(0);
    // Already aborted: at once.
    await sleepUntil(systemClock, 60_000, stop.signal);
  });
});
