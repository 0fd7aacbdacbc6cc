// The waits of one attempt (docs/design.md, "Waiting items: callbacks and sleeps"): the
// `waitForCallback`, `sleep` and `sleepUntil` an item's work calls, what the attempt reads of the
// item's last wait (`callback`, `slept`), and whether the attempt ended parked. A wait is
// registered while the item runs, fenced like every item write of the run; the attempt's move to
// `waiting` is the completer's, as for any settled item.
import { randomUUID } from 'node:crypto';
import { CallbackTimeoutError, InvalidWaitError, ItemLostError } from '../errors.js';
import type { ClaimedRow } from '../sql/moves.js';
import type { WaitRegistration } from '../sql/waits.js';
import {
  MAX_PROGRESS_BYTES,
  MAX_WAIT_MS,
  type CallbackHandle,
  type CallbackOutcome,
  type WaitForCallbackOptions,
} from '../types.js';
import { encodeOutput } from '../values.js';
import type { RunContext } from './context.js';
import type { OwnSleep } from './types.js';

/** What an attempt reads of its item's last wait (`callback` and `slept` of the item the work gets). */
export interface LastWait {
  readonly callback: CallbackOutcome | undefined;
  readonly slept: boolean;
}

/** The last wait of an attempt that did not wait before (most attempts): one object for all. */
const NO_WAIT: LastWait = Object.freeze({ callback: undefined, slept: false });

/**
 * The item's last wait as this attempt reads it: the callback's outcome and whether it was a
 * sleep, for the attempt that waited going on only (a later attempt starts over: what it must
 * keep, the work stores with `checkpoint`). When that attempt died with its run, the takeover's
 * recovery moved `woke` on to the next attempt (sql/runs.ts, `recoverRunning`): it reads it.
 */
export function lastWait(c: ClaimedRow): LastWait {
  const w = c.woke?.attempt === c.attempts ? c.woke : undefined;
  if (!w) return NO_WAIT;
  if (w.kind !== 'callback') return { callback: undefined, slept: w.kind === 'sleep' };
  if (w.status === 'succeeded') return { callback: { status: 'succeeded', result: w.result ?? null }, slept: false };
  if (w.status === 'failed') return { callback: { status: 'failed', error: w.error ?? '' }, slept: false };
  return { callback: { status: 'timedOut', reason: w.reason ?? 'timeout' }, slept: false };
}

/**
 * Whether this attempt is the one that waited on a callback which then timed out: it fails at
 * once (its work does not run), and the job's retry policy decides what follows.
 */
export function timedOutWait(c: ClaimedRow): CallbackTimeoutError | undefined {
  const w = c.woke;
  if (w?.kind === 'callback' && w.status === 'timedOut' && w.attempt === c.attempts) {
    return new CallbackTimeoutError(w.reason ?? 'timeout');
  }
  return undefined;
}

/** One attempt's waits. */
export class AttemptWait {
  /** The wait this attempt registered; undefined: none. */
  private id: string | undefined;
  /** The sleep this attempt registered (kind `sleep`); undefined: none. */
  private slept: OwnSleep | undefined;

  constructor(
    private readonly ctx: RunContext,
    private readonly c: ClaimedRow,
  ) {}

  /** Whether the attempt registered a wait: once its work returns, the item parks. */
  get parked(): boolean {
    return this.id !== undefined;
  }

  /**
   * The item's sleep, for a run that wakes its own sleeps (docs/design.md, "Waiting items:
   * callbacks and sleeps"); undefined: the attempt did not sleep.
   */
  get ownSleep(): OwnSleep | undefined {
    return this.id === undefined ? undefined : this.slept;
  }

  /** The work's `waitForCallback` (its own function: the work may take it off the item). */
  readonly waitForCallback = (o: WaitForCallbackOptions): Promise<CallbackHandle> => this.callbackWait(o);
  /** The work's `sleep`. */
  readonly sleep = (ms: number): Promise<void> => this.sleepFor(ms);
  /** The work's `sleepUntil`. */
  readonly sleepUntil = (date: Date): Promise<void> => this.sleepTill(date);

  private async callbackWait(o: WaitForCallbackOptions): Promise<CallbackHandle> {
    const timeoutMs = within(o?.timeoutMs, 'timeoutMs', 1, MAX_WAIT_MS);
    const heartbeatTimeoutMs =
      o.heartbeatTimeoutMs === undefined ? null : within(o.heartbeatTimeoutMs, 'heartbeatTimeoutMs', 1, timeoutMs);
    let payload: string | null = null;
    if (o.payload !== undefined) {
      const e = encodeOutput(o.payload, MAX_PROGRESS_BYTES);
      if (e.error !== undefined) throw new InvalidWaitError(`payload: ${e.error}`);
      payload = e.json;
    }
    const id = await this.register({ kind: 'callback', wakeInMs: timeoutMs, heartbeatTimeoutMs, payload });
    const { batch, s, sql } = this.ctx;
    const { signCallbackToken } = await import('../callback-token.js');
    const token = await signCallbackToken(sql, { batchId: batch.id, key: this.c.key, attempt: this.c.attempts, waitId: id });
    const base = s.callbackUrl?.replace(/\/+$/, '');
    return {
      token,
      url: base ? `${base}/callbacks/${token}` : null,
      cancel: () => (this.id === id ? this.abandon() : Promise.resolve()),
    };
  }

  private async sleepFor(ms: number): Promise<void> {
    await this.register({
      kind: 'sleep',
      wakeInMs: within(ms, 'sleep ms', 0, MAX_WAIT_MS),
      heartbeatTimeoutMs: null,
      payload: null,
    });
  }

  private async sleepTill(date: Date): Promise<void> {
    if (!(date instanceof Date) || Number.isNaN(date.getTime())) throw new InvalidWaitError('sleepUntil: not a valid Date');
    await this.register({ kind: 'sleep', wakeInMs: 0, wakeAt: date, heartbeatTimeoutMs: null, payload: null });
  }

  private async register(
    w: Pick<WaitRegistration, 'kind' | 'wakeInMs' | 'wakeAt' | 'heartbeatTimeoutMs' | 'payload'>,
  ): Promise<string> {
    if (this.id !== undefined) throw new InvalidWaitError('an attempt waits at most once: return after the first wait');
    const { ctx, c } = this;
    const id = randomUUID();
    // Claimed by this attempt: set before the statement, so a second call in the same turn is refused.
    this.id = id;
    // The waits' statements and the callback tokens load with an attempt's first wait (a cold
    // start does not read them: docs/design.md, "Cold starts and code splitting").
    const { registerWait } = await import('../sql/waits.js');
    const wakeInMs = await ctx.store(() =>
      registerWait(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, key: c.key, claimed: c.attempts, id, ...w }),
    );
    if (wakeInMs === undefined) {
      this.id = undefined;
      throw new ItemLostError(c.key, c.attempts);
    }
    if (w.kind === 'sleep') this.slept = { id, wakeInMs, at: ctx.s.clock.now() + wakeInMs };
    return id;
  }

  /**
   * The attempt failed after it registered its wait: the wait is dropped (best effort: a wait left
   * behind is deleted by the expiry pass at its time), so no completion wakes the item for it.
   */
  async abandon(): Promise<void> {
    const id = this.id;
    if (id === undefined) return;
    this.id = undefined;
    const ctx = this.ctx;
    try {
      const { dropWait } = await import('../sql/waits.js');
      await dropWait(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, key: this.c.key, id });
    } catch (e) {
      ctx.storeError(e, 1);
    }
  }
}

function within(v: unknown, name: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw new InvalidWaitError(`${name} must be a number of ms from ${min} to ${max} (got ${String(v)})`);
  }
  return Math.round(v);
}
