/**
 * `leasehold`: a job runner for AWS Lambda with all of its state in PostgreSQL.
 *
 * This entry point is the library: define jobs (`defineJob`, `defineUnitJob`), the built-in jobs
 * (`checksum`, `lambdaInvoke`, `outboxDelivery`), and the store, batches, leases and units they
 * run on. It loads nothing of AWS: the Lambda handlers are in `leasehold/lambda`, the SST
 * component in `leasehold/sst`.
 * @packageDocumentation
 */
export * from './store/index.js';
export * from './batch/index.js';
export * from './jobs/index.js';
export * from './lease/index.js';
export * from './units/index.js';
export { LeaseholdError, InvalidRequestError, InvalidSettingError } from './errors.js';
export { createLog, silentLog, type Log, type LogFields, type LogLevel } from './log.js';
