// Item batching's rules (docs/design.md, "Item batching"): its settings and their checks, its
// errors, and where a run that traces puts an attempt's span for the call's. What a worker's
// static path needs of item batching; the grouping itself (calls.ts) is a chunk of its own,
// loaded by a batched executor's first item (docs/design.md, "Cold starts and code splitting").
import { InvalidSettingError, LeaseholdError } from '../../errors.js';
import type { Executor, ItemContext } from '../types.js';

/** Most items one batched call may get (`itemsPerCall`). */
export const MAX_ITEMS_PER_CALL = 1_000;

/** How long items wait for more to fill a call, by default, ms (`gatherMs`). */
export const DEFAULT_GATHER_MS = 20;

/** Longest `gatherMs`, ms. */
export const MAX_GATHER_MS = 10_000;

/**
 * Where a run that traces (docs/design.md, "Traces") puts an item's {@link AttemptTrace} on the
 * item's context, so a call of several items can be a child of the run's span linked to each
 * item's attempt span. A symbol: not among the context's keys, not in its JSON.
 */
export const ATTEMPT_TRACE: unique symbol = Symbol('leasehold.attemptTrace');

/** The tracing of one attempt: its span, and the run that makes the span of its call. */
export interface AttemptTrace {
  /** The attempt's span (an `@opentelemetry/api` Span). */
  span: unknown;
  /** The run's tracer: `call` runs `f`, the call of `items`, in the call's span. */
  run: { call<T>(items: readonly ItemContext[], f: () => Promise<T>): Promise<T> };
}

/** An item's context, with its attempt's tracing when its run traces. */
export type TracedItem = ItemContext & { [ATTEMPT_TRACE]?: AttemptTrace };

/**
 * A batched call's answer was wrong for this item (docs/design.md, "Item batching"): it left the
 * item out or answered it twice. This attempt of the item fails; it is retried like any failure
 * while attempts remain. Code `bad_call_answer`.
 */
export class CallAnswerError extends LeaseholdError {
  constructor(message: string) {
    super('bad_call_answer', message);
  }
}

/**
 * An item that waited for its call was told to stop before the call began: its work never ran,
 * so the run gives it back with its attempt unchanged (as a claimed item that never started).
 * Internal to the batch module; never reaches a caller.
 */
export class ItemNotStartedError extends Error {
  constructor(reason: unknown) {
    super('the item was told to stop while it waited for its batched call', { cause: reason });
  }
}

/**
 * Check an executor's item batching settings (`prefix` names it in the message).
 * @throws {InvalidSettingError} `itemsPerCall` not a whole number from 1 to
 *   {@link MAX_ITEMS_PER_CALL}, or without `workMany`; `bytesPerCall` not a whole number of at
 *   least 1; `gatherMs` not from 0 to {@link MAX_GATHER_MS}.
 */
export function checkItemBatching(
  ex: Pick<Executor, 'itemsPerCall' | 'bytesPerCall' | 'gatherMs' | 'workMany'>,
  prefix = '',
): void {
  const { itemsPerCall, bytesPerCall, gatherMs } = ex;
  if (itemsPerCall !== undefined) {
    if (!(Number.isInteger(itemsPerCall) && itemsPerCall >= 1 && itemsPerCall <= MAX_ITEMS_PER_CALL)) {
      throw new InvalidSettingError(
        `${prefix}itemsPerCall`,
        `must be a whole number from 1 to ${MAX_ITEMS_PER_CALL} (got ${String(itemsPerCall)})`,
      );
    }
    if (typeof ex.workMany !== 'function') {
      throw new InvalidSettingError(
        `${prefix}itemsPerCall`,
        "needs a function that runs a call of items (workMany, a job's runMany)",
      );
    }
  }
  if (bytesPerCall !== undefined && !(Number.isSafeInteger(bytesPerCall) && bytesPerCall >= 1)) {
    throw new InvalidSettingError(
      `${prefix}bytesPerCall`,
      `must be a whole number of bytes, at least 1 (got ${String(bytesPerCall)})`,
    );
  }
  if (gatherMs !== undefined && !(Number.isFinite(gatherMs) && gatherMs >= 0 && gatherMs <= MAX_GATHER_MS)) {
    throw new InvalidSettingError(`${prefix}gatherMs`, `must be from 0 to ${MAX_GATHER_MS} ms (got ${String(gatherMs)})`);
  }
}

/**
 * Entries of a call's answer that settled no item, and were ignored: `strangers` named a key not
 * in the call (the first 3 in `keys`), `keyless` had no string key. Said through the runner's
 * `onEvent` (`call-results-ignored`) even when every item of the call got its result.
 */
export interface IgnoredResults {
  items: number;
  strangers: number;
  keyless: number;
  keys: string[];
}
