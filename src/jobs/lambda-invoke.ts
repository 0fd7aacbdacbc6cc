// The built-in `lambda-invoke` job: an existing Lambda function run once per item, the way a
// Step Functions Distributed Map runs one (docs/design.md, "Batches").
//
// The AWS SDK is loaded on the first invoke, not when this module is imported: the `leasehold`
// entry point exports this job and must load nothing of AWS.
import type { InvokeCommand as InvokeCommandType, LambdaClient as LambdaClientType } from '@aws-sdk/client-lambda';
import * as z from 'zod';
import { MAX_ITEMS_PER_CALL } from '../batch/run/calls.js';
import { PermanentItemError, RetryAfterError } from '../batch/errors.js';
import { MAX_WAIT_MS, type CallbackHandle, type ItemCallResult, type ItemInput, type ItemSource } from '../batch/types.js';
import { defineJob, InvalidParamsError, UnknownJobError, type JobCall, type JobContext, type JobItem } from './job.js';
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
   * {@link MAX_BYTES_PER_CALL}; an item larger alone goes in an invoke of its own. Default
   * {@link DEFAULT_BYTES_PER_CALL} (256 KiB).
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

/** A batched invoke's byte budget when a start sets none (`bytesPerCall`): 262,144 bytes (256 KiB). */
export const DEFAULT_BYTES_PER_CALL = 262_144;

/**
 * Largest `bytesPerCall`: 5 MiB (5,242,880 bytes), so that a batched invoke's payload (the items,
 * their attempts and the batch) stays below Lambda's {@link MAX_SYNC_PAYLOAD_BYTES}.
 */
export const MAX_BYTES_PER_CALL = 5_242_880;

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

const itemSchema = z.object({ key: z.string().min(1, 'must be a non-empty string'), input: z.unknown().optional() }).strict();

const paramsSchema = z
  .object({
    functionName: z.string().min(1, 'must name an invokable function'),
    items: z.array(itemSchema).min(1, 'must hold at least one item').optional(),
    from: z
      .object({ job: z.string().min(1, 'must name a job'), params: z.unknown().optional() })
      .strict()
      .optional(),
    itemsPerCall: z.number().int().min(1).max(MAX_ITEMS_PER_CALL).optional(),
    bytesPerCall: z.number().int().min(1).max(MAX_BYTES_PER_CALL).optional(),
    callback: z
      .object({
        timeoutMs: z.number().int().min(1).max(MAX_WAIT_MS),
        heartbeatTimeoutMs: z.number().int().min(1).max(MAX_WAIT_MS).optional(),
      })
      .strict()
      .refine((c) => c.heartbeatTimeoutMs === undefined || c.heartbeatTimeoutMs <= c.timeoutMs, {
        message: 'heartbeatTimeoutMs must be at most timeoutMs',
      })
      .optional(),
  })
  .strict();

/**
 * `lambda-invoke`: params `{ functionName, items: [{ key, input }] }` or
 * `{ functionName, from: { job, params } }` (the items of another job's expansion). Each item is
 * one synchronous (`RequestResponse`) invoke of the function with a {@link LambdaInvokeEvent}
 * `{ key, input, batch: { id, tenant }, attempt }`; the item's output is the function's parsed
 * JSON response (`null` for none).
 *
 * - A function not in {@link JobContext.invokable} is refused at start (`InvalidParamsError`, 400).
 * - A function error (`FunctionError`) or a throttle (429) fails the attempt
 *   ({@link LambdaFunctionError}, {@link LambdaThrottledError}); it is retried per `attempts`
 *   with backoff, then the item is `failed`. The SDK's own retries are off, so `attempts` alone decides.
 * - A request or response over Lambda's 6 MB synchronous limit fails the item at once
 *   ({@link LambdaPayloadTooLargeError}), as does a function that is gone or answers non-JSON.
 * - A run that stops aborts its invokes' HTTP requests; the function itself runs on, so give it
 *   a timeout well below the worker's and make it safe to run twice (see `attempt`).
 * - With `itemsPerCall` (docs/design.md, "Item batching") each invoke carries up to that many
 *   items, at most `bytesPerCall` bytes of them (default {@link DEFAULT_BYTES_PER_CALL}), as a
 *   {@link LambdaInvokeCallEvent} `{ items: [{ key, input, attempt }], batch }`, and the function
 *   answers a JSON array of {@link LambdaInvokeCallResult} `{ key, output }` or `{ key, error }`.
 *   Each item's result and attempts stay its own; what fails the whole invoke (a function
 *   error, a throttle, an answer that is not a JSON array) fails this attempt of each of its items.
 * - With `callback` (docs/jobs.md, "A function that waits") each item's event carries a
 *   {@link LambdaInvokeCallback} registered before the invoke; a function that answers
 *   `{ waiting: token }` (batched: `{ key, waiting: token }`) parks the item until the callback
 *   is completed: a success's result is its output (no second invoke), a failure
 *   ({@link LambdaCallbackError}) or a timeout fails the attempt. Any other answer withdraws it.
 *
 * 4 invokes at once per run; spread it to change that (`{ ...lambdaInvoke, parallel: 16 }`).
 */
export const lambdaInvoke = defineJob<LambdaInvokeParams, unknown>({
  name: 'lambda-invoke',
  description:
    'invoke params.functionName once per item, or per params.itemsPerCall items (RequestResponse); output: its JSON response per item',
  params: paramsSchema,
  parallel: 4,
  async expand(params, ctx) {
    const invokable = ctx.invokable ?? {};
    if (!Object.prototype.hasOwnProperty.call(invokable, params.functionName)) {
      const known = Object.keys(invokable);
      throw new InvalidParamsError(
        'params.functionName',
        `"${params.functionName}" is not an invokable function; ${
          known.length ? `invokable here: ${known.join(', ')}` : 'none is invokable here'
        } (the SST component's "invokable", LEASEHOLD_INVOKABLE; locally the app's "localFunctions")`,
      );
    }
    if ((params.items === undefined) === (params.from === undefined)) {
      throw new InvalidParamsError('params', 'give either "items" or "from"');
    }
    if (params.bytesPerCall !== undefined && params.itemsPerCall === undefined) {
      throw new InvalidParamsError('params.bytesPerCall', 'applies only with "itemsPerCall" (items batched into one invoke)');
    }
    // What the stored params keep besides the function: how its invokes batch items.
    const batching = {
      ...(params.itemsPerCall !== undefined ? { itemsPerCall: params.itemsPerCall } : {}),
      ...(params.bytesPerCall !== undefined ? { bytesPerCall: params.bytesPerCall } : {}),
      ...(params.callback !== undefined ? { callback: params.callback } : {}),
    };
    if (params.items) {
      const seen = new Set<string>();
      for (const [i, item] of params.items.entries()) {
        if (seen.has(item.key)) throw new InvalidParamsError(`params.items.${i}.key`, `"${item.key}" is given twice`);
        seen.add(item.key);
      }
      // The items become the batch's items; the stored params keep only what names the function.
      return {
        items: params.items.map((item): ItemInput => ({ key: item.key, input: item.input })),
        params: { functionName: params.functionName, ...batching },
      };
    }
    const from = params.from!;
    if (!ctx.expandJob) throw new InvalidParamsError('params.from', 'cannot take items from another job here');
    let inner: { items: ItemSource; params: unknown };
    try {
      inner = await ctx.expandJob(from.job, from.params);
    } catch (e) {
      if (e instanceof UnknownJobError) throw new InvalidParamsError('params.from.job', `unknown job "${from.job}"`);
      if (e instanceof InvalidParamsError)
        throw new InvalidParamsError(e.field.replace(/^params/, 'params.from.params'), e.message.slice(e.field.length + 2));
      throw e;
    }
    return {
      items: inner.items,
      params: { functionName: params.functionName, from: { job: from.job, params: inner.params }, ...batching },
    };
  },
  itemsPerCall: (params) => params.itemsPerCall,
  bytesPerCall: (params) => (params.itemsPerCall === undefined ? undefined : (params.bytesPerCall ?? DEFAULT_BYTES_PER_CALL)),
  runMany: invokeMany,
  async run(item, ctx) {
    const name = item.params.functionName;
    const target = ctx.invokable?.[name];
    if (target === undefined) {
      throw new PermanentItemError(`function "${name}" is no longer invokable here (LEASEHOLD_INVOKABLE)`);
    }
    const answered = callbackAnswer(item);
    if (answered) return answered.output;
    const callback = await offerCallback(item);
    const event: LambdaInvokeEvent = {
      key: item.key,
      input: item.input ?? null,
      batch: { id: item.batchId, tenant: item.tenant },
      attempt: item.attempt,
      ...(callback ? { callback: { token: callback.token, url: callback.url } } : {}),
    };
    const payload = Buffer.from(JSON.stringify(event));
    if (payload.byteLength > MAX_SYNC_PAYLOAD_BYTES) {
      throw new LambdaPayloadTooLargeError(
        `the invoke payload of item "${item.key}" is ${payload.byteLength} bytes; Lambda takes at most ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB) ` +
          'for a synchronous invoke: pass a reference (an S3 key, a row id) as the input instead',
      );
    }
    const { text, failure } = await invoke(name, target, payload, item.signal);
    if (failure) {
      const { errorType, errorMessage } = failure;
      if (errorType === 'Function.ResponseSizeTooLarge') {
        throw new LambdaPayloadTooLargeError(
          `function ${name} answered item "${item.key}" with more than Lambda's ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB) for a synchronous invoke: ` +
            `return a reference (an S3 key) instead (${errorMessage})`,
        );
      }
      throw new LambdaFunctionError(name, errorType, errorMessage);
    }
    let output: unknown = null;
    if (text.trim() !== '') {
      try {
        output = JSON.parse(text) as unknown;
      } catch {
        throw new PermanentItemError(
          `function ${name} answered item "${item.key}" with something that is not JSON: ${text.slice(0, 200)}`,
        );
      }
    }
    // `{ "waiting": <its token> }`: the item parks on the callback registered above; any other
    // answer is the output, and the callback is withdrawn.
    const w = output as { waiting?: unknown } | null;
    if (callback && w !== null && typeof w === 'object' && Object.keys(w).length === 1 && w.waiting === callback.token) {
      return null;
    }
    await callback?.cancel();
    return output;
  },
});

/**
 * The item's callback answered (its attempt waited and was woken): a success's result is its
 * output, a failure fails the attempt. Undefined: no callback answered this attempt (a timeout
 * fails it before its work runs).
 * @throws {LambdaCallbackError} the callback was failed.
 */
function callbackAnswer(item: JobItem<LambdaInvokeParams>): { output: unknown } | undefined {
  const c = item.callback;
  if (!c) return undefined;
  if (c.status === 'succeeded') return { output: c.result };
  if (c.status === 'failed') throw new LambdaCallbackError(item.params.functionName, item.key, c.error);
  return undefined;
}

/** Registers the item's callback when the batch has one (params `callback`), before its invoke. */
async function offerCallback(item: JobItem<LambdaInvokeParams>): Promise<CallbackHandle | undefined> {
  const c = item.params.callback;
  if (!c) return undefined;
  return item.waitForCallback({ timeoutMs: c.timeoutMs, heartbeatTimeoutMs: c.heartbeatTimeoutMs });
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

/**
 * The batched form (docs/design.md, "Item batching"): one invoke of the call's items as a
 * {@link LambdaInvokeCallEvent}, its answer read into one result per item. What fails the whole
 * invoke (a function error, a throttle, an answer that is not a JSON array) fails this attempt
 * of each item of the call.
 */
async function invokeMany(call: JobCall<LambdaInvokeParams>, ctx: JobContext): Promise<ItemCallResult[]> {
  const name = call.params.functionName;
  const target = ctx.invokable?.[name];
  if (target === undefined) {
    throw new PermanentItemError(`function "${name}" is no longer invokable here (LEASEHOLD_INVOKABLE)`);
  }
  // Items whose callback was answered (they waited, and were woken) settle from it, uninvoked.
  const settled: ItemCallResult[] = [];
  const toInvoke: JobItem<LambdaInvokeParams>[] = [];
  for (const item of call.items) {
    try {
      const answered = callbackAnswer(item);
      if (answered) settled.push({ key: item.key, output: answered.output });
      else toInvoke.push(item);
    } catch (e) {
      settled.push({ key: item.key, error: e });
    }
  }
  if (toInvoke.length === 0) return settled;
  const callbacks = new Map<string, CallbackHandle>();
  await Promise.all(
    toInvoke.map(async (item) => {
      const cb = await offerCallback(item);
      if (cb) callbacks.set(item.key, cb);
    }),
  );
  const n = toInvoke.length;
  const event: LambdaInvokeCallEvent = {
    items: toInvoke.map((i) => {
      const cb = callbacks.get(i.key);
      return {
        key: i.key,
        input: i.input ?? null,
        attempt: i.attempt,
        ...(cb ? { callback: { token: cb.token, url: cb.url } } : {}),
      };
    }),
    batch: { id: call.batchId, tenant: call.tenant },
  };
  const payload = Buffer.from(JSON.stringify(event));
  if (payload.byteLength > MAX_SYNC_PAYLOAD_BYTES) {
    // An item goes alone once it passes bytesPerCall (at most 5 MiB): only a single item's input gets here.
    throw new LambdaPayloadTooLargeError(
      `the invoke payload of ${n === 1 ? `item ${JSON.stringify(toInvoke[0]!.key)}` : `${n} items`} is ${payload.byteLength} bytes; ` +
        `Lambda takes at most ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB) for a synchronous invoke: pass a reference (an S3 key, a row id) as the input instead`,
    );
  }
  const results = await invokeCall(name, target, payload, call.signal, n);
  // An item answered `{ key, waiting: <its token> }` parks on its callback; every other item's
  // callback is withdrawn (an item the answer failed or left out drops its own when its attempt fails).
  const waiting = new Set<string>();
  const out = results.map((r) => {
    const w = r as { key?: unknown; waiting?: unknown };
    const cb = typeof w.key === 'string' ? callbacks.get(w.key) : undefined;
    if (cb && 'waiting' in w && w.waiting === cb.token) {
      waiting.add(w.key as string);
      return { key: w.key as string, output: null };
    }
    return itemResult(name, r);
  });
  await Promise.all([...callbacks].filter(([key]) => !waiting.has(key)).map(([, cb]) => cb.cancel()));
  return [...settled, ...out];
}

/** One batched invoke of `n` items and its answer, an array of entries (not yet read into results). */
async function invokeCall(name: string, target: string, payload: Uint8Array, signal: AbortSignal, n: number): Promise<unknown[]> {
  const { text, failure } = await invoke(name, target, payload, signal);
  if (failure) {
    if (failure.errorType === 'Function.ResponseSizeTooLarge') {
      const advice = 'return references (S3 keys) instead, or batch fewer items (itemsPerCall, bytesPerCall)';
      const message = `function ${name} answered a call of ${n} item${n === 1 ? '' : 's'} with more than Lambda's ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB): ${advice} (${failure.errorMessage})`;
      // One item alone is too large for good; several may fit in smaller calls when they come back.
      if (n === 1) throw new LambdaPayloadTooLargeError(message);
      throw new LambdaFunctionError(name, failure.errorType, message);
    }
    throw new LambdaFunctionError(name, failure.errorType, failure.errorMessage);
  }
  let answer: unknown;
  try {
    answer = JSON.parse(text);
  } catch {
    throw new PermanentItemError(
      `function ${name} answered a call of ${n} item${n === 1 ? '' : 's'} with something that is not JSON: ${text.slice(0, 200)}`,
    );
  }
  if (!Array.isArray(answer)) {
    throw new PermanentItemError(
      `function ${name} answered a call of ${n} item${n === 1 ? '' : 's'} with ${text.trim() === '' ? 'nothing' : text.slice(0, 100)}, ` +
        'not an array of { key, output } or { key, error } (docs/jobs.md, "lambda-invoke")',
    );
  }
  return answer as unknown[];
}

/** One entry of a batched invoke's answer as an item's result; entries without a string key are left to the call's check. */
function itemResult(name: string, entry: unknown): ItemCallResult {
  const e = entry as { key?: unknown; output?: unknown; error?: unknown; permanent?: unknown } | null;
  if (e === null || typeof e !== 'object' || typeof e.key !== 'string') return entry as ItemCallResult;
  const key = e.key;
  const failed = e.error !== undefined && e.error !== null;
  const hasOutput = Object.prototype.hasOwnProperty.call(e, 'output');
  if (failed === hasOutput) {
    const what = failed ? 'both "output" and "error"' : 'neither "output" nor "error"';
    return { key, error: new PermanentItemError(`function ${name} answered item ${JSON.stringify(key)} with ${what}`) };
  }
  if (!failed) return { key, output: e.output };
  const err = e.error as { errorType?: unknown; errorMessage?: unknown };
  const detail =
    typeof e.error === 'string'
      ? e.error
      : typeof err === 'object' && (typeof err.errorType === 'string' || typeof err.errorMessage === 'string')
        ? [err.errorType, err.errorMessage].filter((x) => typeof x === 'string').join(': ')
        : JSON.stringify(e.error).slice(0, 500);
  return { key, error: new LambdaItemError(name, key, detail, e.permanent === true) };
}

/**
 * One synchronous invoke: the response's text, and its function error when it has one.
 * @throws what {@link invokeError} makes of the SDK's error (a throttle, a payload refused, a missing function).
 */
async function invoke(
  name: string,
  target: string,
  payload: Uint8Array,
  signal: AbortSignal,
): Promise<{ text: string; failure?: { errorType: string; errorMessage: string } }> {
  const { client, InvokeCommand } = await lambdaClient();
  let out;
  try {
    out = await client.send(new InvokeCommand({ FunctionName: target, InvocationType: 'RequestResponse', Payload: payload }), {
      abortSignal: signal,
    });
  } catch (e) {
    throw invokeError(name, e);
  }
  const text = out.Payload && out.Payload.byteLength > 0 ? Buffer.from(out.Payload).toString('utf8') : '';
  return out.FunctionError ? { text, failure: functionError(text, out.FunctionError) } : { text };
}

/** Lambda's error payload `{ errorType, errorMessage }`, or what there is of it. */
function functionError(text: string, kind: string): { errorType: string; errorMessage: string } {
  try {
    const e = JSON.parse(text) as { errorType?: unknown; errorMessage?: unknown };
    return {
      errorType: typeof e.errorType === 'string' ? e.errorType : kind,
      errorMessage: typeof e.errorMessage === 'string' ? e.errorMessage : text.slice(0, 500),
    };
  } catch {
    return { errorType: kind, errorMessage: text.slice(0, 500) };
  }
}

/** What an SDK error means for the attempt. */
function invokeError(functionName: string, e: unknown): Error {
  const err = e as { name?: string; message?: string; Reason?: string; retryAfterSeconds?: unknown };
  switch (err.name) {
    case 'TooManyRequestsException': {
      const seconds = Number(err.retryAfterSeconds);
      return new LambdaThrottledError(
        functionName,
        [err.message, err.Reason].filter(Boolean).join(' ') || 'no reason given',
        err.retryAfterSeconds !== undefined && Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : THROTTLE_WAIT_MS,
      );
    }
    case 'RequestTooLargeException':
    case 'RequestEntityTooLargeException':
      return new LambdaPayloadTooLargeError(`function ${functionName}: Lambda refused the payload as too large: ${err.message}`);
    case 'ResourceNotFoundException':
      return new PermanentItemError(`function ${functionName} does not exist: ${err.message}`);
    default:
      return e instanceof Error ? e : new Error(String(e));
  }
}

let cached: { endpoint: string | undefined; client: LambdaClientType; InvokeCommand: typeof InvokeCommandType } | undefined;

/**
 * One Lambda client per endpoint (`AWS_ENDPOINT_URL_LAMBDA`, set locally to the local invoke
 * endpoint), with the SDK's retries off: a throttle or a failure is the attempt's, and the
 * item's `attempts` and backoff decide what follows.
 */
async function lambdaClient() {
  const endpoint = process.env.AWS_ENDPOINT_URL_LAMBDA;
  if (!cached || cached.endpoint !== endpoint) {
    const sdk = await import('@aws-sdk/client-lambda');
    cached = { endpoint, client: new sdk.LambdaClient({ maxAttempts: 1 }), InvokeCommand: sdk.InvokeCommand };
  }
  return cached;
}
