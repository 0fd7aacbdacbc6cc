// What starting, reading, steering and redriving a batch, and completing a callback, refuse: the
// API maps each `code` to a status (src/api/errors.ts). Apart from the errors a run and its items
// raise (./errors.ts), so a worker's cold start does not load them (docs/development.md,
// "Benchmarks").
import { LeaseholdError } from '../errors.js';
import { BatchError } from './errors.js';

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
