import type { Sql } from '../store/index.js';
import {
  BatchFinishedError,
  BatchNotFoundError,
  BatchTooLargeError,
  InvalidBatchError,
  TooManyBatchesError,
} from './request-errors.js';
import { BATCH_DEFAULTS } from './defaults.js';
import { DEFAULT_START_LIMITS, insertItems, readItems, type StartLimits } from './items.js';
import * as q from './sql/index.js';
import { poolExists } from './sql/pools.js';
import { MAX_POOL_NAME } from './pool.js';
import { MAX_RATE_PER_SECOND, MIN_RATE_PER_SECOND, validRate } from './rate.js';
import {
  MAX_CONCURRENCY,
  MAX_DEADLINE_MS,
  MAX_ITEM_TIMEOUT_MS,
  MAX_MIN_SUCCEEDED,
  MAX_PRIORITY,
  type BatchInfo,
  type BatchStatus,
  type ItemResult,
  type ItemState,
  type NewBatch,
  type ToleratedFailures,
} from './types.js';

/** Largest `toleratedFailures.count` (the column is a 32-bit integer). */
export const MAX_TOLERATED_COUNT = 2_147_483_647;

/**
 * Check a start's `toleratedFailures` (docs/design.md, "Batches": "End"): null/undefined, or an
 * object with exactly one of `count` (a whole number from 0 to {@link MAX_TOLERATED_COUNT}) and
 * `percent` (a number from 0 to 100).
 * @throws {InvalidBatchError} naming the offending field (`toleratedFailures.count: …`).
 */
export function checkToleratedFailures(t: ToleratedFailures | null | undefined): void {
  if (t === undefined || t === null) return;
  const refuse = (m: string) => {
    throw new InvalidBatchError(`toleratedFailures${m}`);
  };
  if (typeof t !== 'object' || Array.isArray(t)) return refuse(': must be { count } or { percent }');
  const keys = Object.keys(t);
  if (keys.length !== 1 || (keys[0] !== 'count' && keys[0] !== 'percent')) {
    return refuse(`: must be { count } or { percent }, got fields ${keys.join(', ') || 'none'}`);
  }
  if ('count' in t) {
    const c = t.count;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 0 || c > MAX_TOLERATED_COUNT) {
      refuse(`.count: must be a whole number from 0 to ${MAX_TOLERATED_COUNT}, got ${String(c)}`);
    }
  } else {
    const p = t.percent;
    if (typeof p !== 'number' || !Number.isFinite(p) || p < 0 || p > 100) {
      refuse(`.percent: must be a number from 0 to 100, got ${String(p)}`);
    }
  }
}

/** Options of {@link createBatch}. */
export interface CreateOptions {
  /** Most unfinished batches one (tenant, datasource) may have. Default `BATCH_DEFAULTS.maxOpen` (4). */
  maxOpen?: number;
  /** What one start may hold; each unset field takes its {@link DEFAULT_START_LIMITS} value. */
  limits?: Partial<StartLimits>;
}

/**
 * Check a start's `notify`: `{ url }` with an absolute http(s) URL of at most 2,048 characters
 * (where it points is checked when the webhook is sent, by outbox delivery's address policy).
 * @throws {InvalidBatchError} otherwise, naming what is wrong.
 */
export function checkNotify(notify: { url: string } | null | undefined): void {
  if (notify === null || notify === undefined) return;
  const url = (notify as { url?: unknown }).url;
  if (typeof url !== 'string' || url.length > 2048) {
    throw new InvalidBatchError('notify.url: must be an absolute http:// or https:// URL of at most 2048 characters');
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidBatchError(`notify.url: not a URL (${JSON.stringify(url.slice(0, 200))})`);
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '') {
    throw new InvalidBatchError(`notify.url: must be an absolute http:// or https:// URL (got ${u.protocol})`);
  }
}

/**
 * Start a batch: insert it and all its items in one transaction, without running it.
 *
 * `batch.items` may be an array or stream from an iterable or async iterable (a directory
 * listing, say): items are checked against `limits` and serialised in pieces of bounded size as
 * they come, each piece one insert, so a start of any allowed size succeeds and a refused one stores nothing
 * (docs/design.md, "Batches"). The iterable is read before the start's transaction, and only when
 * no batch of the request key exists yet; then the transaction takes the locks below and writes
 * the batch and its pieces back to back (docs/design.md, "Start": read first, then lock and
 * insert). The read pieces are held in memory meanwhile (at most `limits.maxTotalBytes` of keys
 * and inputs).
 *
 * The same `(tenant, requestKey)` answers the batch that key started before, with
 * `created: false`, and never starts a second one, also under concurrent calls. A datasource
 * with `maxOpen` open batches refuses a new one; starts on one datasource are decided one at a
 * time under a row lock, so concurrent starts never exceed `maxOpen` (docs/design.md, "Batches").
 *
 * `batch.toleratedFailures` (default none) is kept with the batch: see {@link ToleratedFailures}.
 *
 * @throws {InvalidBatchError} a priority that is not an integer from 0 to 9, no items, two items
 *   with one key, a key or input PostgreSQL cannot store (NUL, unpaired surrogates), an input
 *   that is not JSON; a `toleratedFailures` out of range ({@link checkToleratedFailures}).
 * @throws {BatchTooLargeError} over a limit: item count, key bytes ({@link MAX_KEY_BYTES}),
 *   input bytes, total bytes.
 * @throws {TooManyBatchesError} the datasource already has `maxOpen` open batches.
 * @throws what the item iterable throws (the start then stores nothing).
 */
export async function createBatch(
  sql: Sql,
  batch: NewBatch,
  options: CreateOptions = {},
): Promise<{ batch: BatchInfo; created: boolean }> {
  checkToleratedFailures(batch.toleratedFailures);
  checkNotify(batch.notify);
  const maxOpen = options.maxOpen ?? BATCH_DEFAULTS.maxOpen;
  const limits: StartLimits = { ...DEFAULT_START_LIMITS, ...options.limits };
  const priority = batch.priority ?? BATCH_DEFAULTS.priority;
  const maxConcurrency = batch.maxConcurrency ?? BATCH_DEFAULTS.maxConcurrency;
  checkMaxConcurrency(maxConcurrency);
  if (batch.timeoutMs != null) checkItemTimeout(batch.timeoutMs);
  if (batch.ratePerSecond != null) checkRatePerSecond(batch.ratePerSecond);
  checkMinSucceeded(batch.minSucceeded);
  if (batch.pool != null) {
    if (typeof batch.pool !== 'string' || batch.pool.length < 1 || batch.pool.length > MAX_POOL_NAME) {
      throw new InvalidBatchError(`pool must be a name of 1 to ${MAX_POOL_NAME} characters`);
    }
    // A start names a pool that exists: one it made up would never grant a permit.
    if (!(await poolExists(sql, batch.pool))) {
      throw new InvalidBatchError(
        `pool "${batch.pool}" does not exist: set its limit first (PUT /pools/{name}, or \`leasehold pool set ${batch.pool} --limit N\`)`,
      );
    }
  }
  checkDeadline(batch);
  if (!Number.isInteger(priority) || priority < 0 || priority > MAX_PRIORITY) {
    throw new InvalidBatchError(`priority must be an integer from 0 to ${MAX_PRIORITY} (got ${String(batch.priority)})`);
  }
  const known = Array.isArray(batch.items) ? batch.items.length : 0;
  if (known > limits.maxItems) {
    throw new BatchTooLargeError('items', limits.maxItems, `item count: ${known} items; the limit is ${limits.maxItems}`);
  }

  // Read first, then lock and insert (docs/design.md, "Start"): a key that started a batch before
  // answers it without reading; otherwise the items are read and checked before the transaction,
  // so the transaction never waits on the source while it holds the locks below (a session idle
  // in a transaction is ended by the server, and its locks would hold up every start on the
  // datasource).
  const before = await q.batchIdByKey(sql, batch.tenant, batch.requestKey);
  if (before) return { batch: (await q.getBatch(sql, before))!, created: false };
  // A batch read from a source starts with no items: its runs read them (docs/design.md, "Sources and results").
  const pieces = batch.source ? { pieces: [], count: 0 } : await readItems(batch.items, limits);

  const id = await sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    // Same request key first, then the datasource (always in this order): a concurrent start
    // with this key is seen once it commits, instead of being refused by maxOpen.
    await q.lockRequestKey(t, batch.tenant, batch.requestKey);
    await q.lockDatasource(t, batch.tenant, batch.datasource);
    const existing = await q.batchIdByKey(t, batch.tenant, batch.requestKey);
    if (existing) return { id: existing, created: false };
    if ((await q.countOpen(t, batch.tenant, batch.datasource)) >= maxOpen) {
      throw new TooManyBatchesError(batch.tenant, batch.datasource, maxOpen);
    }
    const inserted = await q.insertBatch(t, {
      ...batch,
      total: known,
      priority,
      maxConcurrency,
      source: batch.source ?? undefined,
      results: batch.results ?? undefined,
    });
    if (!inserted) {
      // The same key committed on another datasource meanwhile: answer that batch.
      return { id: (await q.batchIdByKey(t, batch.tenant, batch.requestKey))!, created: false };
    }
    const total = await insertItems(t, inserted, pieces);
    if (total !== known) await q.setTotal(t, inserted, total);
    return { id: inserted, created: true };
  });
  return { batch: (await q.getBatch(sql, id.id))!, created: id.created };
}

/**
 * Check an early completion's `minSucceeded` (docs/design.md, "End"): null or a whole number from
 * 1 to {@link MAX_MIN_SUCCEEDED}.
 * @throws {InvalidBatchError} otherwise.
 */
export function checkMinSucceeded(n: number | null | undefined): void {
  if (n == null) return;
  if (!Number.isInteger(n) || n < 1 || n > MAX_MIN_SUCCEEDED) {
    throw new InvalidBatchError(
      `completion.minSucceeded must be a whole number from 1 to ${MAX_MIN_SUCCEEDED} (got ${String(n)})`,
    );
  }
}

/**
 * Read a batch with its item counts.
 * @throws {BatchNotFoundError} no batch has this id (including ids that are not UUIDs).
 */
export async function getBatch(sql: Sql, id: string): Promise<BatchInfo> {
  const b = isUuid(id) ? await q.getBatch(sql, id) : undefined;
  if (!b) throw new BatchNotFoundError(id);
  return b;
}

/**
 * The batch that `requestKey` started for `tenant`, or undefined when the key started none.
 * Lets a caller answer a repeated start before doing any work for it (invariant 4 (docs/design.md)).
 */
export async function findBatchByKey(sql: Sql, tenant: string, requestKey: string): Promise<BatchInfo | undefined> {
  const id = await q.batchIdByKey(sql, tenant, requestKey);
  return id ? q.getBatch(sql, id) : undefined;
}

/**
 * List batches, newest first. `status` is a stored status, or `running` / `paused` (an open batch
 * not paused / paused). `limit` defaults to `BATCH_DEFAULTS.listLimit` (100).
 */
export async function listBatches(
  sql: Sql,
  filter: { tenant?: string; status?: BatchStatus | 'running' | 'paused'; limit?: number } = {},
): Promise<BatchInfo[]> {
  return q.listBatches(sql, { ...filter, limit: filter.limit ?? BATCH_DEFAULTS.listLimit });
}

/**
 * Cancel an open batch for good: its run's next beat or move changes nothing and it stops.
 * Items keep the state they had.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function cancelBatch(sql: Sql, id: string): Promise<BatchInfo> {
  const before = await getBatch(sql, id);
  if (!(await q.cancelBatch(sql, id))) {
    const now = await getBatch(sql, id);
    throw new BatchFinishedError(id, now.status ?? before.status);
  }
  return getBatch(sql, id);
}

/** Stream every item of a batch in key order. @throws {BatchNotFoundError} unknown id. */
export async function* batchResults(sql: Sql, id: string): AsyncGenerator<ItemResult> {
  await getBatch(sql, id);
  for await (const rows of q.itemResults(sql, id)) yield* rows;
}

/**
 * One page of a batch's items in key order: up to `limit` (default `BATCH_DEFAULTS.pageLimit`, 1,000) items with a key
 * after `after`, only those in `state` when given; `next` is the `after` of the following page,
 * or null on the last one.
 * @throws {BatchNotFoundError} unknown id.
 */
export async function itemsPage(
  sql: Sql,
  id: string,
  page: { after?: string; limit?: number; state?: ItemState } = {},
): Promise<{ items: ItemResult[]; next: string | null }> {
  // Only whether it exists: counting an open batch's items for every page would read them all.
  if (!isUuid(id) || !(await q.batchPlace(sql, id))) throw new BatchNotFoundError(id);
  const limit = page.limit ?? BATCH_DEFAULTS.pageLimit;
  // One row more than the page says whether another page follows: a page that ends at the last
  // item answers null, not a cursor to an empty page.
  const rows = await q.itemsPage(sql, id, { after: page.after, limit: limit + 1, state: page.state });
  const items = rows.length > limit ? rows.slice(0, limit) : rows;
  return { items, next: rows.length > limit ? items[items.length - 1].key : null };
}

/**
 * The runs of open batches (docs/design.md, "Fan-out"): how many batches have a live run, how
 * many runs they have in all and the most of one batch.
 */
export function runsSummary(sql: Sql): Promise<q.RunsSummary> {
  return q.runsSummary(sql);
}

/** Count open batches of every tenant. */
export function countOpenBatches(sql: Sql): Promise<number> {
  return q.countAllOpen(sql);
}

/**
 * Mark and return open batches that need workers, each id once per worker it needs: runs
 * below its target (never started, handed off, or runs that left), within its tenant's limit of
 * runs (its own, else `maxRunning`; default `BATCH_DEFAULTS.maxRunning`, no limit), plus one per stale run (beat older than
 * `staleMs`, database clock). A batch dispatched within `cooldownMs` that no run has joined
 * since is skipped, so overlapping callers never dispatch it twice (docs/design.md, "Fan-out"
 * and "Tenant fairness"). `limit` (default `BATCH_DEFAULTS.dispatchLimit`, 100) bounds the batches, not the workers.
 */
export async function claimDispatch(
  sql: Sql,
  options: { staleMs: number; cooldownMs: number; limit?: number; maxRunning?: number },
): Promise<string[]> {
  const rows = await q.claimDispatch(sql, {
    ...options,
    limit: options.limit ?? BATCH_DEFAULTS.dispatchLimit,
    maxRunning: options.maxRunning ?? BATCH_DEFAULTS.maxRunning,
  });
  return rows.flatMap((r) => Array.from({ length: r.workers }, () => r.id));
}

/**
 * Check an item timeout, ms: an integer from 1 to `limitMs` (default {@link MAX_ITEM_TIMEOUT_MS}).
 * A start passes what one worker invocation can give an item (docs/design.md, "Item timeouts"),
 * so a timeout that could never be reached is refused up front. `why` names the limit, `whence`
 * where it comes from (both in the message).
 * @throws {InvalidBatchError} naming the value and the limit.
 */
export function checkItemTimeout(ms: unknown, limitMs = MAX_ITEM_TIMEOUT_MS, why = '', whence = ''): void {
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1) {
    throw new InvalidBatchError(`timeoutMs must be a whole number of ms of at least 1 (got ${String(ms)})`);
  }
  if (ms > limitMs) {
    throw new InvalidBatchError(
      `timeoutMs ${ms} ms is longer than ${why || 'the longest item timeout'} (${limitMs} ms${whence ? `: ${whence}` : ''})`,
    );
  }
}

/**
 * Check a deadline: `deadline` a valid instant, `deadlineMs` a whole number from 1 to
 * {@link MAX_DEADLINE_MS}; never both.
 * @throws {InvalidBatchError} naming the value.
 */
export function checkDeadline(d: { deadline?: Date | null; deadlineMs?: number | null }): void {
  if (d.deadline != null && d.deadlineMs != null) {
    throw new InvalidBatchError('deadline and deadlineMs: give one of them, not both');
  }
  if (d.deadline != null && !(d.deadline instanceof Date && Number.isFinite(d.deadline.getTime()))) {
    throw new InvalidBatchError(`deadline must be an instant (got ${String(d.deadline)})`);
  }
  const ms = d.deadlineMs;
  if (ms != null && (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > MAX_DEADLINE_MS)) {
    throw new InvalidBatchError(`deadlineMs must be a whole number of ms from 1 to ${MAX_DEADLINE_MS} (got ${String(ms)})`);
  }
}

/**
 * Check a batch's `maxConcurrency`: an integer from 1 to {@link MAX_CONCURRENCY}.
 * @throws {InvalidBatchError} naming the value.
 */
export function checkMaxConcurrency(n: unknown): void {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_CONCURRENCY) {
    throw new InvalidBatchError(`maxConcurrency must be an integer from 1 to ${MAX_CONCURRENCY} (got ${String(n)})`);
  }
}

/**
 * Change how many runs an open batch may have at once (docs/design.md, "Fan-out"): its target
 * becomes `min(maxConcurrency, ceil(total / 100))`. Raised, workers join it (the scheduler
 * dispatches them within a tick, fleet processes with a free slot at once); lowered, the
 * newest runs beyond it hand off at their next beat, giving back their unstarted items with no
 * attempt used. Resolves to the batch as it is then.
 * @throws {InvalidBatchError} not an integer from 1 to {@link MAX_CONCURRENCY}.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function setMaxConcurrency(sql: Sql, id: string, maxConcurrency: number): Promise<BatchInfo> {
  checkMaxConcurrency(maxConcurrency);
  const status = isUuid(id) ? await q.setMaxConcurrency(sql, id, maxConcurrency) : undefined;
  if (!status) throw new BatchNotFoundError(id);
  if (status !== 'open') throw new BatchFinishedError(id, status);
  return getBatch(sql, id);
}

/**
 * Change an open batch's own rate limit while it runs (docs/design.md, "Rate limits"): every run
 * of it takes tokens at `perSecond` from its next take on (within a beat for a run that had no
 * rate limit). The bucket stays the job's per key, so the new rate holds fleet-wide at once.
 * Resolves to the batch as it is then.
 * @throws {InvalidBatchError} `perSecond` below {@link MIN_RATE_PER_SECOND} or past {@link MAX_RATE_PER_SECOND}.
 * @throws {BatchNotFoundError} unknown id.
 * @throws {BatchFinishedError} the batch already finished or was cancelled.
 */
export async function setRateLimit(sql: Sql, id: string, perSecond: number): Promise<BatchInfo> {
  checkRatePerSecond(perSecond);
  const status = isUuid(id) ? await q.setRatePerSecond(sql, id, perSecond) : undefined;
  if (!status) throw new BatchNotFoundError(id);
  if (status !== 'open') throw new BatchFinishedError(id, status);
  return getBatch(sql, id);
}

function checkRatePerSecond(rate: unknown): void {
  if (!validRate(rate)) {
    throw new InvalidBatchError(
      `rateLimit.perSecond must be a number from ${MIN_RATE_PER_SECOND} to ${MAX_RATE_PER_SECOND} (got ${String(rate)})`,
    );
  }
}

/**
 * Clear the dispatch mark of an open batch below its target (workers were not sent after all:
 * the worker limit had no room), so the next scheduler run dispatches it at once.
 */
export function undispatch(sql: Sql, batchId: string): Promise<void> {
  return q.undispatch(sql, batchId);
}

/** Record that `batchId` was just sent to a worker. */
export function markDispatched(sql: Sql, batchId: string): Promise<void> {
  return q.markDispatched(sql, batchId);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Whether `s` has the shape of a UUID (batch ids are UUIDs). */
export function isUuid(s: string): boolean {
  return UUID.test(s);
}
