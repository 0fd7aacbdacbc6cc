import { claimDispatch } from '../batch/index.js';
import type { Sql } from '../store/index.js';
import type { Config } from './config.js';
import type { Dispatcher } from './dispatch.js';

/** What one scheduler run did. */
export interface SchedulerResult {
  /** Batches sent to a worker: never started, handed off, or stale. */
  dispatched: string[];
  /** Dispatches whose invoke failed; they are retried after the cooldown. */
  failed: string[];
}

/**
 * One scheduler run (EventBridge, every minute; locally a timer): dispatch every open batch
 * that is never started, handed off or stale to a worker invocation. Each batch is marked in
 * the same statement that selects it, so overlapping scheduler runs never dispatch one batch
 * twice within `dispatchCooldownMs`. With no open batch, nothing is invoked.
 */
export async function runScheduler(deps: { sql: Sql; config: Config; dispatcher: Dispatcher }): Promise<SchedulerResult> {
  const ids = await claimDispatch(deps.sql, {
    staleMs: deps.config.staleMs,
    cooldownMs: deps.config.dispatchCooldownMs,
  });
  const dispatched: string[] = [];
  const failed: string[] = [];
  await Promise.all(
    ids.map(async (batchId) => {
      try {
        await deps.dispatcher.invoke({ batchId });
        dispatched.push(batchId);
      } catch {
        failed.push(batchId);
      }
    }),
  );
  return { dispatched, failed };
}
