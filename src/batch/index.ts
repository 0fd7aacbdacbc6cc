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
  claimDispatch,
  markDispatched,
  isUuid,
  DEFAULT_MAX_OPEN,
  MAX_KEY_BYTES,
  type CreateOptions,
} from './batches.js';
export { Runner, RUNNER_DEFAULTS, retryDelayMs, type RunnerOptions, type RunnerEvent } from './runner.js';
