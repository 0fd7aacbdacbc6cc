// The invokes of the built-in `lambda-invoke` job (lambda-invoke.ts): imported on a run's first
// item, so a worker whose batches invoke nothing does not load them; the AWS SDK is loaded on the
// first invoke.
import type { InvokeCommand as InvokeCommandType, LambdaClient as LambdaClientType } from '@aws-sdk/client-lambda';
import { PermanentItemError } from '../batch/errors.js';
import type { CallbackHandle, ItemCallResult } from '../batch/types.js';
import type { JobCall, JobContext, JobItem } from './job.js';
import {
  LambdaCallbackError,
  LambdaFunctionError,
  LambdaItemError,
  LambdaPayloadTooLargeError,
  LambdaThrottledError,
  MAX_SYNC_PAYLOAD_BYTES,
  THROTTLE_WAIT_MS,
  type LambdaInvokeCallEvent,
  type LambdaInvokeEvent,
  type LambdaInvokeParams,
} from './lambda-invoke-wire.js';

/**
 * One item, one synchronous invoke (see `lambdaInvoke`): the function's parsed JSON response,
 * `null` for none.
 * @throws {PermanentItemError} the function is no longer invokable, answered non-JSON or is gone;
 *   {LambdaPayloadTooLargeError} | {LambdaFunctionError} | {LambdaThrottledError}.
 */
export async function invokeOne(item: JobItem<LambdaInvokeParams>, ctx: JobContext): Promise<unknown> {
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
}

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

/**
 * The batched form (docs/design.md, "Item batching"): one invoke of the call's items as a
 * {@link LambdaInvokeCallEvent}, its answer read into one result per item. What fails the whole
 * invoke (a function error, a throttle, an answer that is not a JSON array) fails this attempt
 * of each item of the call.
 */
export async function invokeMany(call: JobCall<LambdaInvokeParams>, ctx: JobContext): Promise<ItemCallResult[]> {
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
