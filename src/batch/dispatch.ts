// Sending batches to workers: the event a worker receives, the dispatcher that sends it, and
// the one sequence every sender of batch workers follows (reserve under the worker limit →
// mark the batch dispatched → invoke). The runtime's LambdaDispatcher sends through the Lambda
// Invoke API, and its WorkerDispatcher binds the worker limit; tests and local mode send
// through the same interfaces.
import type { Sql } from '../store/index.js';
import { markDispatched } from './sql/dispatch.js';

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
  /**
   * Set on the one re-delivery of an event whose invocation started past its deadline (an init
   * that spilled into the invoke): such a re-delivery that starts late too is not sent again.
   */
  late?: true;
}

/** Sends batches to worker invocations. */
export interface Dispatcher {
  /** Ask for one worker invocation that runs `batchId` (or just looks for work when omitted). */
  invoke(event: WorkerEvent): Promise<void>;
}

/**
 * Reserves worker invocations under the worker limit (the lease's `reserveInvocations`):
 * `batchIds` names one batch per worker wanted; answers the events of the first ones that fit
 * (each with its `invocationId`); the rest are left to the scheduler.
 */
export type ReserveWorkers = (batchIds: string[]) => Promise<WorkerEvent[]>;

/** What sending workers needs: the store, the dispatcher, and the reservation under the worker limit. */
export interface WorkerSending {
  sql: Sql;
  dispatcher: Dispatcher;
  reserve: ReserveWorkers;
}

/**
 * Sends workers to open batches under the worker limit (docs/design.md, "Fan-out"): the one home
 * of reserving them, which the runtime's `WorkerDispatcher` is. The API and the scheduler ask it
 * for N workers; a start takes its `dispatcher` and `reserve` (see `StartDeps`).
 */
export interface WorkerSender {
  /** Sends each reserved worker (the Lambda Invoke API; locally the invoke endpoint). */
  readonly dispatcher: Dispatcher;
  /** Reserves workers under the worker limit: see {@link ReserveWorkers}. */
  readonly reserve: ReserveWorkers;
  /**
   * Send up to `n` workers to the open batch `batchId` (see {@link sendWorkers}): how many were
   * sent, those past the limit left to the scheduler.
   * @throws the store's or the dispatcher's first error.
   */
  send(batchId: string, n: number, options?: SendWorkersOptions): Promise<number>;
}

/** How {@link sendWorkers} sends. */
export interface SendWorkersOptions {
  /** The chain a continuation's process continues (see `WorkerEvent.chain`). Default none. */
  chain?: WorkerEvent['chain'];
  /** Wraps each step (a time bound: a worker at its deadline). Default none. */
  within?: <T>(step: Promise<T>) => Promise<T>;
}

/**
 * Send up to `n` workers to the open batch `batchId` (docs/design.md, "Fan-out"): reserve them
 * under the worker limit (`via.reserve`), record the dispatch of the batch when any fit, and
 * invoke one worker per reservation. Answers how many were sent; those past the limit are left to
 * the scheduler (which dispatches open batches below their target). `n` ≤ 0: nothing is done.
 * @throws the store's or the dispatcher's first error (the other invokes are still sent).
 */
export async function sendWorkers(
  via: WorkerSending,
  batchId: string,
  n: number,
  options: SendWorkersOptions = {},
): Promise<number> {
  if (n <= 0) return 0;
  const within = options.within ?? (<T>(step: Promise<T>) => step);
  const events = await within(via.reserve(Array.from({ length: n }, () => batchId)));
  if (events.length === 0) return 0;
  await within(markDispatched(via.sql, batchId));
  const chain = options.chain ? { chain: options.chain } : {};
  const sent = await Promise.allSettled(events.map((e) => within(via.dispatcher.invoke({ ...e, batchId, ...chain }))));
  const failed = sent.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
  return events.length;
}
