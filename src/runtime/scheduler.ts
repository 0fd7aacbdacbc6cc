import {
  claimDispatch,
  defaultS3Client,
  deleteExpiredBatches,
  runsSummary,
  undispatch,
  writeDueResults,
  type DueResults,
  type RetentionResult,
} from '../batch/index.js';
import { deleteDeliveredOutboxMessages, type OutboxRetentionResult } from '../units/index.js';
import {
  balanceOf,
  liftQuarantines,
  planInvocations,
  readFleet,
  reserveInvocations,
  sweep,
  type Balance,
} from '../lease/index.js';
import { checkSchema, isLockTimeout, type SchemaRange, type Sql } from '../store/index.js';
import type { Config } from './config.js';
import type { Dispatcher } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import { startDeferred, type DeferredResult } from '../trigger/index.js';
import type { Log } from '../log.js';
import type { S3Client } from '@aws-sdk/client-s3';
import { workerReserver } from './dispatch.js';
import type { SendOptions, SendResult } from './events.js';

/**
 * Longest one scheduler run spends writing due results, ms (docs/design.md, "Sources and
 * results"): a write still going then is cut short and tried again by the next run.
 */
export const RESULTS_BUDGET_MS = 25_000;

/** What one scheduler run did. */
export interface SchedulerResult {
  /** Results written for finished batches whose writer died or failed (docs/design.md, "Sources and results"). */
  results?: DueResults;
  /** Processes deleted by the sweep and units it freed. */
  swept: { processes: number; units: number };
  /** Units whose quarantine ended now (docs/design.md, "Crashes and quarantine"). */
  lifted: number;
  /**
   * Batches sent to workers, once per worker: below their target (never started, handed off,
   * runs that left) or with a stale run.
   */
  dispatched: string[];
  /** Workers a batch wanted that the worker limit had no room for (sent by a later run). */
  deferredWorkers: number;
  /** Dispatches whose invoke failed; they are retried after the cooldown. */
  failed: string[];
  /** Desired count, live processes and invocations not yet live, as the plan saw them. */
  fleet: { desired: number; live: number; pending: number };
  /** Workers invoked to reach the desired count of live processes. */
  invoked: number;
  /** Deferred trigger firings started now, and those still waiting for a slot (with `jobs`). */
  deferred?: DeferredResult;
  /** Live fleet processes asked to retire now (the fleet was above the desired count). */
  retired: number;
  /**
   * The fleet after this run, as its process rows say (weights as of each process's last
   * heartbeat): fair share, spread and starving processes (below `starvingBelow`
   * of the fair share) of the live fleet processes not retiring, and the processes retiring and
   * sent for batches.
   */
  balance: Balance & { fairShare: number; retiring: number; batch: number };
  /**
   * The runs of open batches after this run's dispatch (docs/design.md, "Fan-out"): batches
   * with a live run, live runs in all, the most of one batch.
   */
  runs: { batches: number; runs: number; maxPerBatch: number };
  /**
   * What retention deleted in this run (docs/design.md, "Retention"), counts of rows: expired
   * batches with their items, redrives and deferred firings, and delivered outbox messages
   * with their deliveries; `more` when a pass stopped at its row cap or time budget with expired
   * rows left. All zero with `retentionDays` 0.
   */
  retention: RetentionResult & { outbox: Omit<OutboxRetentionResult, 'more'>; retentionDays: number };
  /**
   * Steps that gave up on a lock another session held past the pool's `lock_timeout` (`sweep`,
   * `retention`); this run did the other steps, the next one tries these again. Absent when none.
   */
  lockTimeouts?: ('sweep' | 'retention')[];
  /** Batch Finished events sent by this run (docs/design.md, "Events"); absent without a sender. */
  events?: SendResult;
}

/**
 * `f()`, or `fallback` when it failed on a lock timeout (docs/design.md, "Database connections":
 * one locked row delays that step, never the scheduler's other work); `skipped` records the step.
 */
async function unlessLocked<T>(
  step: 'sweep' | 'retention',
  skipped: ('sweep' | 'retention')[],
  f: () => Promise<T>,
  fallback: T,
): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (!isLockTimeout(e)) throw e;
    skipped.push(step);
    return fallback;
  }
}

/**
 * One scheduler run (EventBridge, every minute; locally a timer), docs/design.md "Serverless runtime":
 * 1. sweep: delete processes expired longer than the sweep cutoff and free their units (a unit
 *    whose job ran when its owner died counts a crash), and lift the quarantines that are over;
 * 2. dispatch workers to every open batch below its target (never started, handed off, runs
 *    that left) or with a stale run, one per run it lacks — each batch marked in the statement
 *    that selects it, so overlapping runs never dispatch it twice within `dispatchCooldownMs`;
 *    each worker is reserved as an invocation under the worker limit (`maxWorkers`: live
 *    processes plus invocations on their way), and a batch with no room left is unmarked and
 *    served by a later run (docs/design.md, "Fan-out");
 * 3. invoke `desired − live − coming` workers (coming: invoked within the confirmation window
 *    `invocationPendingMs` and not yet heartbeating), at most `invokeCap` and within the worker
 *    limit, or ask exactly the
 *    surplus of live fleet processes to retire — decided one scheduler at a time so overlapping
 *    runs never over-invoke or over-retire; nothing is invoked when no unit has weight > 0 and
 *    no open batch is below its target (fleet processes join such batches).
 *    With no such unit and no open batch nothing is invoked at all (scale to zero);
 * 4. read the fleet's balance (from the process rows) for the metrics, and send the Batch
 *    Finished events left unsent (`deps.events`; docs/design.md, "Events");
 * 5. retention, last, so that it never delays the fleet's work: delete what is older than
 *    `config.retention.retentionDays` (finished batches with their items and redrives, deferred
 *    firings, delivered outbox messages), in statements of at most `chunkRows` rows, at most
 *    `maxRowsPerPass` rows of each kind and no statement started after `budgetMs` (shared by
 *    both passes); see `deleteExpiredBatches` and `deleteDeliveredOutboxMessages`.
 * With `jobs`, it first starts trigger firings deferred at `maxOpen` whose datasource has a free
 * slot (see `startDeferred`); their batches are dispatched in step 2's way.
 * Its first statement checks the schema version against `deps.schema` (default
 * `SUPPORTED_SCHEMA`): old code after a migration does nothing (docs/design.md, "Schema versions").
 * @throws {SchemaMismatchError} the database's schema is outside that range; nothing was done.
 *
 * A failed invoke is reported, never thrown; nothing depends on a chain of worker invocations
 * (replacements, continuations) that the platform could cut: this run redoes their work.
 */
export async function runScheduler(
  deps: {
    sql: Sql;
    config: Config;
    dispatcher: Dispatcher;
    schema?: SchemaRange;
    /** Sends the Batch Finished events left unsent (see `sendEvents`); default none. */
    events?: (options?: SendOptions) => Promise<SendResult>;
    /** The S3 client that writes results still due; default the container's (`defaultS3Client`). */
    s3?: () => S3Client;
  } & ({ jobs?: undefined } | { jobs: JobRegistry; log: Log }),
): Promise<SchedulerResult> {
  const { sql, config, dispatcher } = deps;
  await checkSchema(sql, deps.schema);
  const lockTimeouts: ('sweep' | 'retention')[] = [];
  const swept = await unlessLocked('sweep', lockTimeouts, () => sweep(sql, config.lease.sweepCutoffMs, config.lease), {
    processes: 0,
    units: 0,
  });
  const lifted = await liftQuarantines(sql);
  // Trigger firings refused at maxOpen start once their datasource has a free slot.
  const deferred = deps.jobs
    ? await startDeferred({ sql, jobs: deps.jobs, config, dispatcher, log: deps.log, reserve: workerReserver(sql, config) })
    : undefined;
  const wanted = await claimDispatch(sql, {
    staleMs: config.runner.staleMs,
    cooldownMs: config.dispatchCooldownMs,
    maxRunning: config.runner.maxRunning,
  });
  const reserved = await reserveInvocations(sql, {
    batchIds: wanted,
    maxWorkers: config.maxWorkers,
    pendingMs: config.invocationPendingMs,
  });
  // Marked but sent no worker: dispatchable again at once, when the limit has room.
  const served = new Set(reserved.map((r) => r.batchId));
  for (const batchId of new Set(wanted)) if (!served.has(batchId)) await undispatch(sql, batchId);
  const dispatched: string[] = [];
  const failed: string[] = [];
  await Promise.all(
    reserved.map(async ({ batchId, invocationId }) => {
      try {
        await dispatcher.invoke({ batchId, invocationId });
        dispatched.push(batchId);
      } catch {
        failed.push(batchId);
      }
    }),
  );
  const plan = await planInvocations(sql, {
    cap: config.invokeCap,
    pendingMs: config.invocationPendingMs,
    maxWorkers: config.maxWorkers,
  });
  let invoked = 0;
  await Promise.all(
    plan.invocations.map(async (invocationId) => {
      try {
        await dispatcher.invoke({ invocationId });
        invoked++;
      } catch {
        // Counted as coming until its confirmation window passes; then planned again.
      }
    }),
  );
  const fleet = await readFleet(sql);
  const balance = {
    ...balanceOf(fleet.reportedWeights, fleet.fairShare, config.lease.shedHysteresis),
    fairShare: fleet.fairShare,
    retiring: fleet.retiring,
    batch: fleet.batch,
  };
  const runs = await runsSummary(sql);
  // Results of finished batches whose writer died or failed (docs/design.md, "Sources and results").
  const results = await writeDueResults(sql, async () => (deps.s3 ? deps.s3() : defaultS3Client()), {
    limit: 3,
    // Half the scheduler function's 50 s: its other work goes on after this.
    budgetMs: RESULTS_BUDGET_MS,
    onError: (batchId, error) => deps.jobs && deps.log('warn', 'writing results failed', { batchId, error: String(error) }),
  });
  // Events left unsent (a run that died between its end and the send, a failed put): before
  // retention, after the fleet's work; row by row with skip locked, so no locked row holds it up.
  const events = deps.events ? await deps.events({ budgetMs: 10_000 }) : undefined;
  const retention = await unlessLocked('retention', lockTimeouts, () => applyRetention(sql, config), {
    batches: 0,
    items: 0,
    redrives: 0,
    deferred: 0,
    more: true,
    outbox: { messages: 0, deliveries: 0 },
    retentionDays: config.retention.retentionDays,
  });
  return {
    swept,
    lifted,
    dispatched,
    deferredWorkers: wanted.length - reserved.length,
    failed,
    fleet: { desired: plan.desired, live: plan.live, pending: plan.pending },
    invoked,
    retired: plan.retired.length,
    balance,
    runs,
    retention,
    results,
    ...(deferred ? { deferred } : {}),
    ...(events ? { events } : {}),
    ...(lockTimeouts.length ? { lockTimeouts } : {}),
  };
}

/** Both retention passes within one budget: batches first, then the outbox with what is left. */
async function applyRetention(sql: Sql, config: Config): Promise<SchedulerResult['retention']> {
  const r = config.retention;
  const t0 = Date.now();
  const batches = await deleteExpiredBatches(sql, r);
  const outbox = await deleteDeliveredOutboxMessages(sql, { ...r, budgetMs: Math.max(0, r.budgetMs - (Date.now() - t0)) });
  return {
    ...batches,
    more: batches.more || outbox.more,
    outbox: { messages: outbox.messages, deliveries: outbox.deliveries },
    retentionDays: r.retentionDays,
  };
}
