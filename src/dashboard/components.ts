// Pieces every view uses: polling, the progress bar of a batch, the weight bar of a process,
// status badges, error notes, a waiting item's wait and how full a concurrency pool is.
import { html } from 'htm/preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiCallError, ITEM_STATES, type Batch, type ItemState, type Pool } from './api.js';
import { percent, poolUse, waitDeadlines, when, type ItemWait } from './format.js';

/** How often a view reloads what it shows, ms. */
export const POLL_MS = 2_000;

/** The message of an error, for a person. */
export function message(e: unknown): string {
  if (e instanceof ApiCallError) return e.status ? `${e.message} (HTTP ${e.status})` : e.message;
  return e instanceof Error ? e.message : String(e);
}

/** What {@link usePoll} gives a view. */
export interface Polled<T> {
  data: T | undefined;
  /** The last load's error, while it lasts (the data of the load before stays shown). */
  error: string | undefined;
  /** Load again now (after an action). */
  reload: () => void;
}

/**
 * Load with `load` now and again every {@link POLL_MS} (from the start of each load, so a slow
 * API is asked again as soon as it answered), until the view goes or `deps` change.
 */
export function usePoll<T>(load: () => Promise<T>, deps: unknown[], skip?: () => boolean): Polled<T> {
  const [state, setState] = useState<{ data?: T; error?: string }>({});
  const [round, setRound] = useState(0);
  const latest = useRef(load);
  latest.current = load;
  useEffect(() => {
    let alive = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      const started = Date.now();
      // `skip`: another source (a progress stream) keeps the data fresh now; ask again later.
      if (!skip?.()) {
        try {
          const data = await latest.current();
          if (alive) setState({ data });
        } catch (e) {
          if (alive) setState((s) => ({ data: s.data, error: message(e) }));
        }
      }
      if (alive) timer = setTimeout(run, Math.max(0, POLL_MS - (Date.now() - started)));
    };
    void run();
    return () => {
      alive = false;
      clearTimeout(timer);
    };
    // The caller's deps decide when to reload, like a hook's dependency list.
  }, [...deps, round]);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  return { data: state.data, error: state.error, reload };
}

/** A note that something failed, announced to screen readers. */
export function ErrorNote({ error }: { error?: string }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error}</p>`;
}

/** A batch's status as a badge. */
export function StatusBadge({ status }: { status: string }) {
  return html`<span class=${`badge status-${status}`}>${status}</span>`;
}

/** A part of a batch's items as the page shows it: an item state, or `not run`. */
export type Shown = ItemState | 'not run';

/**
 * A batch's items as the page shows them, in order: by state (done, failed, running, waiting,
 * pending), but a finished batch's running, waiting and pending items as `not run`: no run works
 * them any more. An API without waiting items (older than callbacks) counts 0 waiting.
 */
export function shownCounts(batch: Pick<Batch, 'status' | 'counts'>): [Shown, number][] {
  const c = { ...batch.counts, waiting: batch.counts.waiting ?? 0 };
  if (batch.status !== 'open')
    return [
      ['done', c.done],
      ['failed', c.failed],
      ['not run', c.running + c.waiting + c.pending],
    ];
  return ITEM_STATES.map((s) => [s, c[s]]);
}

/** The CSS class of a {@link Shown} part. */
const partClass = (s: Shown) => (s === 'not run' ? 'notrun' : s);

/**
 * A batch's items by state as one bar ({@link shownCounts}), with the share finished as its
 * value: a `progressbar` whose text says every count.
 */
export function ProgressBar({ batch }: { batch: Pick<Batch, 'total' | 'counts' | 'status'> }) {
  const { total, counts } = batch;
  const finished = counts.done + counts.failed;
  const pct = percent(finished, total);
  const parts = shownCounts(batch);
  const text = `${pct} %: ${finished} of ${total} finished (${parts.map(([s, n]) => `${n} ${s}`).join(', ')})`;
  return html`<div class="progress">
    <div
      class="bar"
      role="progressbar"
      aria-valuemin="0"
      aria-valuemax=${total}
      aria-valuenow=${finished}
      aria-valuetext=${text}
      title=${text}
      data-percent=${pct}
    >
      ${parts.map(([s, n]) => html`<span class=${`seg ${partClass(s)}`} style=${{ width: `${total ? (100 * n) / total : 0}%` }}></span>`)}
    </div>
    <span class="pct">${pct} %</span>
  </div>`;
}

/** The counts of a batch's items as {@link shownCounts} has them, with their colours. */
export function CountsLegend({ batch }: { batch: Pick<Batch, 'status' | 'counts'> }) {
  return html`<ul class="legend">
    ${shownCounts(batch).map(
      ([s, n]) =>
        html`<li data-part=${s}><span class=${`swatch ${partClass(s)}`} aria-hidden="true"></span>${s} <strong>${n}</strong></li>`,
    )}
  </ul>`;
}

/**
 * The weight a process owns against the fair share: a bar of `weight` on a scale of `scale`,
 * with a mark at `fairShare`.
 */
export function WeightBar({
  weight,
  fairShare,
  evenShare,
  scale,
}: {
  weight: number;
  fairShare: number | undefined;
  evenShare?: number;
  scale: number;
}) {
  const width = scale > 0 ? Math.min(100, (100 * weight) / scale) : 0;
  const mark = fairShare !== undefined && scale > 0 ? Math.min(100, (100 * fairShare) / scale) : undefined;
  const over = fairShare !== undefined && weight > fairShare;
  const label =
    `weight ${weight}${fairShare === undefined ? '' : ` of fair share ${fairShare}`}` +
    (evenShare ? ` (${evenSharePercent(weight, evenShare)} % of the even share ${round2(evenShare)})` : '');
  return html`<div class="weight" role="img" aria-label=${label} title=${label} data-weight=${weight}>
    <span class=${over ? 'fill over' : 'fill'} style=${{ width: `${width}%` }}></span>
    ${mark === undefined ? null : html`<span class="share" style=${{ left: `${mark}%` }}></span>`}
  </div>`;
}

/** `weight` against the exact share, in percent with at most one decimal (3 of 8 over 3 processes: 112.5). */
export function evenSharePercent(weight: number, evenShare: number): number {
  return Math.round((1000 * weight) / evenShare) / 10;
}

/** At most two decimals: 2.6666… reads 2.67. */
export function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

/** A time as the page writes every time ({@link when}: `2026-12-02 04:17:18`), in a `<time>`. */
export function Time({ at }: { at: string | null | undefined }) {
  if (!at) return html`<span class="muted">–</span>`;
  return html`<time datetime=${at}>${when(at)}</time>`;
}

/**
 * A waiting item's wait: what it waits for and its deadlines ({@link waitDeadlines}) from `now`
 * (ms since the epoch, the page's clock when the items were read), each relative with its
 * absolute time as its title: `callback · times out in 9 min 58 s · heartbeat due in 28 s`,
 * `sleep · wakes in 4 min 5 s`.
 */
export function WaitNote({ wait, now }: { wait: ItemWait; now: number }) {
  return html`<span class="wait" data-wait=${wait.kind}
    >${wait.kind}${waitDeadlines(wait, now).map(
      (d) =>
        html` · ${d.label}${' '}<span class="deadline" data-wait-deadline=${d.label} data-at=${d.at} title=${d.absolute}>${d.relative}</span>`,
    )}</span
  >`;
}

/**
 * How full a concurrency pool is ({@link poolUse}): a `meter` of `inFlight` on a scale of `total`
 * (a pool's cap, or a per-key pool's `perKey` for one key), with its percentage beside it; filled
 * in the colour of a weight over its share when more are in flight than the cap.
 */
export function PoolBar({ pool }: { pool: Pick<Pool, 'inFlight' | 'total'> }) {
  const use = poolUse(pool);
  return html`<div class="progress pool-use">
    <div
      class="bar"
      role="meter"
      aria-valuemin="0"
      aria-valuemax=${pool.total}
      aria-valuenow=${pool.inFlight}
      aria-valuetext=${use.text}
      title=${use.text}
      data-percent=${use.percent}
    >
      <span class=${use.over ? 'seg over' : 'seg running'} style=${{ width: `${use.fill}%` }}></span>
    </div>
    <span class="pct">${use.percent} %</span>
  </div>`;
}
