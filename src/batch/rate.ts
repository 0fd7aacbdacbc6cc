// Fleet-wide rate limits' rules (docs/design.md, "Rate limits"): a limit's settings, their checks,
// and the constants a run's gate (rate-gate.ts) works by. The gate, with its statements, is a
// file of its own, loaded by a run of a rate-limited batch only (docs/design.md, "Cold starts and
// code splitting").
import { InvalidSettingError } from '../errors.js';

/** What a rate-limit key is computed from: the item and its batch's params. */
export interface RateKeyItem {
  key: string;
  input: unknown;
  params: unknown;
}

/**
 * A fleet-wide rate limit (docs/design.md, "Rate limits"): items of one key start at most
 * `perSecond` a second across every run and process, with at most `burst` more at once after a
 * quiet time. So in any one-second window at most `perSecond + burst` start (plus what a run
 * starts of the tokens it took in the last {@link TOKEN_TTL_MS} ms).
 */
export interface RateLimit {
  /** The key whose bucket an item draws from. Default: one key for the whole job (`''`). */
  key?: (item: RateKeyItem) => string;
  /**
   * Items per second, from {@link MIN_RATE_PER_SECOND} to {@link MAX_RATE_PER_SECOND}: one rate for every key, or
   * a function of the key giving each key its own (an answer that is not such a number, or a
   * throw, counts as 1 per second). A start's or a PATCH's rate for the batch wins, for every key.
   */
  perSecond: number | ((key: string) => number);
  /** Tokens a quiet bucket holds, 1 to 10,000. Default `ceil(rate / 25)` per key (2 at 50/s). */
  burst?: number;
}

/** Most items per second a rate limit may allow. */
export const MAX_RATE_PER_SECOND = 1_000_000;

/**
 * Fewest items per second a rate limit may allow: one every 1,000 s. A rate below it (say
 * `1e-300`) is a mistake, not a limit: its items would wait days in pending.
 */
export const MIN_RATE_PER_SECOND = 0.001;

/**
 * How long a run may hold tokens it took before they lapse, ms. A run asks only for what its free
 * slots can start at once, so tokens lapse only when other keys' items took the slots first;
 * lapsing keeps a late start from adding to another second's window.
 */
export const TOKEN_TTL_MS = 50;

/**
 * How long a run may hold a block of tokens lent to it, ms: at a rate far above what its slots
 * start in {@link TOKEN_TTL_MS}, a run asks for a block it holds this long, which counts against
 * the bucket's burst until it lapses (docs/design.md, "Rate limits"), so it asks a few times a
 * second instead of once per claim. Lent tokens stay within half the burst over two such
 * epochs, so lending carries at most `burst / 2` per this time across the fleet: 40,000 a second
 * at 1,000,000/s with the default burst (at 1 s it was 20,000, and 8 runs of no-op items on 2
 * cores went past it and back to asking a short block per claim).
 */
export const LENT_TOKEN_TTL_MS = 500;

/** A key with no token now waits in the run's queue this long at most; past it its items go back to pending. */
export const RATE_WAIT_IN_QUEUE_MS = 100;

/** The default burst of a rate of `perSecond`: a twenty-fifth of a second's worth, at least 1. */
export const defaultBurst = (perSecond: number) => Math.max(1, Math.ceil(perSecond / 25));

/**
 * Check a rate limit's settings (`prefix` names its owner in the message).
 * @throws {InvalidSettingError} a `perSecond` below {@link MIN_RATE_PER_SECOND} or past {@link MAX_RATE_PER_SECOND}, a
 *   `burst` not a whole number from 1 to 10,000, or a `key` that is not a function.
 */
export function checkRateLimit(r: RateLimit, prefix = ''): void {
  if (typeof r.perSecond !== 'function' && !validRate(r.perSecond)) {
    throw new InvalidSettingError(
      `${prefix}rateLimit.perSecond`,
      `must be a number from ${MIN_RATE_PER_SECOND} to ${MAX_RATE_PER_SECOND} (got ${String(r.perSecond)})`,
    );
  }
  if (r.burst !== undefined && !(Number.isInteger(r.burst) && r.burst >= 1 && r.burst <= 10_000)) {
    throw new InvalidSettingError(`${prefix}rateLimit.burst`, `must be a whole number from 1 to 10000 (got ${String(r.burst)})`);
  }
  if (r.key !== undefined && typeof r.key !== 'function') {
    throw new InvalidSettingError(`${prefix}rateLimit.key`, 'must be a function of the item');
  }
}

/** Whether `n` is a rate a limit may allow: a number from {@link MIN_RATE_PER_SECOND} to {@link MAX_RATE_PER_SECOND}. */
export const validRate = (n: unknown): n is number =>
  typeof n === 'number' && n >= MIN_RATE_PER_SECOND && n <= MAX_RATE_PER_SECOND;

/** The rate of `key` under `limit`, items per second (an invalid answer of a function: 1). */
export function rateOf(limit: RateLimit, key: string): number {
  if (typeof limit.perSecond !== 'function') return limit.perSecond;
  try {
    const n = limit.perSecond(key);
    return validRate(n) ? n : 1;
  } catch {
    return 1;
  }
}
