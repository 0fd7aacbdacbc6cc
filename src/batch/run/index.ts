// The run (docs/design.md, "The run, inside"): one process's lease on a batch's work, split
// into an orchestrator (run.ts) and its collaborators, each with its own state: the producer
// (claims, the queue, due times, the rate gate, slots), the executor (one attempt of an item,
// timeouts, item heartbeats, Retry-After, the retry policy), the completer (moves), the source
// reader, the run's own sleeps (sleeps.ts) and the lifecycle (beat, slice, leave, handoff, give
// up, the ends). This face names
// what the rest of the batch module uses.
export { Run } from './run.js';
export { StoreFailure } from './context.js';
export { retryDelayMs, backoffIntervalMs, checkRetrySettings, MAX_ATTEMPTS, MAX_BACKOFF_MS } from './executor.js';
export type { ItemOutcome, RunnerEvent, RunSettings } from './types.js';
export { CLAIM_AHEAD_HORIZON_MS, MAX_QUEUE_DEPTH_PER_SLOT } from './types.js';
// The grouping of item batching (calls.ts, `batchedWork`) is not named here: the runner loads it
// on a batched executor's first item, so no static path reaches it.
export {
  checkItemBatching,
  CallAnswerError,
  DEFAULT_GATHER_MS,
  MAX_GATHER_MS,
  MAX_ITEMS_PER_CALL,
  type IgnoredResults,
} from './call-rules.js';
export { HEARTBEAT_SPACING_MS } from './heartbeat.js';
