// How batches progress, as a dashboard shows it: items finished over time and per second, and
// how old a batch is. Every duration is measured by the database clock (docs/design.md, "Batches").
import type { Sql } from '../store/index.js';
import { BatchNotFoundError } from './request-errors.js';
import { isUuid } from './batches.js';
import * as q from './sql/progress.js';
import { InvalidSettingError } from '../errors.js';

/** Items finished over a batch's life, in buckets of equal length: {@link finishedSeries}. */
export interface FinishedSeries {
  /** Start of the first bucket: the batch's creation. */
  from: Date;
  /** Length of one bucket, ms: a round step (1 s, 2 s, 5 s, … 1 min, … 1 h, … 1 day or whole days). */
  bucketMs: number;
  /**
   * Bucket `i` covers `[from + i·bucketMs, from + (i+1)·bucketMs)`: the items that last finished
   * in it, `done` and `failed`. The last bucket holds now (open batch) or the finish.
   */
  buckets: { done: number; failed: number }[];
}

/** Round bucket lengths, ms, smallest first. */
const STEPS_MS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((s) => s * 1000);

/** Most buckets {@link finishedSeries} answers. */
export const MAX_SERIES_BUCKETS = 500;

/**
 * The round bucket length, ms, that cuts a span of `spanMs` into at most `buckets` buckets.
 * @throws {InvalidSettingError} `buckets` is not a whole number from 1 to {@link MAX_SERIES_BUCKETS}.
 */
export function bucketLengthMs(spanMs: number, buckets: number): number {
  if (!Number.isInteger(buckets) || buckets < 1 || buckets > MAX_SERIES_BUCKETS) {
    throw new InvalidSettingError('buckets', `must be a whole number from 1 to ${MAX_SERIES_BUCKETS}, got ${buckets}`);
  }
  const least = Math.max(spanMs, 1) / buckets;
  return STEPS_MS.find((s) => s >= least) ?? Math.ceil(least / 86_400_000) * 86_400_000;
}

/**
 * Items of batch `id` finished over time: the batch's life, from its creation until it finished
 * (or now while it is open), cut into at most `buckets` (default 60) buckets of a round length,
 * each with the count of items that last finished in it (`done`, `failed`), by the items'
 * last move (database clock). A redriven item counts where it finished last.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {InvalidSettingError} `buckets` outside 1..{@link MAX_SERIES_BUCKETS}.
 */
export async function finishedSeries(sql: Sql, id: string, options: { buckets?: number } = {}): Promise<FinishedSeries> {
  const wanted = options.buckets ?? 60;
  const span = isUuid(id) ? await q.batchSpan(sql, id) : undefined;
  if (!span) throw new BatchNotFoundError(id);
  const bucketMs = bucketLengthMs(span.spanMs, wanted);
  const rows = await q.finishedBuckets(sql, id, bucketMs);
  const count = Math.max(1, Math.ceil(span.spanMs / bucketMs), (rows.at(-1)?.bucket ?? -1) + 1);
  const buckets = Array.from({ length: count }, () => ({ done: 0, failed: 0 }));
  for (const r of rows) buckets[r.bucket] = { done: r.done, failed: r.failed };
  return { from: span.createdAt, bucketMs, buckets };
}

/** How a batch is doing now: {@link batchActivity}. */
export interface BatchActivity {
  /** Time since it was created, ms (database clock). */
  ageMs: number;
  /**
   * Items finished (done or failed) per second: over the last `windowMs` while the batch is
   * open (over its life when it is younger, but at least 1 s), over its whole life once it has
   * finished (at least 1 s).
   */
  itemsPerSecond: number;
}

/**
 * The age and rate of each batch of `ids` (unknown ids are left out), by the database clock.
 * `windowMs` (default 10,000) is the window of an open batch's rate.
 */
export async function batchActivity(
  sql: Sql,
  ids: readonly string[],
  options: { windowMs?: number } = {},
): Promise<Map<string, BatchActivity>> {
  const known = ids.filter(isUuid);
  const out = new Map<string, BatchActivity>();
  if (known.length === 0) return out;
  for (const r of await q.batchActivity(sql, known, options.windowMs ?? 10_000)) {
    out.set(r.id, { ageMs: Math.round(r.age_ms), itemsPerSecond: Math.round(r.per_second * 100) / 100 });
  }
  return out;
}
