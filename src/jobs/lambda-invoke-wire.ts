// What the built-in `lambda-invoke` job and its calls share (lambda-invoke.ts defines the job,
// lambda-invoke-call.ts makes the invokes, loaded on a run's first item): Lambda's limits, the
// events sent and the answers read, and the errors an attempt fails with.
import { PermanentItemError, RetryAfterError } from '../batch/errors.js';
import { LeaseholdError } from '../errors.js';

/** Lambda's limit on a synchronous (`RequestResponse`) invoke's request and response payloads: 6 MB, in bytes. */
export const MAX_SYNC_PAYLOAD_BYTES = 6_291_456;

/** Params of a `lambda-invoke` batch. */
export interface LambdaInvokeParams {
  /**
   * The function, by the name the deployment knows it as: a key of {@link JobContext.invokable}
   * (`LEASEHOLD_INVOKABLE`, written by the SST component's `invokable`; locally the app's
   * `localFunctions`). A start naming another function is refused (400).
   */
  functionName: string;
  /** The items: one invoke each. Give these or `from`. */
  items?: { key: string; input?: unknown }[];
  /** Take the items (keys and inputs) from another job's expansion of `params`. Give this or `items`. */
  from?: { job: string; params?: unknown };
  /**
   * Item batching (docs/design.md, "Item batching"): each invoke carries up to this many items,
   * 1 to 1,000, as a {@link LambdaInvokeCallEvent}, and the function answers a result per item
   * ({@link LambdaInvokeCallResult}). Default none: one item per invoke, as a {@link LambdaInvokeEvent}.
   */
  itemsPerCall?: number;
  /**
   * With `itemsPerCall`: most bytes of the items' `{ key, input }` as JSON in one invoke, 1 to
   * `MAX_BYTES_PER_CALL` (./lambda-invoke.ts); an item larger alone goes in an invoke of its own. Default
   * `DEFAULT_BYTES_PER_CALL` (256 KiB).
   */
  bytesPerCall?: number;
  /**
   * Let the function answer "waiting" (docs/jobs.md, "lambda-invoke"): each item's event carries a
   * callback `{ token, url }`, registered before the invoke with this `timeoutMs` (1 ms to a year)
   * and `heartbeatTimeoutMs` (up to it). A function that answers `{ "waiting": "<token>" }` (in a
   * batched answer `{ key, waiting: "<token>" }`) parks the item (`waiting`, no run slot, no
   * Lambda time) until the token is completed (`POST /callbacks/{token}/succeed` or `/fail`): a
   * success's result is the item's output, a failure fails the attempt, a timeout too. Any other
   * answer withdraws the callback. Default none: no callback, one answer per invoke.
   */
  callback?: { timeoutMs: number; heartbeatTimeoutMs?: number };
}

/** What a `lambda-invoke` event carries when the batch has a `callback`: the item's callback to hand out. */
export interface LambdaInvokeCallback {
  /** The signed token: complete it with `POST /callbacks/{token}/succeed|fail|heartbeat`. */
  token: string;
  /** `{LEASEHOLD_CALLBACK_URL}/callbacks/{token}`; null when no address is configured. */
  url: string | null;
}

/** The event a batched invoke sends (a start with `itemsPerCall`; docs/design.md, "Item batching"). */
export interface LambdaInvokeCallEvent {
  /**
   * 1 to `itemsPerCall` items; `input` is `null` when an item has none; `attempt` is the item's
   * own, 1-based; `callback` only when the batch has one (params `callback`).
   */
  items: { key: string; input: unknown; attempt: number; callback?: LambdaInvokeCallback }[];
  /** The batch the items belong to. */
  batch: { id: string; tenant: string };
}

/**
 * What a batched invoke's function answers: a JSON array with one entry per item of the event,
 * in any order. `{ key, output }`: the item is done with that output. `{ key, error }`: this
 * attempt of the item failed (`error` a message, or `{ errorType, errorMessage }`); it is retried
 * per `attempts`, at once `failed` with `permanent: true`. An item left out, answered twice, or
 * answered with neither or both of `output` and `error` fails its attempt saying so.
 */
export type LambdaInvokeCallResult =
  | { key: string; output: unknown }
  | { key: string; error: string | { errorType?: string; errorMessage?: string }; permanent?: boolean }
  /** With params `callback`: the item waits for its callback (`waiting` is its token). */
  | { key: string; waiting: string };

/**
 * The function failed one item of a batched invoke (its answer held `{ key, error }`): this
 * attempt of that item fails; with `permanent: true` the item fails at once.
 */
export class LambdaItemError extends LeaseholdError {
  constructor(
    readonly functionName: string,
    readonly key: string,
    readonly detail: string,
    readonly permanent: boolean,
  ) {
    super('item_error', `function ${functionName} failed item ${JSON.stringify(key)}: ${detail}`);
  }
}

/** The event each invoke sends to the function. */
export interface LambdaInvokeEvent {
  /** The item's key, unique within the batch. */
  key: string;
  /** The item's input; `null` when it has none. */
  input: unknown;
  /** The batch the item belongs to. */
  batch: { id: string; tenant: string };
  /** 1-based attempt number of this item: a function with side effects can deduplicate on `(batch.id, key)`. */
  attempt: number;
  /** The item's callback, only when the batch has one (params `callback`): answer `{ "waiting": token }` to wait for it. */
  callback?: LambdaInvokeCallback;
}

/** The callback an item of a `callback` batch waited on was failed (`/fail`): this attempt fails, retried per `attempts`. */
export class LambdaCallbackError extends LeaseholdError {
  constructor(
    readonly functionName: string,
    readonly key: string,
    readonly detail: string,
  ) {
    super('callback_failed', `the callback of item ${JSON.stringify(key)} (function ${functionName}) was failed: ${detail}`);
  }
}

/** The function answered with an error (`FunctionError`): this attempt fails and is retried per `attempts`. */
export class LambdaFunctionError extends LeaseholdError {
  constructor(
    readonly functionName: string,
    readonly errorType: string,
    readonly errorMessage: string,
  ) {
    super('function_error', `function ${functionName} failed: ${errorType}: ${errorMessage}`);
  }
}

/** How long a throttled item waits when Lambda names no `retryAfterSeconds`, ms. */
export const THROTTLE_WAIT_MS = 1_000;

/**
 * Lambda throttled the invoke (429, `TooManyRequestsException`): a Retry-After wait
 * (docs/design.md, "Retry-After"). The item waits Lambda's `retryAfterSeconds`, or
 * {@link THROTTLE_WAIT_MS}, using no attempt up to the job's `maxRetryAfter` waits; past them
 * each throttle counts as a failed attempt.
 */
export class LambdaThrottledError extends RetryAfterError {
  readonly code = 'throttled';
  constructor(
    readonly functionName: string,
    /** Lambda's words and reason, e.g. `Rate Exceeded.` and `ReservedFunctionConcurrentInvocationLimitExceeded`. */
    readonly detail: string,
    retryAfterMs = THROTTLE_WAIT_MS,
  ) {
    super(retryAfterMs, `function ${functionName} was throttled (TooManyRequestsException: ${detail})`);
  }
}

/** A request or response over {@link MAX_SYNC_PAYLOAD_BYTES}: retrying cannot help, so the item fails at once. */
export class LambdaPayloadTooLargeError extends PermanentItemError {
  readonly code = 'payload_too_large';
  constructor(message: string) {
    super(message);
    this.name = 'LambdaPayloadTooLargeError';
  }
}
