// The shapes a run's collaborators share (docs/design.md, "The run, inside"): the run's
// settings, the events it reports, an item's outcome and a settled item waiting for its move.
// Nothing here acts; each collaborator (producer, executor, completer, source reader,
// lifecycle) owns its own state and code.
import type { S3Client } from '@aws-sdk/client-s3';
import type { Clock } from '../../clock.js';
import type * as q from '../sql/index.js';
import type { IgnoredResults } from './call-rules.js';
import type { RateLimit } from '../rate.js';
import type { PoolSpec } from '../pool.js';
import type { RunResult } from '../types.js';

/**
 * How an item's turn in a run ended, once the move saying so is stored:
 * - `done`, `failed`: for good (`failed`: attempts used up, a permanent error, or an output that
 *   cannot be stored);
 * - `retry`: the attempt failed; the item is pending again after its backoff;
 * - `interrupted`: the run stopped while the item ran; the attempt counts, the item is pending;
 * - `given-back`: claimed but never started before the run stopped; pending, attempts unchanged;
 * - `resumable`: the run stopped while the item ran, after it stored a checkpoint in this attempt;
 *   pending with the attempt given back, the next run goes on from the checkpoint;
 * - `stale`: recovered for want of heartbeats (`itemStaleMs`); the attempt counts, pending again
 *   (`failed` when its attempts are used up);
 * - `waiting`: a Retry-After wait; pending after it, attempts unchanged;
 * - `parked`: its work registered a callback or a sleep and returned; `waiting` until a completion
 *   or its time wakes it, attempt given back.
 */
export type ItemOutcome =
  'done' | 'failed' | 'retry' | 'interrupted' | 'given-back' | 'waiting' | 'parked' | 'resumable' | 'stale';

/** What the runner reports as it goes (for logs and metrics); never needed for correctness. */
export type RunnerEvent =
  | {
      type: 'run-started';
      batchId: string;
      runId: string;
      takeover: boolean;
      tenant: string;
      priority: number;
      /** ms from the batch's start to this run, on its first run (database clock); else null. */
      queueWaitMs: number | null;
    }
  | { type: 'run-ended'; result: RunResult }
  | { type: 'item-ended'; batchId: string; runId: string; key: string; attempt: number; outcome: ItemOutcome }
  | { type: 'store-error'; batchId: string; runId: string; error: unknown; tries: number }
  | { type: 'unknown-job'; batchId: string; job: string }
  /**
   * A page of the batch's source was stored and raised its target: the batch wants `runs` more
   * runs than are live or on their way (docs/design.md, "Sources and results"). The Lambda worker
   * sends them; without it they come with the scheduler's next dispatch, or fleet processes join.
   */
  | { type: 'batch-wants-runs'; batchId: string; runs: number }
  /** A batched call answered entries that settled no item of it (see {@link IgnoredResults}). */
  | ({ type: 'call-results-ignored'; batchId: string } & IgnoredResults);

/** The settings one run works with (the runner's, with the executor's overrides applied). */
export interface RunSettings {
  parallel: number;
  /**
   * Items claimed ahead of execution beyond `parallel`: the queue's depth, or the least of it
   * when {@link maxQueueDepth} is larger (a default queue, deepened for short attempts).
   */
  queueDepth: number;
  /**
   * Most items claimed ahead beyond `parallel` (docs/design.md, "The pipelined run"): the queue
   * deepens from `queueDepth` towards it for short attempts, holding what the slots start within
   * {@link CLAIM_AHEAD_HORIZON_MS} and two round trips. Equal to `queueDepth` when that was set (the queue is then fixed).
   */
  maxQueueDepth: number;
  beatMs: number;
  staleMs: number;
  attempts: number;
  backoffMs: number;
  maxBackoffMs: number;
  moveTries: number;
  moveBackoffMs: number;
  storeTimeoutMs: number;
  drainMs: number;
  maxOutputBytes: number;
  maxStalledRuns: number;
  /** Default per-tenant limit of running batches (for the slice check). */
  maxRunning: number;
  /** The run's time slice, ms (docs/design.md, "Tenant fairness"). */
  sliceMs: number;
  /** The executor's item timeout, ms; the batch's own wins (docs/design.md, "Item timeouts"). */
  timeoutMs?: number;
  /** Retry-After waits per item that use no attempt (docs/design.md, "Retry-After"). */
  maxRetryAfter: number;
  /** The job's fleet-wide rate limit (docs/design.md, "Rate limits"); a batch's own rate wins. */
  rateLimit?: RateLimit;
  /** The job's concurrency pool (docs/design.md, "Concurrency pools"); a start's pool wins. */
  pool?: PoolSpec;
  /** The job's `itemStaleMs` (docs/design.md, "Item heartbeats and checkpoints"); none: off. */
  itemStaleMs?: number;
  /** The API's address for callback URLs (docs/design.md, "Waiting items: callbacks and sleeps"); none: URLs are null. */
  callbackUrl?: string;
  /** Most items a batch's source may hold (`LEASEHOLD_MAX_SOURCE_ITEMS`, 10,000,000). */
  maxSourceItems: number;
  /** Largest input of one item read from a source, bytes of JSON (65,536). */
  maxInputBytes: number;
  /** Bytes of a source object one page reads. */
  sourceRangeBytes: number;
  /** Objects of a source prefix one page lists, at least. */
  sourcePageObjects: number;
  /** The S3 client that reads sources and writes results (default: the container's). */
  s3?: () => S3Client;
  clock: Clock;
  random: () => number;
  onEvent: (event: RunnerEvent) => void;
}

/**
 * A sleep an attempt of this run registered (docs/design.md, "Waiting items: callbacks and
 * sleeps"): its wait's id, how long it was from its registration to its wake by the database's
 * clock, and when that is by the run's clock (counted from the answer: never early).
 */
export interface OwnSleep {
  id: string;
  wakeInMs: number;
  at: number;
}

/** A settled item waiting for its move, with what the move means. */
export interface Settled {
  move: q.MoveRow;
  outcome: ItemOutcome;
  /** `parked` by a sleep: the sleep, so the run may wake it itself when it is due. */
  sleep?: OwnSleep;
}

/**
 * How long before a pending item is due a run claims it (ms), so that a retry starts on a local
 * timer when it is due instead of a claim's round trip after.
 */
export const CLAIM_AHEAD_MS = 200;

/**
 * How far ahead a run's default queue claims, ms of its slots' work at the run's mean attempt,
 * beyond two of its mean move + claim round trips (docs/design.md, "The pipelined run"): it
 * holds what its slots start within this time and the two round trips (`parallel × (100 + 2 ×
 * round trip ms) / mean attempt ms` items beyond the running ones), at least `queueDepth`, at
 * most `maxQueueDepth`. It covers the flusher's longest linger (50 ms) and the statement's round
 * trips, so the slots never wait for a claim while the flusher gathers settled items, however
 * slow the database answers.
 */
export const CLAIM_AHEAD_HORIZON_MS = 100;

/**
 * The default `maxQueueDepth`, in multiples of `parallel`: a run of 20 ms attempts at `parallel`
 * 16 claims 64 ahead (the horizon alone would take 80 or more), holding 80 items, 100 ms of its
 * slots' work; longer attempts are bounded by the horizon (at 2 ms round trips, from 26 ms on).
 */
export const MAX_QUEUE_DEPTH_PER_SLOT = 4;

/**
 * A run's mean attempt under this is quick, ms of real time: its queue holds twice the cap, and
 * each statement is sent before the items the last one claimed start (docs/design.md, "The
 * pipelined run").
 */
export const QUICK_ATTEMPT_MS = 1;
