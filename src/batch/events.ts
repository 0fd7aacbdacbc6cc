// Batch Finished events (docs/design.md, "Events"): the rows every end of a batch writes in its
// own transaction, and the statements their senders take them with. Sending (EventBridge, the
// webhook) is the runtime's: this module knows nothing of AWS or HTTP.
export {
  takeUnsent,
  markSent,
  markSendFailed,
  takeUnnotified,
  markNotified,
  markNotifyFailed,
  batchEvents,
  type BatchFinishedDetail,
  type EventCounts,
  type TakenEvent,
  type TakeArgs,
  type EventFailure,
  type EventRow,
} from './sql/events.js';

// `source` and `detail-type` of the event an end of a batch sends: the contract's (src/contract.ts).
export { EVENT_SOURCE, BATCH_FINISHED_DETAIL_TYPE as BATCH_FINISHED } from '../contract.js';
