// The trigger: starting batches from EventBridge events (bus rules and schedules), and the
// firings deferred until their datasource has a free slot (docs/design.md, "Serverless runtime").
export {
  handleTrigger,
  startDeferred,
  readTriggerEvent,
  InvalidTriggerEventError,
  type DeferredResult,
  type TriggerDeps,
  type TriggerDetail,
  type TriggerEvent,
  type TriggerMetrics,
  type TriggerRequest,
  type TriggerResult,
  type StartOutcome,
} from './trigger.js';
export {
  parseChainRules,
  matchingRules,
  chainedRequestKey,
  chainedParams,
  FINAL_STATUSES,
  type ChainRule,
  type FinalStatus,
} from './chain.js';
