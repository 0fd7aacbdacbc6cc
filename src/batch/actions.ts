// Bulk actions: one request cancels, pauses, resumes or redrives every batch a filter matches, as
// one tracked action (docs/design.md, "Bulk actions"; issue 39). The action snapshots the batches
// it matched, then works them in bounded chunks claimed with FOR UPDATE SKIP LOCKED. A cancel ends
// a chunk in one short transaction (sql/cancels.ts); otherwise, and when that chunk meets a lock
// it may not wait for, each batch goes through the one-batch code path (the cancel, pause and
// resume statements, redriveBatch) in a short transaction of its own. Both run under a short
// lock_timeout, so the action never waits long on a worker and never holds a lock a worker waits
// on for longer than one chunk's cancel or one batch's end.
import { randomUUID } from 'node:crypto';
import { codeOf, LeaseholdError } from '../errors.js';
import type { Sql } from '../store/index.js';
import { BatchFinishedError, BatchNotFoundError } from './request-errors.js';
import { redriveBatch } from './redrive.js';
import { isUuid } from './batches.js';
import * as a from './sql/actions.js';
import * as q from './sql/index.js';
import { cancelBatches } from './sql/cancels.js';

export type { ActionFilter, ActionKind, FilterStatus } from './sql/actions.js';

/** No action has this id (code `action_not_found`, 404). */
export class ActionNotFoundError extends LeaseholdError {
  constructor(readonly id: string) {
    super('action_not_found', `no action ${id}`);
  }
}

/** A filter matched more batches than one action may hold (code `too_many_matched`, 413). */
export class TooManyMatchedError extends LeaseholdError {
  constructor(readonly max: number) {
    super(
      'too_many_matched',
      `the filter matches more than ${max} batches (maxMatched); narrow it (tenant, datasource, job, created range)`,
    );
  }
}

/** What a caller asks an action for. */
export interface ActionRequest {
  /** Idempotency: the first request with this key makes the action; later ones answer it. */
  requestKey: string;
  action: a.ActionKind;
  /** The batches it is for. A `status` left out means the states the action can change: see {@link DEFAULT_STATUS}. */
  filter: a.ActionFilter;
}

/** The states an action matches when its filter names none. */
export const DEFAULT_STATUS: Readonly<Record<a.ActionKind, a.FilterStatus[]>> = {
  cancel: ['open'],
  pause: ['running'],
  resume: ['paused'],
  redrive: ['failed'],
};

/** The limits and pace of bulk actions; every field has a default (`ACTION_DEFAULTS`). */
export interface ActionSettings {
  /** Most batches one action may match; a filter matching more is refused. @defaultValue 100000 */
  maxMatched: number;
  /** Batches one chunk claims. @defaultValue 100 */
  chunk: number;
  /** Batches of a chunk worked at once, each its own transaction (pause, resume, redrive, and a cancel's chunk that met a lock it may not wait for: a cancel ends its chunk in one). @defaultValue 4 */
  parallel: number;
  /** `lock_timeout` of one batch's transaction, ms: a batch a worker holds longer is busy, tried later. @defaultValue 200 */
  lockTimeoutMs: number;
  /** Tries of a busy batch before it is skipped with reason `busy`. @defaultValue 5 */
  maxTries: number;
  /** How long a busy batch waits before its next try, ms. @defaultValue 1000 */
  busyRetryMs: number;
  /** How long a claimed chunk is taken, ms: a worker that died leaves it to others after this. @defaultValue 60000 */
  takeMs: number;
  /** Most unfinished batches of a datasource a redrive leaves (as for a start). @defaultValue 4 */
  maxOpen: number;
  /**
   * After each chunk the action pauses this many times as long as the chunk took, as a retention
   * pass does, so the batches running meanwhile keep most of the database (1: half the time
   * working; 2: a third). Never after the last chunk, and never past `budgetMs`. 0 never pauses.
   * @defaultValue 2
   */
  pauseRatio: number;
}

/** The defaults of {@link ActionSettings}. */
export const ACTION_DEFAULTS: Readonly<ActionSettings> = {
  maxMatched: 100_000,
  chunk: 100,
  parallel: 4,
  lockTimeoutMs: 200,
  maxTries: 5,
  busyRetryMs: 1000,
  takeMs: 60_000,
  maxOpen: 4,
  pauseRatio: 2,
};

/** An action as it is read: its request, its counts and why batches were skipped. */
export interface ActionInfo {
  id: string;
  requestKey: string;
  action: a.ActionKind;
  /** The filter as stored (instants as ISO strings, the default status filled in). */
  filter: Record<string, unknown>;
  /** Batches the filter matched when the action was made. */
  matched: number;
  /** Batches the action changed. */
  done: number;
  /** Batches it left as they were (see `skippedReasons`). */
  skipped: number;
  /** Batches not worked yet: `matched − done − skipped`. */
  remaining: number;
  /** Skipped batches by reason: `already cancelled`, `already paused`, `not paused`, `not_found`, `busy`, a redrive's error code… */
  skippedReasons: { reason: string; count: number }[];
  /** Up to 20 skipped batches with their reason, in id order. */
  skippedBatches: { batchId: string; reason: string }[];
  createdAt: Date;
  /** When its last batch was worked (database clock); null while it works. */
  finishedAt: Date | null;
}

function storedFilter(f: a.ActionFilter): Record<string, unknown> {
  return {
    ...f,
    ...(f.createdAfter ? { createdAfter: f.createdAfter.toISOString() } : {}),
    ...(f.createdBefore ? { createdBefore: f.createdBefore.toISOString() } : {}),
  };
}

/**
 * Make an action: snapshot the batches `request.filter` matches now (a plain read, no batch
 * locked; batches started later are not the action's) in one transaction with its row. The same
 * request key answers the action it made before (`created: false`), also under concurrent
 * requests, whatever its filter. Working it is {@link workAction}'s.
 * @throws {TooManyMatchedError} more than `maxMatched` batches match (nothing is stored).
 */
export async function startAction(
  sql: Sql,
  request: ActionRequest,
  settings: Partial<ActionSettings> = {},
): Promise<{ action: ActionInfo; created: boolean }> {
  const s = { ...ACTION_DEFAULTS, ...settings };
  const earlier = await a.actionByKey(sql, request.requestKey);
  if (earlier) return { action: await getAction(sql, earlier.id), created: false };
  const filter = { ...request.filter, status: request.filter.status ?? DEFAULT_STATUS[request.action] };
  const id = randomUUID();
  const made = await sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const r = await a.insertAction(t, {
      id,
      requestKey: request.requestKey,
      action: request.action,
      filter,
      stored: storedFilter(filter),
      max: s.maxMatched,
    });
    if (r.inserted && r.matched > s.maxMatched) throw new TooManyMatchedError(s.maxMatched);
    return r.inserted;
  });
  if (!made) {
    const row = await a.actionByKey(sql, request.requestKey);
    if (!row) throw new ActionNotFoundError(request.requestKey);
    return { action: await getAction(sql, row.id), created: false };
  }
  return { action: await getAction(sql, id), created: true };
}

/**
 * Read an action with its progress.
 * @throws {ActionNotFoundError} no action has this id.
 */
export async function getAction(sql: Sql, id: string): Promise<ActionInfo> {
  const row = isUuid(id) ? await a.getAction(sql, id) : undefined;
  if (!row) throw new ActionNotFoundError(id);
  const [skippedReasons, skippedBatches] = await Promise.all([a.skippedReasons(sql, id), a.skippedSample(sql, id, 20)]);
  return {
    id: row.id,
    requestKey: row.request_key,
    action: row.action,
    filter: row.filter,
    matched: row.matched,
    done: row.done,
    skipped: row.skipped,
    remaining: row.matched - row.done - row.skipped,
    skippedReasons,
    skippedBatches,
    createdAt: row.created_at,
    finishedAt: row.finished_at,
  };
}

// One batch's transaction under a short lock_timeout: a lock a worker holds longer makes the
// batch busy (tried by a later chunk), so the action never queues behind the fleet. It commits
// without waiting for its WAL flush (synchronous_commit off, this transaction only): the locks it
// holds (the batch row, its tenant's row, which every end of one of the tenant's batches takes)
// go as soon as it commits, not a disk flush later. Nothing is lost by it: WAL is flushed in
// order, so the chunk's record of outcomes, committed durably after, makes these durable too, and
// a crash before that record undoes the record as well: the chunk is worked again.
function shortLocks<T>(sql: Sql, ms: number, f: (t: Sql) => Promise<T>): Promise<T> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await a.shortLocks(t, ms);
    return f(t);
  }) as Promise<T>;
}

/** Lock timeout (55P03) or a deadlock PostgreSQL broke (40P01): the batch is busy now. */
function isBusy(e: unknown): boolean {
  const code = codeOf(e);
  return code === '55P03' || code === '40P01';
}

// One batch through the one-batch code path of `kind`: done, or skipped with the reason its
// refusal gives, or busy. Cancel, pause and resume send the one-batch statements themselves
// (sql/ends.ts's cancel with its fences and Batch Finished event, sql/steer.ts's pause and resume)
// without the batch reads the one-batch functions answer with: a bulk action answers counts. Any
// other error is the chunk's (it stops; its batches stay unworked and are taken again later).
async function workOne(
  sql: Sql,
  kind: a.ActionKind,
  actionId: string,
  batchId: string,
  s: ActionSettings,
): Promise<a.BatchOutcome> {
  try {
    if (kind === 'redrive') {
      // Its own transaction (the datasource lock, then the batch's); the pool's lock_timeout
      // bounds its waits, and the action's key makes a retried redrive answer the first.
      const r = await redriveBatch(sql, batchId, { maxOpen: s.maxOpen, idempotencyKey: `action:${actionId}` });
      return r.redriven ? { batchId, outcome: 'done' } : { batchId, outcome: 'skipped', reason: 'already redriven' };
    }
    return await shortLocks(sql, s.lockTimeoutMs, async (t): Promise<a.BatchOutcome> => {
      if (kind === 'cancel') {
        if (await q.cancelBatch(t, batchId)) return { batchId, outcome: 'done' };
        const status = await a.batchState(t, batchId);
        return { batchId, outcome: 'skipped', reason: status ? `already ${status.status}` : 'not_found' };
      }
      const before = await a.batchState(t, batchId);
      if (!before) return { batchId, outcome: 'skipped', reason: 'not_found' };
      if (before.status !== 'open') return { batchId, outcome: 'skipped', reason: `already ${before.status}` };
      if (kind === 'pause' && before.paused) return { batchId, outcome: 'skipped', reason: 'already paused' };
      if (kind === 'resume' && !before.paused) return { batchId, outcome: 'skipped', reason: 'not paused' };
      const after = await (kind === 'pause' ? q.pauseBatch(t, batchId) : q.resumeBatch(t, batchId));
      if (after !== 'open') return { batchId, outcome: 'skipped', reason: after ? `already ${after}` : 'not_found' };
      return { batchId, outcome: 'done' };
    });
  } catch (e) {
    if (isBusy(e)) return { batchId, outcome: 'busy' };
    if (e instanceof BatchFinishedError) return { batchId, outcome: 'skipped', reason: `already ${e.status}` };
    if (e instanceof BatchNotFoundError) return { batchId, outcome: 'skipped', reason: 'not_found' };
    const code = codeOf(e);
    if (e instanceof LeaseholdError && code) return { batchId, outcome: 'skipped', reason: code };
    throw e;
  }
}

// A chunk's batches one by one through workOne, `parallel` at a time; then each that was busy
// once more, alone. Every one-batch change updates its tenant's row (the trigger), so under load
// two lanes on one tenant's batches can wait on each other past the lock_timeout: a batch busy
// only for that is done on the second try, and only a lock another transaction holds keeps a
// batch busy (CI, 2026-12-07: a chunk with one held batch recorded two busy).
async function workEach(
  sql: Sql,
  kind: a.ActionKind,
  actionId: string,
  ids: string[],
  s: ActionSettings,
): Promise<a.BatchOutcome[]> {
  const outcomes: a.BatchOutcome[] = [];
  let next = 0;
  const lane = async () => {
    while (next < ids.length) outcomes.push(await workOne(sql, kind, actionId, ids[next++], s));
  };
  await Promise.all(Array.from({ length: Math.min(s.parallel, ids.length) }, lane));
  if (s.parallel <= 1 || !outcomes.some((o) => o.outcome === 'busy')) return outcomes;
  const settled: a.BatchOutcome[] = outcomes.filter((o) => o.outcome !== 'busy');
  for (const o of outcomes) if (o.outcome === 'busy') settled.push(await workOne(sql, kind, actionId, o.batchId, s));
  return settled;
}

// A cancel's chunk in one short transaction (sql/cancels.ts: four statements for the chunk, not
// four per batch, and each tenant's row locked once, for the last statement and the commit). A
// batch whose rows a worker holds past the lock_timeout, or a deadlock, makes the whole chunk's
// transaction fail: then undefined, and the chunk is worked one batch at a time as before, so
// only the batches really held are busy.
async function cancelChunk(sql: Sql, ids: string[], s: ActionSettings): Promise<a.BatchOutcome[] | undefined> {
  try {
    const { cancelled, others } = await shortLocks(sql, s.lockTimeoutMs, (t) => cancelBatches(t, ids));
    return [
      ...cancelled.map((batchId): a.BatchOutcome => ({ batchId, outcome: 'done' })),
      ...[...others].map(([batchId, status]): a.BatchOutcome => ({
        batchId,
        outcome: 'skipped',
        reason: status ? `already ${status}` : 'not_found',
      })),
    ];
  } catch (e) {
    if (isBusy(e)) return undefined;
    throw e;
  }
}

/** What one {@link workAction} call did. */
export interface WorkResult {
  /** Chunks it claimed and recorded. */
  chunks: number;
  /** Batches it worked (done, skipped or busy). */
  batches: number;
  /** Whether the action has no batch left unworked. */
  finished: boolean;
}

/**
 * Work an action's batches in chunks of `chunk` until none is left or `budgetMs` has passed (a
 * chunk begun is finished), pausing `pauseRatio` times each chunk's time after it: each chunk is claimed with FOR UPDATE SKIP LOCKED (so the API call
 * and the scheduler, or two scheduler runs, never work one batch at once) and committed before
 * its batches are worked: a cancel's chunk in one transaction (its batches one at a time when it
 * meets a lock it may not wait for), others `parallel` at a time, each through the one-batch code
 * path; its outcomes are recorded in one statement. Cancelled batches' Batch Finished events are sent by
 * the scheduler's events service; resumed and redriven batches get workers from its dispatch.
 * Safe to call from anywhere at any time, any number of times at once.
 * @throws {ActionNotFoundError} no action has this id.
 */
export async function workAction(
  sql: Sql,
  id: string,
  options: Partial<ActionSettings> & { budgetMs?: number } = {},
): Promise<WorkResult> {
  const s = { ...ACTION_DEFAULTS, ...options };
  const row = isUuid(id) ? await a.getAction(sql, id) : undefined;
  if (!row) throw new ActionNotFoundError(id);
  const started = performance.now();
  const result: WorkResult = { chunks: 0, batches: 0, finished: row.finished_at !== null };
  const budgetMs = options.budgetMs ?? Infinity;
  // The first chunk is always worked; the budget is checked before each later one.
  while (!result.finished && (result.chunks === 0 || performance.now() - started < budgetMs)) {
    const chunkStarted = performance.now();
    const ids = await a.claimChunk(sql, { actionId: id, limit: s.chunk, takeMs: s.takeMs });
    if (ids.length === 0) break;
    const outcomes =
      (row.action === 'cancel' && (await cancelChunk(sql, ids, s))) || (await workEach(sql, row.action, id, ids, s));
    await a.recordOutcomes(sql, id, outcomes, s);
    result.chunks++;
    result.batches += outcomes.length;
    result.finished = (await a.getAction(sql, id))?.finished_at != null;
    // The pace (docs/design.md, "Bulk actions"): a running batch kept 81-85 % of its speed
    // beside an action working chunk after chunk, 2 cores.
    const left = budgetMs - (performance.now() - started);
    if (!result.finished && s.pauseRatio > 0 && left > 0) {
      const pause = Math.min((performance.now() - chunkStarted) * s.pauseRatio, left);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
  return result;
}

/**
 * Work the unfinished actions, oldest first (at most `limit` of them, default 10), each until it
 * is finished or `budgetMs` (default 10000) has passed in all: the scheduler's actions service.
 * Resolves to the batches worked.
 */
export async function workUnfinishedActions(
  sql: Sql,
  options: Partial<ActionSettings> & { budgetMs?: number; limit?: number } = {},
): Promise<number> {
  const started = performance.now();
  const budgetMs = options.budgetMs ?? 10_000;
  let batches = 0;
  for (const id of await a.unfinishedActions(sql, options.limit ?? 10)) {
    const left = budgetMs - (performance.now() - started);
    if (left <= 0) break;
    batches += (await workAction(sql, id, { ...options, budgetMs: left })).batches;
  }
  return batches;
}
