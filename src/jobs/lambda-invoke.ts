// The built-in `lambda-invoke` job: an existing Lambda function run once per item, the way a
// Step Functions Distributed Map runs one (docs/design.md, "Batches").
//
// The invokes (lambda-invoke-call.ts) are loaded on a run's first item, the AWS SDK on the first
// invoke and a start's checks (lambda-invoke-expand.ts) on the first start, not when this module
// is imported: the `leasehold` entry point exports this job, and a worker's cold start loads
// none of them (docs/design.md, "Cold starts and code splitting").
import * as z from '../zod.js';
import { MAX_ITEMS_PER_CALL } from '../batch/run/call-rules.js';
import { MAX_WAIT_MS } from '../batch/types.js';
import { defineJob } from './job.js';
import type { LambdaInvokeParams } from './lambda-invoke-wire.js';

/** A batched invoke's byte budget when a start sets none (`bytesPerCall`): 262,144 bytes (256 KiB). */
export const DEFAULT_BYTES_PER_CALL = 262_144;

/**
 * Largest `bytesPerCall`: 5 MiB (5,242,880 bytes), so that a batched invoke's payload (the items,
 * their attempts and the batch) stays below Lambda's {@link MAX_SYNC_PAYLOAD_BYTES}.
 */
export const MAX_BYTES_PER_CALL = 5_242_880;

const itemSchema = z.strictObject({
  key: z.string().check(z.minLength(1, 'must be a non-empty string')),
  input: z.optional(z.unknown()),
});

const paramsSchema = z.strictObject({
  functionName: z.string().check(z.minLength(1, 'must name an invokable function')),
  items: z.optional(z.array(itemSchema).check(z.minLength(1, 'must hold at least one item'))),
  from: z.optional(z.strictObject({ job: z.string().check(z.minLength(1, 'must name a job')), params: z.optional(z.unknown()) })),
  itemsPerCall: z.optional(z.number().check(z.int(), z.gte(1), z.lte(MAX_ITEMS_PER_CALL))),
  bytesPerCall: z.optional(z.number().check(z.int(), z.gte(1), z.lte(MAX_BYTES_PER_CALL))),
  callback: z.optional(
    z
      .strictObject({
        timeoutMs: z.number().check(z.int(), z.gte(1), z.lte(MAX_WAIT_MS)),
        heartbeatTimeoutMs: z.optional(z.number().check(z.int(), z.gte(1), z.lte(MAX_WAIT_MS))),
      })
      .check(
        z.refine((c) => c.heartbeatTimeoutMs === undefined || c.heartbeatTimeoutMs <= c.timeoutMs, {
          message: 'heartbeatTimeoutMs must be at most timeoutMs',
        }),
      ),
  ),
});

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
  // Checked and expanded on a start (./lambda-invoke-expand.ts), loaded then: a worker never
  // expands.
  async expand(params, ctx) {
    return (await import('./lambda-invoke-expand.js')).expandLambdaInvoke(params, ctx);
  },
  itemsPerCall: (params) => params.itemsPerCall,
  bytesPerCall: (params) => (params.itemsPerCall === undefined ? undefined : (params.bytesPerCall ?? DEFAULT_BYTES_PER_CALL)),
  async runMany(call, ctx) {
    return (await import('./lambda-invoke-call.js')).invokeMany(call, ctx);
  },
  async run(item, ctx) {
    return (await import('./lambda-invoke-call.js')).invokeOne(item, ctx);
  },
});
