// Item batching (docs/design.md, "Item batching"): a run's items go to the executor's `workMany`
// in calls of up to `itemsPerCall` items (and `bytesPerCall` bytes), while the run itself still
// starts, times, retries and moves every item on its own. The grouping sits behind the one-item
// `ItemWork` the run calls: each item's work waits here for its call and settles with its own
// answer, so the run's pipeline knows nothing of calls. Its rules, errors and limits are
// call-rules.ts's; this file loads on a batched executor's first item (runner.ts, `grouped`).
import type { Clock } from '../../clock.js';
import { ItemTimeoutError } from '../errors.js';
import type { Executor, ItemCallResult, ItemContext, ItemsWork, ItemWork } from '../types.js';
import {
  ATTEMPT_TRACE,
  CallAnswerError,
  DEFAULT_GATHER_MS,
  ItemNotStartedError,
  type IgnoredResults,
  type TracedItem,
} from './call-rules.js';

/** An item waiting for its call. */
interface Waiting {
  item: ItemContext;
  /** Bytes of `{ key, input }` as JSON (0 when no byte budget is set). */
  bytes: number;
  /** Local clock time it arrived. */
  arrivedAt: number;
  resolve(output: unknown): void;
  reject(error: unknown): void;
  /** Stop listening to the item's signal for a stop while it waits. */
  detach(): void;
}

/**
 * The one-item work a run calls for an executor with `itemsPerCall`: each item waits for a call
 * of `workMany` and settles with its own answer (docs/design.md, "Item batching"). At most
 * `calls` calls run at once. A call goes as soon as it is full (`itemsPerCall` items, or the next
 * item would pass `bytesPerCall`), or with fewer once its oldest item waited `gatherMs` and a
 * call slot is free. An item told to stop while it waits rejects with {@link ItemNotStartedError}
 * (its attempt unused), or with its timeout's `ItemTimeoutError` when its time ran out (that
 * attempt counts). One per run: it holds the run's waiting items.
 */
export function batchedWork(
  ex: Executor & { itemsPerCall: number; workMany: ItemsWork },
  options: { calls: number; clock: Clock; onIgnored?: (ignored: IgnoredResults) => void },
): ItemWork {
  const grouper = new CallGrouper(ex.workMany, {
    itemsPerCall: ex.itemsPerCall,
    bytesPerCall: ex.bytesPerCall,
    gatherMs: ex.gatherMs ?? DEFAULT_GATHER_MS,
    calls: options.calls,
    clock: options.clock,
    onIgnored: options.onIgnored,
  });
  return (item) => grouper.submit(item);
}

class CallGrouper {
  private waiting: Waiting[] = [];
  private inFlight = 0;
  /** The timer that sends a call with fewer than `itemsPerCall` items once its oldest waited enough. */
  private timer: AbortController | undefined;

  constructor(
    private readonly workMany: ItemsWork,
    private readonly s: {
      itemsPerCall: number;
      bytesPerCall?: number;
      gatherMs: number;
      calls: number;
      clock: Clock;
      onIgnored?: (ignored: IgnoredResults) => void;
    },
  ) {}

  submit(item: ItemContext): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (item.signal.aborted) return reject(stopped(item.signal));
      const w: Waiting = {
        item,
        bytes: this.s.bytesPerCall === undefined ? 0 : entryBytes(item),
        arrivedAt: this.s.clock.now(),
        resolve,
        reject,
        detach: () => item.signal.removeEventListener('abort', onAbort),
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(w);
        if (i < 0) return;
        this.waiting.splice(i, 1);
        if (this.waiting.length === 0) this.stopTimer();
        reject(stopped(item.signal));
      };
      item.signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(w);
      // Only full calls go at once: items arrive one by one as the run starts them, in the same
      // turn, and a call for the first of them alone would defeat the batching.
      this.send(false, true);
    });
  }

  /**
   * Send calls while a call slot is free: full ones always, one with fewer items when `force`
   * (its wait is over) or once its oldest item has waited `gatherMs`, never while items are
   * `arriving` (the rest of the turn may fill it); else wake up then.
   */
  private send(force: boolean, arriving = false): void {
    while (this.inFlight < this.s.calls && this.waiting.length > 0) {
      const { count, full } = this.nextCall();
      if (!full && !force) {
        const waited = this.s.clock.now() - this.waiting[0]!.arrivedAt;
        if (arriving || waited < this.s.gatherMs) return this.wakeIn(this.s.gatherMs - waited);
      }
      force = false;
      this.stopTimer();
      void this.call(this.waiting.splice(0, count));
    }
  }

  /** How many of the waiting items the next call takes, and whether that call is full. */
  private nextCall(): { count: number; full: boolean } {
    const { itemsPerCall, bytesPerCall } = this.s;
    let count = 0;
    let bytes = 0;
    for (const w of this.waiting) {
      if (count === itemsPerCall) return { count, full: true };
      if (bytesPerCall !== undefined && count > 0 && bytes + w.bytes > bytesPerCall) return { count, full: true };
      count++;
      bytes += w.bytes;
      if (bytesPerCall !== undefined && bytes >= bytesPerCall) return { count, full: true };
    }
    return { count, full: count === itemsPerCall };
  }

  /** Send the next call, full or not, `ms` from now; after this turn at the soonest. */
  private wakeIn(ms: number): void {
    if (this.timer) return;
    const timer = new AbortController();
    this.timer = timer;
    const fire = () => {
      if (timer.signal.aborted) return;
      this.timer = undefined;
      this.send(true);
    };
    if (ms > 0) void this.s.clock.sleep(ms, timer.signal).then(fire);
    else setImmediate(fire);
  }

  private stopTimer(): void {
    this.timer?.abort();
    this.timer = undefined;
  }

  /** One call of `workMany`: each item settles with its own answer, or all with the call's error. */
  private async call(group: Waiting[]): Promise<void> {
    this.inFlight++;
    const items = group.map((w) => w.item);
    // The call's signal aborts once each of its items was told to stop: while any item still
    // wants its answer, the call goes on.
    const signal = new AbortController();
    let live = group.length;
    const unlisten: (() => void)[] = [];
    for (const w of group) {
      w.detach();
      const s = w.item.signal;
      const onAbort = () => {
        if (--live === 0) signal.abort(s.reason);
      };
      s.addEventListener('abort', onAbort, { once: true });
      unlisten.push(() => s.removeEventListener('abort', onAbort));
    }
    try {
      let answer: unknown;
      try {
        const call = () => this.workMany({ items, signal: signal.signal, batch: items[0]!.batch });
        // A span per batched call when the run traces (docs/design.md, "Traces"): a child of the
        // run's span, whatever context the call happens to start in, linked to its items' attempts.
        const traced = (items[0] as TracedItem)[ATTEMPT_TRACE];
        answer = await Promise.resolve().then(() => (traced ? traced.run.call(items, call) : call()));
      } catch (e) {
        // A whole-call failure: a failed attempt of every item in the call.
        for (const w of group) w.reject(e);
        return;
      }
      const ignored = settleEach(group, answer);
      if (ignored) this.s.onIgnored?.(ignored);
    } finally {
      for (const f of unlisten) f();
      this.inFlight--;
      // After this turn: the items just settled free the run's slots, and the items it starts in
      // their place join the next call.
      setImmediate(() => this.send(false));
    }
  }
}

/**
 * Settle each item of a call with its entry of the answer (docs/design.md, "Item batching");
 * answers the entries that settled no item, if any.
 */
function settleEach(group: Waiting[], answer: unknown): IgnoredResults | undefined {
  if (!Array.isArray(answer)) {
    const e = new CallAnswerError(`the call of ${itemCount(group.length)} answered ${describe(answer)}, not an array of results`);
    for (const w of group) w.reject(e);
    return undefined;
  }
  const keys = new Set(group.map((w) => w.item.key));
  const byKey = new Map<string, ItemCallResult>();
  const twice = new Set<string>();
  const strangers: string[] = [];
  let keyless = 0;
  for (const r of answer as unknown[]) {
    const key = (r as { key?: unknown } | null)?.key;
    if (typeof key !== 'string') keyless++;
    else if (!keys.has(key)) strangers.push(key);
    else if (byKey.has(key)) twice.add(key);
    else byKey.set(key, r as ItemCallResult);
  }
  const besides = [
    strangers.length > 0
      ? `${strangers.length} not in the call (${strangers
          .slice(0, 3)
          .map((k) => JSON.stringify(k))
          .join(', ')}${strangers.length > 3 ? ', …' : ''})`
      : '',
    keyless > 0 ? `${keyless} without a string key` : '',
  ].filter(Boolean);
  const note = besides.length > 0 ? `; its results held ${besides.join(' and ')}` : '';
  for (const w of group) {
    const key = w.item.key;
    const r = byKey.get(key);
    if (twice.has(key))
      w.reject(new CallAnswerError(`the call of ${itemCount(group.length)} answered item ${JSON.stringify(key)} more than once`));
    else if (!r)
      w.reject(
        new CallAnswerError(`the call of ${itemCount(group.length)} answered no result for item ${JSON.stringify(key)}${note}`),
      );
    else if (r.error !== undefined) w.reject(r.error instanceof Error ? r.error : new Error(errorMessage(r.error)));
    else w.resolve('output' in r ? r.output : undefined);
  }
  if (strangers.length === 0 && keyless === 0) return undefined;
  return { items: group.length, strangers: strangers.length, keyless, keys: strangers.slice(0, 3) };
}

/** Why a waiting item stops: its timeout (the attempt counts), else a stop of its run (it never started). */
function stopped(signal: AbortSignal): unknown {
  return signal.reason instanceof ItemTimeoutError ? signal.reason : new ItemNotStartedError(signal.reason);
}

/** Bytes of an item's `{ key, input }` as JSON, as a call's payload would carry it. */
function entryBytes(item: ItemContext): number {
  try {
    return Buffer.byteLength(JSON.stringify({ key: item.key, input: item.input ?? null }));
  } catch {
    return 0;
  }
}

/** `1 item`, `3 items`. */
function itemCount(n: number): string {
  return `${n} item${n === 1 ? '' : 's'}`;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

function errorMessage(v: unknown): string {
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
