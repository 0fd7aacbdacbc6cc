import { LeaseholdError } from '../errors.js';
import { parseHttpDate } from './http-date.js';

/** Base class of leasehold's batch errors; `code` is stable and the API maps it to a status. */
export class BatchError extends LeaseholdError {
  constructor(code: string, message: string) {
    super(code, message);
  }
}

/**
 * A datasource already has `maxOpen` unfinished batches (invariant 4 (docs/design.md)). The API
 * answers 429.
 */
export class TooManyBatchesError extends BatchError {
  constructor(
    readonly tenant: string,
    readonly datasource: string,
    readonly maxOpen: number,
  ) {
    super(
      'too_many_batches',
      `datasource "${datasource}" of tenant "${tenant}" already has ${maxOpen} open batches (maxOpen ${maxOpen}, ` +
        'LEASEHOLD_MAX_OPEN): start it once one has finished, or under another datasource',
    );
  }
}

/**
 * A run found that it no longer owns its batch (taken over, cancelled or finished by
 * another run): a fenced move or beat changed no row. The run stops at once
 * (invariant 2 (docs/design.md)).
 */
export class BatchLostError extends BatchError {
  constructor(
    readonly batchId: string,
    readonly runId: string,
  ) {
    super('batch_lost', `run ${runId} no longer owns batch ${batchId}`);
  }
}

/** No batch has this id. The API answers 404. */
export class BatchNotFoundError extends BatchError {
  constructor(readonly batchId: string) {
    super('batch_not_found', `no batch ${batchId}`);
  }
}

/** The batch is already finished or cancelled. The API answers 409. */
export class BatchFinishedError extends BatchError {
  constructor(
    readonly batchId: string,
    readonly status: string,
  ) {
    super(
      'batch_finished',
      status === 'cancelled' ? `batch ${batchId} was cancelled: cancel is for good` : `batch ${batchId} has already ${status}`,
    );
  }
}

/**
 * Start input is invalid (for example duplicate item keys or no items). The API answers 400,
 * naming `requestField` in front of the message when it is set: the request field the error is
 * about when the message does not name one (`params` for the items the params expand to).
 */
export class InvalidBatchError extends BatchError {
  constructor(
    message: string,
    readonly requestField?: string,
  ) {
    super('invalid_batch', message);
  }
}

/** The limit of a start that {@link BatchTooLargeError} names (see `StartLimits`). */
export type StartLimit = 'items' | 'keyBytes' | 'inputBytes' | 'totalBytes';

/**
 * A start is over one of its limits (item count, key bytes, input bytes, total bytes; see
 * `StartLimits`) and stored nothing. The message names the limit. The API answers 413.
 */
export class BatchTooLargeError extends BatchError {
  constructor(
    /** Which limit the start went over. */
    readonly limit: StartLimit,
    /** The limit's value (items or bytes). */
    readonly max: number,
    message: string,
  ) {
    super('batch_too_large', message);
  }
}

/**
 * Thrown by an item's work when retrying cannot help (a file that vanished, input that is
 * invalid): the item ends `failed` at once instead of being retried up to `attempts`.
 * Any error with `permanent: true` counts the same.
 */
export class PermanentItemError extends LeaseholdError {
  readonly permanent = true;
  constructor(message: string, options?: { cause?: unknown }) {
    super('permanent_item', message, options);
  }
}

/**
 * A batch was given up: `stalledRuns` runs in a row ended without storing any item result
 * (store errors, crashes, lost batches), so it ended `failed` instead of being taken over for
 * ever. The batch's `reason` says the same.
 */
export class BatchGivenUpError extends BatchError {
  constructor(
    readonly batchId: string,
    readonly stalledRuns: number,
    readonly reason: string,
  ) {
    super('batch_given_up', `batch ${batchId} ${reason}`);
  }
}

/** A redrive of a batch that is still open: only a finished batch can be redriven. The API answers 409. */
export class BatchOpenError extends BatchError {
  constructor(readonly batchId: string) {
    super('batch_open', `batch ${batchId} is still open: only a finished batch can be redriven`);
  }
}

/**
 * A redrive of a cancelled batch: cancel stops a batch for good, so its items are never run
 * again. The API answers 400.
 */
export class BatchCancelledError extends BatchError {
  constructor(readonly batchId: string) {
    super('batch_cancelled', `batch ${batchId} was cancelled, which is for good: start a new batch instead`);
  }
}

/**
 * A redrive of a batch retention has begun to delete (some of its items are gone): its results
 * are no longer whole, so it is never reopened (docs/design.md, "Retention").
 */
export class BatchExpiredError extends BatchError {
  constructor(readonly batchId: string) {
    super('batch_expired', `batch ${batchId} is past its retention and being deleted: it cannot be redriven`);
  }
}

/**
 * A redrive of a batch that ended because its source could not be read (docs/design.md,
 * "Sources and results"): its items are only what was read before the bad part, so reopening it
 * would end it `succeeded` over part of the source. The API answers 409.
 */
export class SourceFailedError extends BatchError {
  constructor(readonly batchId: string) {
    super(
      'source_failed',
      `batch ${batchId} ended because its source could not be read (see its reason): fix the source and start a new batch`,
    );
  }
}

/** A redrive of a finished batch that has no failed item. The API answers 409. */
export class NothingToRedriveError extends BatchError {
  constructor(readonly batchId: string) {
    super('nothing_to_redrive', `batch ${batchId} has no failed item to redrive`);
  }
}

/**
 * An attempt of an item ran past its timeout (docs/design.md, "Item timeouts"): the item's
 * signal is aborted with this error as its reason, and the attempt fails with its message,
 * `timed out after N ms`. Retried like any failure while attempts remain.
 */
export class ItemTimeoutError extends LeaseholdError {
  constructor(
    /** The timeout that ran out, ms. */
    readonly timeoutMs: number,
  ) {
    super('item_timeout', `timed out after ${timeoutMs} ms`);
  }
}

/**
 * Thrown by an item's work when the downstream asked it to come back later (an HTTP 429 or 503
 * with `Retry-After`, a throttle): the item waits `retryAfterMs` (at most one day) before its
 * next attempt, and the wait uses no attempt, up to the job's `maxRetryAfter` waits per item
 * (default 10); past them a wait counts as a failed attempt, still waiting at least that long
 * (docs/design.md, "Retry-After"). {@link parseRetryAfter} reads the header's two forms.
 */
export class RetryAfterError extends LeaseholdError {
  constructor(
    /** How long the downstream asked to wait, ms. */
    readonly retryAfterMs: number,
    message = `asked to retry after ${retryAfterMs} ms`,
    options?: ErrorOptions,
  ) {
    super('retry_after', message, options);
  }
}

/**
 * An HTTP `Retry-After` value as ms from now: delay-seconds (`"120"`) or an HTTP date
 * (`"Wed, 21 Oct 2015 07:28:00 GMT"`, whose distance from `nowMs` is taken, 0 when past) in one
 * of RFC 9110's three forms, read strictly ({@link parseHttpDate}). Undefined for a missing or
 * unreadable value (any other text, such as `"retry 2030"`, is no date). Values past `capMs` (default one day) are capped,
 * not ignored.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs = Date.now(), capMs = 86_400_000): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Math.min(Number(v) * 1000, capMs);
  const at = parseHttpDate(v, nowMs);
  if (at === undefined) return undefined;
  return Math.min(Math.max(0, at - nowMs), capMs);
}

/**
 * An attempt was recovered by its run because its work's last heartbeat (or its start) was older
 * than the job's `itemStaleMs` (docs/design.md, "Item heartbeats and checkpoints"): the attempt's
 * signal is aborted with this as its reason, the attempt counts, and whatever the work resolves to
 * later is dropped.
 */
export class ItemStaleError extends LeaseholdError {
  constructor(
    /** The job's `itemStaleMs`, ms. */
    readonly itemStaleMs: number,
  ) {
    super('item_stale', `no heartbeat within itemStaleMs (${itemStaleMs} ms)`);
  }
}

/**
 * A checkpoint could not be stored because the attempt no longer holds its item: it was recovered
 * for want of heartbeats, the run lost its batch, or the attempt already ended. Nothing was stored.
 */
export class ItemLostError extends LeaseholdError {
  constructor(
    readonly key: string,
    readonly attempt: number,
  ) {
    super(
      'item_lost',
      `item ${JSON.stringify(key)} (attempt ${attempt}) is no longer held by this attempt: it was recovered, its run lost the batch, or the attempt ended`,
    );
  }
}

/**
 * A checkpoint state (or a heartbeat's progress) is larger than its limit (docs/design.md, "Item
 * heartbeats and checkpoints"): 64 KiB of JSON for a checkpoint, 8 KiB for progress. Nothing was
 * stored; store less (a cursor or an offset rather than the data itself).
 */
export class CheckpointTooLargeError extends LeaseholdError {
  constructor(
    /** What was refused. */
    readonly what: 'checkpoint' | 'progress',
    /** Its size, bytes of JSON (UTF-8). */
    readonly bytes: number,
    /** The limit, bytes. */
    readonly limitBytes: number,
  ) {
    super(
      `${what}_too_large`,
      `the ${what} is ${bytes} bytes of JSON, over the limit of ${limitBytes} bytes: nothing was stored (store a cursor or an offset, not the data)`,
    );
  }
}

/**
 * A checkpoint state (or a heartbeat's progress) that JSON or PostgreSQL cannot hold: a BigInt, a
 * cycle, a throwing `toJSON`, a NUL character or a lone surrogate. Nothing was stored.
 */
export class UnstorableStateError extends LeaseholdError {
  constructor(
    readonly what: 'checkpoint' | 'progress',
    reason: string,
  ) {
    super('unstorable_state', `the ${what} ${reason}`);
  }
}

/** A wait an item's work asked for is out of range (docs/design.md, "Waiting items: callbacks and sleeps"). */
export class InvalidWaitError extends LeaseholdError {
  constructor(message: string) {
    super('invalid_wait', message);
  }
}

/**
 * The callback an attempt waited for was not completed within its `timeoutMs`, or not heartbeated
 * within its `heartbeatTimeoutMs`: that attempt fails, and is retried by the job's policy.
 */
export class CallbackTimeoutError extends LeaseholdError {
  constructor(readonly reason: 'timeout' | 'heartbeat') {
    super(
      'callback_timed_out',
      reason === 'timeout'
        ? 'the callback was not completed within its timeoutMs'
        : 'the callback was not heartbeated within its heartbeatTimeoutMs',
    );
  }
}

/**
 * No wait matches the callback token: its attempt ended without waiting (the work threw after it
 * registered), or a later wait of the item replaced it. The API answers 404.
 */
export class CallbackNotFoundError extends LeaseholdError {
  constructor() {
    super('callback_not_found', 'no wait matches this callback token: its attempt ended, or a later wait replaced it');
  }
}

/** The callback was completed before with another answer (the first one stands). The API answers 409. */
export class CallbackCompletedError extends LeaseholdError {
  constructor(readonly status: string) {
    super('callback_completed', `the callback was completed before (${status}) with another answer, which stands`);
  }
}
