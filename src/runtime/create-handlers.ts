// createHandlers: the middy chain of each of a runner's six functions (docs/design.md,
// "Serverless runtime"); `leasehold/lambda` exports it, functions/ call it.
import middy from '@middy/core';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import type { WorkerEvent } from '../batch/dispatch.js';
import type { Job } from '../jobs/job.js';
import type { TriggerResult } from '../trigger/trigger.js';
import type { UnitJob } from '../units/job.js';
// From the modules themselves, not runtime/index.js: that one loads every module of the runtime,
// and Node (unbundled) would then load the API, the scheduler and the trigger at every cold
// start. handlers.ts loads each of those on its handler's first invocation instead.
import { createRuntime } from './deps.js';
import {
  apiInvocation,
  migrateInvocation,
  schedulerInvocation,
  triggerInvocation,
  workerInvocation,
  type MigrateResult,
  type SchemaSkipped,
} from './handlers.js';
import { httpErrorBoundary, invocation } from './middleware.js';
import type { SchedulerResult } from './scheduler.js';
import { streamingHandler, type StreamingLambdaHandler } from './streaming.js';
import { lambdaLog } from './log.js';
import type { WorkerResult } from './worker.js';

/** How long before the function's timeout a progress stream closes, ms (the client reconnects). */
const STREAM_MARGIN_MS = 3_000;

/** A Lambda handler: `(event, context) => Promise<result>`. */
export type LambdaHandler<E, R> = (event: E, context: Context) => Promise<R>;

/** The six functions of a runner, as `createHandlers` returns them. */
export interface Handlers {
  /** One worker process per invocation (async `Event` invoke with `{ batchId?, invocationId? }`). */
  worker: LambdaHandler<WorkerEvent, WorkerResult>;
  /** Every minute: sweep, dispatch, keep the desired count of live processes. */
  scheduler: LambdaHandler<unknown, SchedulerResult | SchemaSkipped>;
  /** The HTTP API (API Gateway HTTP API, payload format 2.0, IAM auth). */
  api: LambdaHandler<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2>;
  /** Starts a batch from an EventBridge event (bus rule or schedule). */
  trigger: LambdaHandler<unknown, TriggerResult>;
  /** Applies the migrations at deploy time, before new code takes traffic. */
  migrate: LambdaHandler<unknown, MigrateResult>;
  /**
   * `GET /batches/{id}/events`, a batch's progress as Server-Sent Events, through a function URL
   * with response streaming (docs/api.md, "Progress stream"); made with
   * `awslambda.streamifyResponse`, so it runs only in the Lambda Node.js runtime.
   */
  events: StreamingLambdaHandler;
}

/** What {@link createHandlers} takes. */
export interface HandlersOptions {
  /**
   * The app's batch jobs (`defineJob`), unique by name; batches name them in `job`. The
   * built-in ones are opt-in imports from `leasehold`: `checksum`, `lambdaInvoke`.
   */
  jobs: readonly Job<unknown, unknown>[];
  /**
   * The app's unit jobs (`defineUnitJob`), unique by name; units name them in `job`. Built in:
   * `outboxDelivery()` from `leasehold`. Default none.
   */
  unitJobs?: readonly UnitJob<unknown>[];
}

/**
 * A function `leasehold dev` may invoke by name on its local invoke endpoint, for `lambda-invoke`
 * batches offline: `(event, context) => result`. Declared through a method, so a handler typed
 * for its own event (`LambdaInvokeEvent`) fits.
 */
export type LocalFunction = {
  bivarianceHack(event: unknown, context: Context): unknown;
}['bivarianceHack'];

/**
 * What an app file may export as `localFunctions`: functions by the name `lambda-invoke` batches
 * use (`functionName`). `leasehold dev --app FILE` registers them on its local invoke endpoint
 * and makes them invokable (`LEASEHOLD_INVOKABLE`); deployed, the SST component's `invokable`
 * option names the real functions instead.
 */
export type LocalFunctions = Readonly<Record<string, LocalFunction>>;

/**
 * Marks handlers made by {@link createHandlers} with {@link HANDLERS_MODULE} of the module instance
 * that made them, so `leasehold dev --app` can tell an app that loaded another copy of leasehold
 * than the CLI's.
 * @internal
 */
export const HANDLERS_MARK: unique symbol = Symbol.for('leasehold.handlers');

/**
 * The value {@link HANDLERS_MARK} holds on handlers made by this copy of the module: an object of
 * this module instance, so the same file loaded twice (once as ESM, once compiled to CommonJS by
 * a loader) is told apart too; `url` is the module's file URL.
 * @internal
 */
export const HANDLERS_MODULE: { readonly url: string } = Object.freeze({ url: import.meta.url });

/**
 * The Lambda handlers of a runner that runs `jobs` and `unitJobs`, each wrapped in leasehold's
 * middy chain (per-invocation logs with the Lambda context, EMF metrics, the deadline signal;
 * the API's error boundary answers JSON 500s). Configuration is read from the environment and
 * the database pool opened on the first invocation of a container (the cold start), then reused.
 * Export them from one file and point the functions at it (the SST component does).
 * @throws {Error} two batch jobs or two unit jobs share a name (when the file is loaded).
 */
export function createHandlers(options: HandlersOptions): Handlers {
  const runtime = createRuntime({ jobs: options.jobs, unitJobs: options.unitJobs ?? [] });
  const deps = () => runtime.deps();
  const prepare = () => runtime.prepare();

  const worker = middy<WorkerEvent, WorkerResult, Error, Context>()
    .use(invocation({ service: 'worker', prepare, marginMs: () => deps().config.deadlineMarginMs }))
    .handler((event, context) => workerInvocation(deps(), event, context));
  const scheduler = middy<unknown, SchedulerResult | SchemaSkipped, Error, Context>()
    .use(invocation({ service: 'scheduler', prepare }))
    .handler((event, context) => schedulerInvocation(deps(), event, context));
  const api = middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Error, Context>()
    .use(invocation({ service: 'api', prepare }))
    .use(httpErrorBoundary())
    .handler((event, context) => apiInvocation(deps(), event, context));
  const trigger = middy<unknown, TriggerResult, Error, Context>()
    .use(invocation({ service: 'trigger', prepare }))
    .handler((event, context) => triggerInvocation(deps(), event, context));
  const migrate = middy<unknown, MigrateResult, Error, Context>()
    .use(invocation({ service: 'migrate' }))
    .handler(migrateInvocation);

  // No middy chain: middy's own streaming mode buffers nothing we need; one log line per stream.
  const events = streamingHandler<APIGatewayProxyEventV2>(async (event, open, context) => {
    await prepare();
    const { sql } = deps();
    const { serveBatchEvents, sharedWatcher } = await import('./stream.js');
    const log = lambdaLog('events', context);
    const outcome = await serveBatchEvents({
      watcher: sharedWatcher(sql),
      event,
      open,
      maxMs: Math.max(1_000, context.getRemainingTimeInMillis() - STREAM_MARGIN_MS),
    });
    log('info', 'progress stream ended', { path: event.rawPath, outcome });
  });

  const handlers: Handlers = { worker, scheduler, api, trigger, migrate, events };
  for (const handler of Object.values(handlers)) {
    Object.defineProperty(handler, HANDLERS_MARK, { value: HANDLERS_MODULE });
  }
  return handlers;
}
