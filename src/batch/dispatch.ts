// Sending batches to workers: the event a worker receives and the dispatcher that sends it. The
// runtime's LambdaDispatcher sends through the Lambda Invoke API; tests and local mode send
// through the same interface.
import type { Sql } from '../store/index.js';
import { markDispatched } from './batches.js';

/** The event a worker invocation receives. */
export interface WorkerEvent {
  /** A batch to run first. */
  batchId?: string;
  /** Set by the scheduler: this invocation counts as coming until its process is live. */
  invocationId?: string;
}

/** Sends batches to worker invocations. */
export interface Dispatcher {
  /** Ask for one worker invocation that runs `batchId` (or just looks for work when omitted). */
  invoke(event: WorkerEvent): Promise<void>;
}

/**
 * Record the dispatch of `batchId` and send it to a worker.
 * @throws the store's or the dispatcher's error.
 */
export async function dispatchBatch(sql: Sql, dispatcher: Dispatcher, batchId: string): Promise<void> {
  await markDispatched(sql, batchId);
  await dispatcher.invoke({ batchId });
}
