// The moves a run's collaborators settle items with (docs/design.md, "The run, inside"): an
// attempt that counts (`verdict`) and a move back to pending that gives the attempt back
// (`givenBack`), each built in one place so every move of a kind reads the same.
import type * as q from '../sql/index.js';
import type { ItemState } from '../types.js';
import type { ItemOutcome, OwnSleep, Settled } from './types.js';

/** How one item's move reads: `state` and `outcome`, with the attempt used. */
export function verdict(
  c: q.ClaimedRow,
  state: ItemState,
  outcome: ItemOutcome,
  output: string | null,
  error: string | null,
  delayMs = 0,
): Settled {
  return { outcome, move: { key: c.key, state, claimed: c.attempts, attempts: c.attempts, output, error, delayMs } };
}

/** What a move that gives an attempt back carries besides the item (see {@link givenBack}). */
export interface GivenBackMove {
  /** The attempt's error text, already storable (`errorText`); default null. */
  error?: string | null;
  /** Wait before the item is claimed again, ms; default 0 (due at once). */
  delayMs?: number;
  /** The item's Retry-After waits after the move; default unchanged. */
  waits?: number;
}

/**
 * The move of an item back to pending with its attempt given back (`attempts` one less than it
 * was claimed with), no output, due after `delayMs`: an item that never started (`given-back`:
 * the run stopped, a call of several never began, its rate-limit key had no token), one that
 * stored a checkpoint before a handoff (`resumable`), or a Retry-After wait within its allowance
 * (`waiting`; docs/design.md, "Attempts, backoff, failures", "Retry-After").
 */
export function givenBack(
  c: q.ClaimedRow,
  outcome: Extract<ItemOutcome, 'given-back' | 'resumable' | 'waiting'>,
  { error = null, delayMs = 0, waits }: GivenBackMove = {},
): Settled {
  const move: q.MoveRow = {
    key: c.key,
    state: 'pending',
    claimed: c.attempts,
    attempts: c.attempts - 1,
    output: null,
    error,
    delayMs,
  };
  if (waits !== undefined) move.waits = waits;
  return { outcome, move };
}

/**
 * The move of an item whose attempt registered a wait and returned: to `waiting` with its attempt
 * given back (the next run, once a completion or its time wakes the item, is the same attempt
 * going on), no output, no error (docs/design.md, "Waiting items: callbacks and sleeps").
 * `sleep`: the attempt's sleep, which the run may wake itself when it is due.
 */
export function parked(c: q.ClaimedRow, sleep?: OwnSleep): Settled {
  const s: Settled = {
    outcome: 'parked',
    move: { key: c.key, state: 'waiting', claimed: c.attempts, attempts: c.attempts - 1, output: null, error: null, delayMs: 0 },
  };
  if (sleep !== undefined) s.sleep = sleep;
  return s;
}
