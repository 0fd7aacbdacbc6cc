/**
 * `leasehold`: a job runner for AWS Lambda with all of its state in PostgreSQL.
 *
 * This entry point is the library an app calls: define jobs (`defineJob`, `defineUnitJob`) and
 * the types their work sees, the errors a job throws or catches (`PermanentItemError`,
 * `RetryAfterError`, …), the built-in jobs (`checksum`, `lambdaInvoke`, `outboxDelivery`), and the
 * store's own door (`connect`, `migrate`, `createBatch`). Every name is listed on purpose
 * (docs/design.md, "Layout"); test/package/exports.test.ts pins the list, so widening it is a
 * visible decision. The module barrels behind it are internal; each name is taken from its own
 * file, not a barrel, so a bundle of a file that imports a few of them (a runner's handler file)
 * takes no more than those files reach (docs/design.md, "Cold starts and code splitting"). It loads nothing of AWS: the
 * Lambda handlers are in `leasehold/lambda`, the SST component in `leasehold/sst`.
 * @packageDocumentation
 */

// Defining jobs (docs/jobs.md).
export { defineJob, type Job, type JobCall, type JobContext, type JobItem, type PerBatch } from './jobs/job.js';
export { InvalidParamsError, UnknownJobError } from './jobs/errors.js';
export { defineUnitJob, type ConfigIssue, type Fence, type UnitContext, type UnitJob } from './units/job.js';

// What an item's work sees, and the batch it belongs to.
export type {
  BatchInfo,
  BatchStatus,
  ItemCallResult,
  ItemContext,
  ItemInput,
  ItemResult,
  ItemsCall,
  ItemSource,
  ItemState,
  ItemWait,
  ItemsWork,
  ItemWork,
  ToleratedFailures,
} from './batch/types.js';
export type { RateLimit } from './batch/rate.js';
export type { PoolSpec } from './batch/pool.js';

// Errors a job throws, or meets (docs/jobs.md).
export {
  CheckpointTooLargeError,
  ItemLostError,
  ItemStaleError,
  ItemTimeoutError,
  PermanentItemError,
  RetryAfterError,
  UnstorableStateError,
} from './batch/errors.js';
export { parseRetryAfter } from './batch/http-date.js';
export { LeaseholdError, InvalidRequestError, InvalidSettingError } from './errors.js';

// The built-in jobs.
export { checksum, type ChecksumOutput } from './jobs/checksum.js';
export { lambdaInvoke } from './jobs/lambda-invoke.js';
export {
  LambdaFunctionError,
  LambdaItemError,
  LambdaCallbackError,
  LambdaPayloadTooLargeError,
  LambdaThrottledError,
  type LambdaInvokeCallback,
  type LambdaInvokeCallEvent,
  type LambdaInvokeCallResult,
  type LambdaInvokeEvent,
  type LambdaInvokeParams,
} from './jobs/lambda-invoke-wire.js';
export { outboxDelivery, type OutboxConfig, type OutboxDeliveryOptions } from './units/outbox-delivery.js';

// The store, for scripts and tests that start batches without the API (docs/development.md).
export { connect, type ConnectOptions, type ConnectTarget, type Sql } from './store/connect.js';
export { migrate, MigrationLockError, type MigrateOptions, type Migration } from './store/migrate.js';
export { SchemaMismatchError } from './store/schema.js';
export { createBatch, type CreateOptions } from './batch/batches.js';
export { BatchError } from './batch/errors.js';
export { BatchTooLargeError, InvalidBatchError, TooManyBatchesError, type StartLimit } from './batch/request-errors.js';
export type { NewBatch } from './batch/types.js';

// Logging, as the jobs' contexts carry it.
export { createLog, silentLog, type Log, type LogFields, type LogLevel } from './log.js';
