/**
 * `leasehold/lambda`: the Lambda handlers of an app's runner, built from the app's own jobs.
 *
 * ```ts
 * // src/leasehold.ts
 * import { checksum, outboxDelivery } from 'leasehold';
 * import { createHandlers } from 'leasehold/lambda';
 * import { resize } from './jobs/resize.js';
 *
 * export const { worker, scheduler, api, trigger, migrate, events } = createHandlers({
 *   jobs: [resize, checksum],
 *   unitJobs: [outboxDelivery()],
 * });
 * ```
 *
 * The SST component (`leasehold/sst`) points the runner's functions at these exports; `leasehold
 * dev --app src/leasehold.ts` runs them locally. The middy chains, configuration, database and
 * dispatch stay inside leasehold (docs/design.md, "Serverless runtime"). This entry point loads
 * no CLI and no local-mode code.
 * @packageDocumentation
 */
export { ConfigError } from './runtime/config.js';
export {
  createHandlers,
  HANDLERS_MARK,
  HANDLERS_MODULE,
  type Handlers,
  type HandlersOptions,
  type LambdaHandler,
  type LocalFunction,
  type LocalFunctions,
} from './runtime/create-handlers.js';
export type { MigrateResult } from './runtime/handlers.js';
export type { SchedulerResult } from './runtime/scheduler.js';
export type { StreamingLambdaHandler } from './runtime/streaming.js';
export type { SchemaSkipped } from './runtime/handlers.js';
export type { WorkerResult } from './runtime/worker.js';
export type { WorkerEvent } from './batch/index.js';
export type { TriggerResult } from './trigger/index.js';
