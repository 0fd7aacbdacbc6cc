// How the page writes numbers, ages, ids and usage.
import type { ApiItem, ApiPool, ApiUsage } from '../api/wire.js';

/** `950 ms`, `12 s`, `4 min 5 s`, `2 h 3 min`, `3 d 4 h`. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '–';
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${Math.round(ms / 1_000)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1_000)} s`;
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
  return `${Math.floor(ms / 86_400_000)} d ${Math.floor((ms % 86_400_000) / 3_600_000)} h`;
}

/** The first 8 characters of a UUID. */
export const shortId = (id: string | null | undefined) => (id ? id.slice(0, 8) : '–');

/** A rate with at most one decimal. */
export const rate = (n: number | undefined) => (n === undefined ? '–' : n >= 100 ? String(Math.round(n)) : n.toFixed(1));

/** A whole percentage of `part` in `total` (floored, so 100 % means all). */
export const percent = (part: number, total: number) => (total > 0 ? Math.floor((100 * part) / total) : 0);

const two = (n: number) => String(n).padStart(2, '0');

/**
 * A local time of day on the 24-hour clock, `04:17:18`; `seconds: false` gives `04:17`. The
 * page writes every time this way (tables, facts, the chart's axis and legend), never the
 * browser's locale format, which mixed `12/2/2026, 04:17:18` with the chart's `4:17am`.
 */
export function timeOfDay(date: Date, seconds = true): string {
  const hm = `${two(date.getHours())}:${two(date.getMinutes())}`;
  return seconds ? `${hm}:${two(date.getSeconds())}` : hm;
}

/** A local date, `2026-12-02`. */
export const day = (date: Date) => `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())}`;

/** A local date and time, to the second: `2026-12-02 04:17:18`; `–` for none. */
export function when(iso: string | number | null | undefined): string {
  if (iso === null || iso === undefined || iso === '') return '–';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? '–' : `${day(date)} ${timeOfDay(date)}`;
}

/**
 * A time `ms` from now in {@link duration}'s units: `in 4 min 5 s` ahead, `3 s ago` behind; `–`
 * for no number.
 */
export function relative(ms: number): string {
  if (!Number.isFinite(ms)) return '–';
  return ms >= 0 ? `in ${duration(ms)}` : `${duration(-ms)} ago`;
}

/** What a waiting item waits for and until when, as the API gives it (`GET /batches/{id}/items`). */
export type ItemWait = NonNullable<ApiItem['wait']>;

/** One deadline of a waiting item's wait, as the page writes it ({@link waitDeadlines}). */
export interface WaitDeadline {
  /** What happens then: `wakes` (a sleep's wake), `times out` (a callback's timeout), `heartbeat due` (its heartbeat deadline). */
  label: 'wakes' | 'times out' | 'heartbeat due';
  /** The deadline, ISO time (the database's clock). */
  at: string;
  /** From `now`: `in 4 min 5 s`; `3 s ago` once passed (the scheduler's expiry pass wakes it on its next round). */
  relative: string;
  /** The deadline as the page writes every time ({@link when}): `2026-12-02 04:17:18`, local. */
  absolute: string;
}

/**
 * The deadlines of a waiting item's wait, measured from `now` (ms since the epoch, the page's
 * clock at load): a sleep's wake (`wakeAt`); a callback's timeout (`timeoutAt`, else `wakeAt`)
 * and its heartbeat deadline (`heartbeatBy`) when it has one. A deadline that is not a time is
 * left out.
 */
export function waitDeadlines(wait: ItemWait, now: number): WaitDeadline[] {
  const at: [WaitDeadline['label'], string | null][] =
    wait.kind === 'sleep'
      ? [['wakes', wait.wakeAt]]
      : [
          ['times out', wait.timeoutAt ?? wait.wakeAt],
          ['heartbeat due', wait.heartbeatBy],
        ];
  return at.flatMap(([label, iso]) => {
    const t = iso === null ? NaN : Date.parse(iso);
    return iso === null || Number.isNaN(t) ? [] : [{ label, at: iso, relative: relative(t - now), absolute: when(iso) }];
  });
}

/** JSON on one line, cut at `max` characters. */
export function brief(v: unknown, max = 120): string {
  const s = v === undefined ? '' : JSON.stringify(v);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** Usage in one line (docs/design.md, "Usage and cost"): worker time, GB-s, runs, attempts, S3 requests, estimated cost. */
export function usageText(u: ApiUsage): string {
  const c = u.estimatedCost;
  const usd = c.total < 0.01 ? c.total.toFixed(6) : c.total.toFixed(4);
  const died = u.diedRuns ? `, ${u.diedRuns} died` : '';
  return (
    `${duration(u.workerMs)} of workers · ${u.gbSeconds} GB-s · ${u.runs} run${u.runs === 1 ? '' : 's'} ` +
    `(${u.invocations} invocation${u.invocations === 1 ? '' : 's'}${died}) · ${u.items} attempts · ` +
    `S3 ${u.s3Requests.get} GET, ${u.s3Requests.put} PUT, ${u.s3Requests.list} LIST · ` +
    `est. $${usd} ${c.currency} at ${c.region} prices${c.overridden ? ' (overridden)' : ''}`
  );
}

/**
 * A pool's cap as the page writes it, as `leasehold pool list` does: `20` (its `limit`); a
 * per-key pool's `40, 5 per key` (its `total` across keys, then its `perKey`).
 */
export function poolLimit(p: Pick<ApiPool, 'total' | 'perKey'>): string {
  return p.perKey === null ? String(p.total) : `${p.total}, ${p.perKey} per key`;
}

/** How full a pool is, as the page shows it ({@link poolUse}). */
export interface PoolUse {
  /** Items in flight against the cap, whole percent, floored (100 means full; above 100 after a lowered limit). */
  percent: number;
  /** The bar's fill, percent of its width: exact, at most 100. */
  fill: number;
  /** More in flight than the cap: the limit was lowered under the permits held (runs give back as their items end). */
  over: boolean;
  /** In words: `3 of 20 in flight (15 %)`. */
  text: string;
}

/**
 * How full a pool is: `inFlight` (permits held by live runs now) against `total` (its cap, from
 * 1). A lowered limit takes no permit back, so `inFlight` may pass `total` for a while: then
 * `over`, and the text says why.
 */
export function poolUse({ inFlight, total }: Pick<ApiPool, 'inFlight' | 'total'>): PoolUse {
  const pct = percent(inFlight, total);
  const over = inFlight > total;
  return {
    percent: pct,
    fill: total > 0 ? Math.min(100, (100 * inFlight) / total) : 0,
    over,
    text:
      `${inFlight} of ${total} in flight (${pct} %)` +
      (over ? ': above a lowered limit, runs give permits back as their items end' : ''),
  };
}
