// The built-in `lambda-invoke` job: an existing Lambda function run once per item, the way a
// Step Functions Distributed Map runs one (docs/design.md, "Batches").
//
// The AWS SDK is loaded on the first invoke, not when this module is imported: the `leasehold`
// entry point exports this job and must load nothing of AWS.
import type { InvokeCommand as InvokeCommandType, LambdaClient as LambdaClientType } from '@aws-sdk/client-lambda';
import * as z from 'zod';
import { PermanentItemError, RetryAfterError, type ItemInput, type ItemSource } from '../batch/index.js';
import { defineJob, InvalidParamsError, UnknownJobError } from './job.js';
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
 *
 * 4 items at once per run; spread it to change that (`{ ...lambdaInvoke, parallel: 16 }`).
 */
export const lambdaInvoke = defineJob<LambdaInvokeParams, unknown>({
  name: 'lambda-invoke',
  description: 'invoke params.functionName once per item (RequestResponse); output: its JSON response',
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
    if (params.items) {
      const seen = new Set<string>();
      for (const [i, item] of params.items.entries()) {
        if (seen.has(item.key)) throw new InvalidParamsError(`params.items.${i}.key`, `"${item.key}" is given twice`);
        seen.add(item.key);
      }
      // The items become the batch's items; the stored params keep only what names the function.
      return {
        items: params.items.map((item): ItemInput => ({ key: item.key, input: item.input })),
        params: { functionName: params.functionName },
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
    return { items: inner.items, params: { functionName: params.functionName, from: { job: from.job, params: inner.params } } };
  },
  async run(item, ctx) {
    const name = item.params.functionName;
    const target = ctx.invokable?.[name];
    if (target === undefined) {
      throw new PermanentItemError(`function "${name}" is no longer invokable here (LEASEHOLD_INVOKABLE)`);
    }
    const event: LambdaInvokeEvent = {
      key: item.key,
      input: item.input ?? null,
      batch: { id: item.batchId, tenant: item.tenant },
      attempt: item.attempt,
    };
    const payload = Buffer.from(JSON.stringify(event));
    if (payload.byteLength > MAX_SYNC_PAYLOAD_BYTES) {
      throw new LambdaPayloadTooLargeError(
        `the invoke payload of item "${item.key}" is ${payload.byteLength} bytes; Lambda takes at most ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB) ` +
          'for a synchronous invoke: pass a reference (an S3 key, a row id) as the input instead',
      );
    }
    const { client, InvokeCommand } = await lambdaClient();
    let out;
    try {
      out = await client.send(new InvokeCommand({ FunctionName: target, InvocationType: 'RequestResponse', Payload: payload }), {
        abortSignal: item.signal,
      });
    } catch (e) {
      throw invokeError(name, e);
    }
    const text = out.Payload && out.Payload.byteLength > 0 ? Buffer.from(out.Payload).toString('utf8') : '';
    if (out.FunctionError) {
      const { errorType, errorMessage } = functionError(text, out.FunctionError);
      if (errorType === 'Function.ResponseSizeTooLarge') {
        throw new LambdaPayloadTooLargeError(
          `function ${name} answered item "${item.key}" with more than Lambda's ${MAX_SYNC_PAYLOAD_BYTES} bytes (6 MB) for a synchronous invoke: ` +
            `return a reference (an S3 key) instead (${errorMessage})`,
        );
      }
      throw new LambdaFunctionError(name, errorType, errorMessage);
    }
    if (text.trim() === '') return null;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new PermanentItemError(
        `function ${name} answered item "${item.key}" with something that is not JSON: ${text.slice(0, 200)}`,
      );
    }
  },
});

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
