// The trigger (docs/design.md, "Serverless runtime", "Dispatch and deferred trigger firings").
//
// Owns the table leasehold_deferred_starts: firings that waited for their datasource to have a
// free slot. Keeps invariant 4 for events (the event id or schedule time is the request key, so a
// redelivered event starts nothing new). Entry points: `handleTrigger` (an EventBridge event in:
// a start, a deferral or a chained start), `startDeferred` (the scheduler's retry of deferred
// firings), `parseChainRules`. Never imports the runtime or the API.
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
