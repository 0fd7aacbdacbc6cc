/**
 * `leasehold`: a job runner for AWS Lambda with all of its state in PostgreSQL.
 *
 * This entry point is the library an app calls: define jobs (`defineJob`, `defineUnitJob`) and
 * the types their work sees, the errors a job throws or catches (`PermanentItemError`,
 * `RetryAfterError`, …), the built-in jobs (`checksum`, `lambdaInvoke`, `outboxDelivery`), and the
 * store's own door (`connect`, `migrate`, `createBatch`). Every name is listed on purpose
 * (docs/design.md, "Layout"); test/package/exports.test.ts pins the list, so widening it is a
 * visible decision. The module barrels behind it are internal. It loads nothing of AWS: the
 * Lambda handlers are in `leasehold/lambda`, the SST component in `leasehold/sst`.
 * @packageDocumentation
 */

// Defining jobs (docs/jobs.md).
export {
  defineJob,
  InvalidParamsError,
  UnknownJobError,
  type Job,
  type JobCall,
  type JobContext,
  type JobItem,
  type PerBatch,
} from './jobs/index.js';
export { defineUnitJob, type ConfigIssue, type Fence, type UnitContext, type UnitJob } from './units/index.js';

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
  ItemsWork,
  ItemWork,
  RateLimit,
  ToleratedFailures,
} from './batch/index.js';

// Errors a job throws, or meets (docs/jobs.md).
export {
  CheckpointTooLargeError,
  ItemLostError,
  ItemStaleError,
  ItemTimeoutError,
  parseRetryAfter,
  PermanentItemError,
  RetryAfterError,
  UnstorableStateError,
} from './batch/index.js';
export { LeaseholdError, InvalidRequestError, InvalidSettingError } from './errors.js';

// The built-in jobs.
export { checksum, type ChecksumOutput } from './jobs/index.js';
export {
  lambdaInvoke,
  LambdaFunctionError,
  LambdaItemError,
  LambdaPayloadTooLargeError,
  LambdaThrottledError,
  type LambdaInvokeCallEvent,
  type LambdaInvokeCallResult,
  type LambdaInvokeEvent,
  type LambdaInvokeParams,
} from './jobs/index.js';
export { outboxDelivery, type OutboxConfig, type OutboxDeliveryOptions } from './units/index.js';

// The store, for scripts and tests that start batches without the API (docs/development.md).
export {
  connect,
  migrate,
  MigrationLockError,
  SchemaMismatchError,
  type ConnectOptions,
  type ConnectTarget,
  type MigrateOptions,
  type Migration,
  type Sql,
} from './store/index.js';
export {
  createBatch,
  BatchError,
  BatchTooLargeError,
  InvalidBatchError,
  TooManyBatchesError,
  type CreateOptions,
  type NewBatch,
  type StartLimit,
} from './batch/index.js';

// Logging, as the jobs' contexts carry it.
export { createLog, silentLog, type Log, type LogFields, type LogLevel } from './log.js';
