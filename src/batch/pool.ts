// Concurrency pools' rules (docs/design.md, "Concurrency pools"): a pool's spec, its name and
// limits and their checks. A run's side of a pool, the gate with its statements, is pool-gate.ts,
// loaded by a run of a batch with a pool only (docs/design.md, "Cold starts and code splitting").
import { InvalidSettingError } from '../errors.js';
import type { RateKeyItem } from './rate.js';
import type { PoolLimits } from './sql/pools.js';

/** Most permits a pool may allow at once (in total and per key). */
export const MAX_POOL_LIMIT = 100_000;

/** Longest pool name, characters. */
export const MAX_POOL_NAME = 200;

/**
 * A job's concurrency pool (docs/design.md, "Concurrency pools"): its items in flight, with every
 * other batch's and job's naming the pool, across the fleet, stay within the pool's limits.
 * The limits here create the pool when it does not exist yet; `PUT /pools/{name}` changes them,
 * also while batches run. A start may name another pool for its batch (`pool`).
 */
export interface PoolSpec {
  /** The pool's name, 1 to {@link MAX_POOL_NAME} characters. */
  name: string;
  /** Most items in flight at once: `limit`, or per key `perKey` with at most `total` in all. */
  limit?: number;
  perKey?: number;
  total?: number;
  /** The key an item counts under (per-key pools). Default: one key for the job (`''`). */
  key?: (item: RateKeyItem) => string;
}

/** The limits a {@link PoolSpec} (or a `PUT /pools/{name}` body) sets. */
export function poolLimitsOf(spec: { limit?: number; perKey?: number; total?: number }): PoolLimits {
  if (spec.limit !== undefined) return { total: spec.limit, perKey: null };
  return { total: spec.total ?? spec.perKey ?? 1, perKey: spec.perKey ?? null };
}

/**
 * Check a pool's name (`what` names it in the message).
 * @throws {InvalidSettingError} a name that is empty, longer than {@link MAX_POOL_NAME} or not a string.
 */
export function checkPoolName(name: unknown, what = 'pool'): asserts name is string {
  if (typeof name !== 'string' || name.length < 1 || name.length > MAX_POOL_NAME || name.includes('\0')) {
    throw new InvalidSettingError(what, `must be a name of 1 to ${MAX_POOL_NAME} characters (got ${JSON.stringify(name)})`);
  }
}

/**
 * Check a pool's limits: `limit` alone, or `perKey` with an optional `total` (default `perKey`),
 * each a whole number from 1 to {@link MAX_POOL_LIMIT} (`prefix` names the owner in the message).
 * @throws {InvalidSettingError} otherwise.
 */
export function checkPoolLimits(spec: { limit?: number; perKey?: number; total?: number }, prefix = ''): void {
  const whole = (n: unknown) => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= MAX_POOL_LIMIT;
  const must = `must be a whole number from 1 to ${MAX_POOL_LIMIT}`;
  if (spec.limit !== undefined) {
    if (!whole(spec.limit)) throw new InvalidSettingError(`${prefix}limit`, `${must} (got ${String(spec.limit)})`);
    if (spec.perKey !== undefined || spec.total !== undefined)
      throw new InvalidSettingError(`${prefix}limit`, 'takes no perKey or total (give { perKey, total } instead)');
    return;
  }
  if (!whole(spec.perKey))
    throw new InvalidSettingError(`${prefix}perKey`, `${must} (got ${String(spec.perKey)}); or give { limit }`);
  if (spec.total !== undefined && !whole(spec.total))
    throw new InvalidSettingError(`${prefix}total`, `${must} (got ${String(spec.total)})`);
}

/** Check a job's pool (`prefix` names the job). @throws {InvalidSettingError} a bad name, limit or key. */
export function checkPoolSpec(spec: PoolSpec, prefix = ''): void {
  checkPoolName(spec.name, `${prefix}pool.name`);
  checkPoolLimits(spec, `${prefix}pool.`);
  if (spec.key !== undefined && typeof spec.key !== 'function')
    throw new InvalidSettingError(`${prefix}pool.key`, 'must be a function of the item');
}
