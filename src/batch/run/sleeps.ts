// A run's own sleeps (docs/design.md, "Waiting items: callbacks and sleeps"): the items whose
// attempt slept in this run, and when each is due. While the run lives it wakes them itself when
// they come due — the expiry pass's wake, for its own keys, by the database clock — and claims
// them as it claims any due item, so a short sleep costs its own length, not a scheduler period.
// A run that would otherwise park or leave stays for a sleep due within a beat, as it stays for a
// pending item due within a beat. What a run leaves behind (it stopped, lost its lease, or the
// sleep was longer) the expiry pass wakes, as before: nothing here is needed for correctness.
import type { RunContext } from './context.js';
import type { OwnSleep } from './types.js';

/** The longest sleep a run keeps to wake itself, ms (longer ones are the expiry pass's). */
export const OWN_SLEEP_MAX_MS = 15 * 60_000;

/** The most sleeps a run keeps to wake itself; more are left to the expiry pass. */
export const OWN_SLEEPS_MAX = 10_000;

/** The most keys one wake statement carries. */
const WAKE_KEYS = 1_000;

/** What the sleeps ask of the run's other collaborators. */
export interface OwnSleepsDeps {
  /** Items woke: the store holds due pending items (producer). */
  mayBeDue(): void;
}

/** The sleeps of one run's items and the timer that wakes them. */
export class OwnSleeps {
  /** Item key → its sleep (`at`: when it is due, the run's clock). */
  private readonly due = new Map<string, OwnSleep>();
  /** The soonest of {@link due} (Infinity: none), kept so the flusher's checks read one number. */
  private earliest = Infinity;
  /** The timer that wakes the run at {@link earliest}. */
  private timer: AbortController | undefined;

  constructor(
    private readonly ctx: RunContext,
    private readonly d: OwnSleepsDeps,
  ) {}

  /**
   * An item's move to `waiting` on a sleep landed: the run wakes it when it is due, if the sleep
   * is within {@link OWN_SLEEP_MAX_MS} and the run keeps fewer than {@link OWN_SLEEPS_MAX}.
   */
  add(key: string, sleep: OwnSleep): void {
    const now = this.ctx.s.clock.now();
    if (this.ctx.ended || sleep.at - now > OWN_SLEEP_MAX_MS || this.due.size >= OWN_SLEEPS_MAX) return;
    this.due.set(key, sleep);
    if (sleep.at < this.earliest) this.arm(sleep.at, now);
  }

  /** Whether a sleep kept here is due now (the flusher then sends {@link wake}). */
  anyDue(): boolean {
    return this.earliest <= this.ctx.s.clock.now();
  }

  /**
   * Whether a sleep kept here is due within `ms` (the run's beat): the run waits for it rather
   * than park the batch or leave it (its timer wakes the run).
   */
  dueWithin(ms: number): boolean {
    return this.earliest <= this.ctx.s.clock.now() + ms;
  }

  /**
   * Wake the sleeps due now, in one statement of at most {@link WAKE_KEYS} keys (the flusher's,
   * between its steps): the woken items are pending, due now, and the next step claims them. A
   * sleep the database finds not yet due is kept for the time it says; any other key is forgotten.
   */
  async wake(): Promise<void> {
    const ctx = this.ctx;
    const now = ctx.s.clock.now();
    const sleeps: { key: string; id: string; ms: number }[] = [];
    const kept = new Map<string, OwnSleep>();
    for (const [key, sleep] of this.due) {
      if (sleep.at > now) continue;
      sleeps.push({ key, id: sleep.id, ms: sleep.wakeInMs });
      kept.set(key, sleep);
      this.due.delete(key);
      if (sleeps.length >= WAKE_KEYS) break;
    }
    this.rearm();
    if (sleeps.length === 0) return;
    // Loaded with the first wake, as the other waits' statements are (a cold start does not read
    // them: docs/design.md, "Cold starts and code splitting").
    const { wakeSleeps } = await import('../sql/waits.js');
    const r = await ctx.store(() => wakeSleeps(ctx.sql, ctx.batch.id, sleeps));
    const answeredAt = ctx.s.clock.now();
    for (const l of r.later) this.add(l.key, { ...kept.get(l.key)!, at: answeredAt + l.dueInMs });
    if (r.woken > 0) this.d.mayBeDue();
  }

  /** The run is over: its timer fires no more. */
  stop(): void {
    this.timer?.abort();
    this.timer = undefined;
    this.due.clear();
    this.earliest = Infinity;
  }

  /** The timer fires at the soonest sleep kept. */
  private rearm(): void {
    this.timer?.abort();
    this.timer = undefined;
    this.earliest = Infinity;
    let next = Infinity;
    for (const sleep of this.due.values()) next = Math.min(next, sleep.at);
    if (next < Infinity) this.arm(next, this.ctx.s.clock.now());
  }

  /** Wake the run at `at` (its clock; `now` is now): the soonest sleep kept. */
  private arm(at: number, now: number): void {
    this.timer?.abort();
    const timer = new AbortController();
    this.timer = timer;
    this.earliest = at;
    void this.ctx.s.clock.sleep(at - now, timer.signal).then(() => {
      if (timer.signal.aborted) return;
      this.timer = undefined;
      this.ctx.wake();
    });
  }
}
