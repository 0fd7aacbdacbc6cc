// Redrive: a finished batch's failed items back to pending with fresh attempts, and the batch
// open again (docs/design.md, "Batches"). A redrive is one transaction that holds the batch's
// datasource lock (as a start does) and then the batch row lock (as a takeover, finish or cancel
// does), so it is ordered against each of them and leaves one consistent state.
import type { Sql } from '../store/index.js';
import { getBatch, isUuid } from './batches.js';
import { BATCH_DEFAULTS } from './defaults.js';
import {
  BatchCancelledError,
  BatchExpiredError,
  SourceFailedError,
  BatchNotFoundError,
  BatchOpenError,
  NothingToRedriveError,
  TooManyBatchesError,
} from './request-errors.js';
import * as q from './sql/index.js';
import * as r from './sql/redrives.js';
import type { BatchInfo } from './types.js';

/** Options of {@link redriveBatch}. */
export interface RedriveOptions {
  /** Most unfinished batches one (tenant, datasource) may have, as for a start. Default `BATCH_DEFAULTS.maxOpen` (4). */
  maxOpen?: number;
  /**
   * Idempotency key: the first redrive of the batch with this key is done, every later one
   * answers that redrive and changes nothing. Default none: every call is a new redrive.
   */
  idempotencyKey?: string;
}

/** One redrive of a batch, as recorded. */
export interface Redrive {
  /** 1 for the batch's first redrive, 2 for the next, … */
  number: number;
  /** Failed items it put back to pending. */
  items: number;
  /** The idempotency key it was done with, or null. */
  idempotencyKey: string | null;
  /** When it was done (database clock). */
  at: Date;
}

/** What {@link redriveBatch} returns. */
export interface RedriveResult {
  /** The batch as it is after the call. */
  batch: BatchInfo;
  /** The redrive this call did, or, for a repeated idempotency key, the one that key did. */
  redrive: Redrive;
  /** True when this call redrove the batch; false when it answered an earlier redrive by its key. */
  redriven: boolean;
}

/**
 * Redrive a finished batch: every `failed` item goes back to `pending` with its attempts at 0
 * (fresh attempts; output and error cleared, due now), the batch becomes `open` again, unowned,
 * with no deadline, so the next takeover runs it (dispatching it is the caller's), and its
 * `redrives` count goes up. The items a failed batch's end left pending, running or waiting (its
 * deadline, or its failures, ended it first) keep their state and attempts, and run too.
 *
 * Rules (docs/design.md, "Batches"):
 * - only a finished batch (`succeeded` or `failed`) with at least one failed item, or a `failed`
 *   one its end left unfinished items in, is redriven; a `cancelled` batch never is (cancel is
 *   for good), nor a `succeeded` one whose only unfinished items its `completion` left;
 * - the batch counts against `maxOpen` again: a datasource with `maxOpen` open batches refuses
 *   the redrive as it refuses a start, decided under the same datasource lock, so concurrent
 *   starts and redrives never exceed it;
 * - with an idempotency key, the first call with that key on this batch redrives it and every
 *   later call (also a concurrent one) answers that redrive (`redriven: false`) and changes
 *   nothing, whatever the batch's state by then;
 * - the transaction locks the batch row before it reads the status, so a redrive never meets a
 *   run: a run that still owns the batch keeps it open (the redrive is refused), and a run that
 *   lost or finished it fences every later move on its own run id, which a redrive clears.
 *
 * @throws {BatchNotFoundError} no batch has this id.
 * @throws {BatchOpenError} the batch is open.
 * @throws {BatchCancelledError} the batch was cancelled.
 * @throws {BatchExpiredError} retention has begun to delete the batch's items.
 * @throws {SourceFailedError} the batch ended because its source could not be read.
 * @throws {NothingToRedriveError} the batch has no failed item, and it succeeded or its end left no unfinished item.
 * @throws {TooManyBatchesError} its datasource already has `maxOpen` open batches.
 */
export async function redriveBatch(sql: Sql, id: string, options: RedriveOptions = {}): Promise<RedriveResult> {
  const maxOpen = options.maxOpen ?? BATCH_DEFAULTS.maxOpen;
  const key = options.idempotencyKey ?? null;
  if (!isUuid(id)) throw new BatchNotFoundError(id);
  const outcome = await sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const place = await q.batchPlace(t, id);
    if (!place) throw new BatchNotFoundError(id);
    // Datasource first, then the batch: the order a start takes (its batch row is new).
    await q.lockDatasource(t, place.tenant, place.datasource);
    const locked = await r.lockBatch(t, id);
    if (locked === undefined) throw new BatchNotFoundError(id);
    const status = locked.status;
    if (key !== null) {
      const earlier = await r.redriveByKey(t, id, key);
      if (earlier) return { row: earlier, redriven: false };
    }
    if (status === 'open') throw new BatchOpenError(id);
    if (status === 'cancelled') throw new BatchCancelledError(id);
    if (locked.sourceFailed) throw new SourceFailedError(id);
    if (await r.partlyDeleted(t, id)) throw new BatchExpiredError(id);
    // A failed batch's unfinished items (its deadline or its failures ended it) run with a redrive
    // too; a batch that succeeded without some (its completion) got what it asked for.
    const unfinished = status === 'failed' ? await r.countUnfinished(t, id) : 0;
    if ((await r.countFailed(t, id)) === 0 && unfinished === 0) throw new NothingToRedriveError(id);
    if ((await q.countOpen(t, place.tenant, place.datasource)) >= maxOpen) {
      throw new TooManyBatchesError(place.tenant, place.datasource, maxOpen);
    }
    const items = await r.resetFailed(t, id);
    const number = await r.reopenBatch(t, id, items + unfinished);
    // Unreachable while the row lock holds: the status was read under it.
    if (number === undefined) throw new BatchOpenError(id);
    const row = await r.recordRedrive(t, { batchId: id, number, key, items });
    return { row, redriven: true };
  });
  const { row, redriven } = outcome;
  return {
    batch: await getBatch(sql, id),
    redrive: { number: row.number, items: row.items, idempotencyKey: row.idempotency_key, at: row.created_at },
    redriven,
  };
}
