/**
 * leasehold: a job runner for AWS Lambda with all of its state in PostgreSQL.
 * This is the package entry: the library core (store, batches, jobs) and the runtime.
 */
export * from './store/index.js';
export * from './batch/index.js';
export * from './jobs/index.js';
export * from './lease/index.js';
export * from './units/index.js';
export * from './runtime/index.js';
