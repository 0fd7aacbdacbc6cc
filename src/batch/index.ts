export * from './types.js';
export * from './errors.js';
export { systemClock, ManualClock, type Clock } from '../clock.js';
export {
  createBatch,
  getBatch,
  findBatchByKey,
  listBatches,
  cancelBatch,
  batchResults,
  itemsPage,
  countOpenBatches,
  runsSummary,
  claimDispatch,
  markDispatched,
  undispatch,
  setMaxConcurrency,
  checkMaxConcurrency,
  isUuid,
  DEFAULT_MAX_OPEN,
  checkToleratedFailures,
  MAX_TOLERATED_COUNT,
  type CreateOptions,
} from './batches.js';
export {
  MAX_NAME_LENGTH,
  MAX_PARAMS_DEPTH,
  typeName,
  textSchema,
  nameSchema,
  requestKeySchema,
  storedNameSchema,
  parseInput,
  fieldPath,
  checkStorableJson,
  toleratedFailuresSchema,
} from './input.js';
export { dispatchBatch, dispatchWorkers, type Dispatcher, type WorkerEvent } from './dispatch.js';
export {
  startBatch,
  startLimits,
  type BatchExpander,
  type StartDeps,
  type StartRequest,
  type StartResult,
  type StartSettings,
} from './start.js';
export { DEFAULT_START_LIMITS, MAX_KEY_BYTES, type StartLimits } from './items.js';
export {
  Runner,
  RUNNER_DEFAULTS,
  RUNNER_LIMITS,
  runnerSettings,
  type RunnerSettings,
  retryDelayMs,
  checkRetrySettings,
  MAX_ATTEMPTS,
  MAX_BACKOFF_MS,
  type RunnerOptions,
  type RunnerEvent,
  type ItemOutcome,
} from './runner.js';
export { DEFAULT_MAX_OUTPUT_BYTES, MAX_ERROR_CHARS } from './values.js';
export { redriveBatch, type Redrive, type RedriveOptions, type RedriveResult } from './redrive.js';
export {
  finishedSeries,
  batchActivity,
  bucketLengthMs,
  MAX_SERIES_BUCKETS,
  type FinishedSeries,
  type BatchActivity,
} from './progress.js';
export { getTenant, setTenantLimit, MAX_TENANT_LIMIT, type TenantInfo, type TenantBatch } from './tenants.js';
export { deleteExpiredBatches, RETENTION_DEFAULTS, type RetentionOptions, type RetentionResult } from './retention.js';
