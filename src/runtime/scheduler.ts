import { claimDispatch, deleteExpiredBatches, type RetentionResult } from '../batch/index.js';
import { deleteDeliveredOutboxMessages, type OutboxRetentionResult } from '../units/index.js';
import { balanceOf, planInvocations, readFleet, sweep, type Balance } from '../lease/index.js';
import type { Sql } from '../store/index.js';
import type { Config } from './config.js';
import type { Dispatcher } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import { startDeferred, type DeferredResult } from '../trigger/index.js';
import type { Log } from '../log.js';

/** What one scheduler run did. */
export interface SchedulerResult {
  /** Processes deleted by the sweep and units it freed. */
  swept: { processes: number; units: number };
  /** Batches sent to a worker: never started, handed off, or stale. */
  dispatched: string[];
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
   * What retention deleted in this run (docs/design.md, "Retention"), counts of rows: expired
   * batches with their items, redrives and deferred firings, and delivered outbox messages
   * with their deliveries; `more` when a pass stopped at its row cap or time budget with expired
   * rows left. All zero with `retentionDays` 0.
   */
  retention: RetentionResult & { outbox: Omit<OutboxRetentionResult, 'more'>; retentionDays: number };
}

/**
 * One scheduler run (EventBridge, every minute; locally a timer), docs/design.md "Serverless runtime":
 * 1. sweep: delete processes expired longer than the sweep cutoff and free their units;
 * 2. dispatch every open batch that is never started, handed off or stale to a worker — each
 *    marked in the statement that selects it, so overlapping runs never dispatch it twice within
 *    `dispatchCooldownMs`;
 * 3. invoke `desired − live − coming` workers (coming: invoked within the confirmation window
 *    `invocationPendingMs` and not yet heartbeating), at most `invokeCap`, or ask exactly the
 *    surplus of live fleet processes to retire — decided one scheduler at a time so overlapping
 *    runs never over-invoke or over-retire; nothing is invoked when no unit has weight > 0.
 *    With no such unit and no open batch nothing is invoked at all (scale to zero);
 * 4. read the fleet's balance (from the process rows) for the metrics;
 * 5. retention, last, so that it never delays the fleet's work: delete what is older than
 *    `config.retention.retentionDays` (finished batches with their items and redrives, deferred
 *    firings, delivered outbox messages), in statements of at most `chunkRows` rows, at most
 *    `maxRowsPerPass` rows of each kind and no statement started after `budgetMs` (shared by
 *    both passes); see `deleteExpiredBatches` and `deleteDeliveredOutboxMessages`.
 * With `jobs`, it first starts trigger firings deferred at `maxOpen` whose datasource has a free
 * slot (see `startDeferred`); their batches are dispatched in step 2's way.
 * A failed invoke is reported, never thrown; nothing depends on a chain of worker invocations
 * (replacements, continuations) that the platform could cut: this run redoes their work.
 */
export async function runScheduler(
  deps: { sql: Sql; config: Config; dispatcher: Dispatcher } & ({ jobs?: undefined } | { jobs: JobRegistry; log: Log }),
): Promise<SchedulerResult> {
  const { sql, config, dispatcher } = deps;
  const swept = await sweep(sql, config.lease.sweepCutoffMs);
  // Trigger firings refused at maxOpen start once their datasource has a free slot.
  const deferred = deps.jobs ? await startDeferred({ sql, jobs: deps.jobs, config, dispatcher, log: deps.log }) : undefined;
  const ids = await claimDispatch(sql, {
    staleMs: config.runner.staleMs,
    cooldownMs: config.dispatchCooldownMs,
    maxRunning: config.runner.maxRunning,
  });
  const dispatched: string[] = [];
  const failed: string[] = [];
  await Promise.all(
    ids.map(async (batchId) => {
      try {
        await dispatcher.invoke({ batchId });
        dispatched.push(batchId);
      } catch {
        failed.push(batchId);
      }
    }),
  );
  const plan = await planInvocations(sql, { cap: config.invokeCap, pendingMs: config.invocationPendingMs });
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
  const retention = await applyRetention(sql, config);
  return {
    swept,
    dispatched,
    failed,
    fleet: { desired: plan.desired, live: plan.live, pending: plan.pending },
    invoked,
    retired: plan.retired.length,
    balance,
    retention,
    ...(deferred ? { deferred } : {}),
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
