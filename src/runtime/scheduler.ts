import { claimDispatch } from '../batch/index.js';
import { planInvocations, sweep } from '../lease/index.js';
import type { Sql } from '../store/index.js';
import type { Config } from './config.js';
import type { Dispatcher } from './dispatch.js';
import type { JobRegistry } from '../jobs/index.js';
import { startDeferred, type DeferredResult } from './trigger.js';

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
}

/**
 * One scheduler run (EventBridge, every minute; locally a timer), DESIGN.md "Serverless runtime":
 * 1. sweep: delete processes expired longer than the sweep cutoff and free their units;
 * 2. dispatch every open batch that is never started, handed off or stale to a worker — each
 *    marked in the statement that selects it, so overlapping runs never dispatch it twice within
 *    `dispatchCooldownMs`;
 * 3. invoke `desired − live − invoked but not yet live` workers, at most `invokeCap`, decided
 *    one scheduler at a time so overlapping runs never over-invoke; none when no unit has
 *    weight > 0. With no such unit and no open batch nothing is invoked at all (scale to zero).
 * With `jobs`, it first starts trigger firings deferred at `maxOpen` whose datasource has a free
 * slot (see `startDeferred`); their batches are dispatched in step 2's way.
 * A failed invoke is reported, never thrown.
 */
export async function runScheduler(deps: { sql: Sql; config: Config; dispatcher: Dispatcher; jobs?: JobRegistry }): Promise<SchedulerResult> {
  const { sql, config, dispatcher } = deps;
  const swept = await sweep(sql, config.lease.sweepCutoffMs);
  // Trigger firings refused at maxOpen start once their datasource has a free slot.
  const deferred = deps.jobs ? await startDeferred({ sql, jobs: deps.jobs, config, dispatcher }) : undefined;
  const ids = await claimDispatch(sql, { staleMs: config.staleMs, cooldownMs: config.dispatchCooldownMs });
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
        // Counted as pending until invocationPendingMs passes; then planned again.
      }
    }),
  );
  return { swept, dispatched, failed, fleet: { desired: plan.desired, live: plan.live, pending: plan.pending }, invoked, ...(deferred ? { deferred } : {}) };
}
