// Sending batches to workers: the event a worker receives and the dispatcher that sends it. The
// runtime's LambdaDispatcher sends through the Lambda Invoke API; tests and local mode send
// through the same interface.
import type { Sql } from '../store/index.js';
import { markDispatched } from './batches.js';

/** The event a worker invocation receives. */
export interface WorkerEvent {
  /** A batch to run first: the worker is a batch process (it owns no unit). */
  batchId?: string;
  /**
   * Set when the invocation was reserved (the scheduler, a start under the worker limit): it
   * counts as coming until its process is live. Without `batchId`, a fleet process.
   */
  invocationId?: string;
  /**
   * Set on a replacement (a fleet process) or a continuation (a batch process) that a worker
   * invokes at its deadline: the chain the new process continues (docs/design.md, "Process
   * chains") — the process it replaces, the chain's id (its first process's), when that one
   * started (ISO 8601, database clock) and how many processes came before the new one.
   */
  chain?: { replaces: string; id: string; startedAt: string; replacements: number };
}

/** Sends batches to worker invocations. */
export interface Dispatcher {
  /** Ask for one worker invocation that runs `batchId` (or just looks for work when omitted). */
  invoke(event: WorkerEvent): Promise<void>;
}

/**
 * Record the dispatch of `batchId` and send one worker per event (each names the batch; see
 * `reserveInvocations` for events under the worker limit). No event: nothing is sent.
 * @throws the store's or the dispatcher's first error (the other invokes are still sent).
 */
export async function dispatchWorkers(sql: Sql, dispatcher: Dispatcher, batchId: string, events: WorkerEvent[]): Promise<void> {
  if (events.length === 0) return;
  await markDispatched(sql, batchId);
  const sent = await Promise.allSettled(events.map((e) => dispatcher.invoke({ ...e, batchId })));
  const failed = sent.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}
