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

/** `source` of every event leasehold puts on its bus. */
export const EVENT_SOURCE = 'leasehold';

/** `detail-type` of the event an end of a batch sends (finished, failed, given up, cancelled). */
export const BATCH_FINISHED = 'Batch Finished';
