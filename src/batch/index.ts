// Batches (docs/design.md, "Batches", "Fan-out", "Sources and results", "Events", "Tenant fairness").
//
// Owns the tables leasehold_batches, leasehold_items, leasehold_runs, leasehold_datasources,
// leasehold_tenants, leasehold_redrives, leasehold_batch_events, leasehold_rate_buckets and the
// bulk actions' leasehold_actions and leasehold_action_batches, and concurrency pools'
// leasehold_pools and leasehold_pool_leases.
// Keeps invariants 2 (a move by a run without its lease changes nothing), 3 (every item of a
// started batch ends), 4 (one request key, one batch; at most `maxOpen` open per datasource),
// 8 (a batch finishes exactly once), 9 (a start stores everything or nothing), 10 (attempts an
// unstarted item never uses) and the batch half of 14 (at most `maxConcurrency` runs).
// Entry points: `startBatch` / `createBatch` (start), `Runner` (one run of a batch),
// `redriveBatch`, `pauseBatch` / `resumeBatch` / `setBatchDeadline` / `endPastDeadlines`, `startAction` / `workAction`, `dispatchWorkers`, `deleteExpiredBatches` / `deleteExpiredUsage`, and the reads the API answers from.
// Uses only the store (and the clock, errors, log leaves); nothing here knows of Lambda or HTTP.
export * from './types.js';
export * from './errors.js';
export * from './request-errors.js';
export { parseRetryAfter } from './http-date.js';
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
  setRateLimit,
  checkMaxConcurrency,
  checkItemTimeout,
  checkDeadline,
  isUuid,
  checkToleratedFailures,
  checkNotify,
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
  instantSchema,
  steerMsSchema,
} from './input.js';
export { pauseBatch, resumeBatch, setBatchDeadline, endPastDeadlines, type DeadlineInput } from './steer.js';
export { completeCallback, expireWaits, type CallbackCompletion, type CallbackAnswer } from './waits.js';
export { InvalidCallbackTokenError, signCallbackToken, verifyCallbackToken, type CallbackClaims } from './callback-token.js';
export {
  ACTION_DEFAULTS,
  ActionNotFoundError,
  DEFAULT_STATUS,
  TooManyMatchedError,
  getAction,
  startAction,
  workAction,
  workUnfinishedActions,
  type ActionFilter,
  type ActionInfo,
  type ActionKind,
  type ActionRequest,
  type ActionSettings,
  type FilterStatus,
  type WorkResult,
} from './actions.js';
export {
  sendWorkers,
  type Dispatcher,
  type ReserveWorkers,
  type SendWorkersOptions,
  type WorkerEvent,
  type WorkerSender,
  type WorkerSending,
} from './dispatch.js';
export {
  startBatch,
  startLimits,
  type BatchExpander,
  type StartDeps,
  type StartRequest,
  type StartResult,
  type StartSettings,
} from './start.js';
export { BATCH_DEFAULTS } from './defaults.js';
export { DEFAULT_START_LIMITS, MAX_KEY_BYTES, type StartLimits } from './items.js';
export {
  Runner,
  RUNNER_DEFAULTS,
  RUNNER_LIMITS,
  runnerSettings,
  checkItemStale,
  type RunnerSettings,
  retryDelayMs,
  backoffIntervalMs,
  checkRetrySettings,
  MAX_ATTEMPTS,
  MAX_BACKOFF_MS,
  type RunnerOptions,
  type RunnerEvent,
  type ItemOutcome,
} from './runner.js';
export { DEFAULT_MAX_OUTPUT_BYTES, MAX_ERROR_CHARS, storableText } from './values.js';
export { HEARTBEAT_SPACING_MS } from './run/index.js';
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
export {
  pricesFor,
  parsePriceOverride,
  currentArchitecture,
  PUBLISHED_PRICES,
  DEFAULT_PRICE_REGION,
  type Usage,
  type TenantUsage,
  type Prices,
  type PriceTable,
  type PriceOverride,
  type EstimatedCost,
  type Architecture,
} from './usage.js';
export { getBatchUsage, getBatchesUsage, getTenantUsage } from './usage-reads.js';
export {
  deleteExpiredBatches,
  deleteExpiredUsage,
  RETENTION_DEFAULTS,
  type RetentionOptions,
  type RetentionResult,
  type UsageRetentionOptions,
  type UsageRetentionResult,
} from './retention.js';
export * from './events.js';
export {
  checkItemBatching,
  CallAnswerError,
  DEFAULT_GATHER_MS,
  MAX_GATHER_MS,
  MAX_ITEMS_PER_CALL,
  type IgnoredResults,
} from './run/index.js';
export {
  checkRateLimit,
  defaultBurst,
  MAX_RATE_PER_SECOND,
  MIN_RATE_PER_SECOND,
  TOKEN_TTL_MS,
  type RateKeyItem,
  type RateLimit,
} from './rate.js';
export {
  checkPoolLimits,
  checkPoolName,
  checkPoolSpec,
  MAX_POOL_LIMIT,
  MAX_POOL_NAME,
  poolLimitsOf,
  type PoolSpec,
} from './pool.js';
export { getPool, listPools, setPool, type PoolInfo, type PoolLimits } from './sql/pools.js';
export { defaultS3Client, s3Fault, type S3Fault } from './s3.js';
export {
  checkSource,
  checkResults,
  readPage,
  SourceError,
  SourceReadError,
  CSV_DELIMITERS,
  type BatchSource,
  type CsvDelimiter,
  type CsvOptions,
  type ManifestSourceSpec,
  type StoredManifestSource,
  type StoredSource,
  type SourceCursor,
  type ResultsTarget,
} from './source.js';
export {
  writeResults,
  writeDueResults,
  partKey,
  RESULTS_DEFAULTS,
  RESULTS_MAX_TRIES,
  type ResultsSettings,
  type ResultsManifest,
  type ResultsPart,
  type DueResults,
} from './results.js';
export { BatchWatcher, type BatchReading, type BatchWatcherOptions } from './watch.js';
