import { LeaseholdError } from '../errors.js';

/** Base class of leasehold's batch errors; `code` is stable and the API maps it to a status. */
export class BatchError extends LeaseholdError {
  constructor(code: string, message: string) {
    super(code, message);
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
