// Dispatch: open batches that lack runs are sent workers (docs/design.md, "Fan-out").
import { claimDispatch, RUNNER_DEFAULTS } from '../../batch/index.js';
import type { MaintenanceService } from './service.js';

/** What dispatch reads; the scheduler passes its config's. */
export interface DispatchSettings {
  /** A run whose beat is older is stale and gets a worker to take it over, ms. */
  staleMs: number;
  /** A batch dispatched this recently that no run has joined since is not dispatched again, ms. */
  cooldownMs: number;
  /** Runs a tenant may have at once when it sets no limit of its own. */
  maxRunning: number;
}

/** Dispatch's settings when none are given. */
export const DISPATCH_DEFAULTS: Readonly<DispatchSettings> = {
  /** @defaultValue `RUNNER_DEFAULTS.staleMs` (30 s) */
  staleMs: RUNNER_DEFAULTS.staleMs,
  /** @defaultValue 30,000 (`LEASEHOLD_DISPATCH_COOLDOWN_MS`) */
  cooldownMs: 30_000,
  /** @defaultValue `RUNNER_DEFAULTS.maxRunning` (no limit) */
  maxRunning: RUNNER_DEFAULTS.maxRunning,
};

/** What dispatch did. */
export interface DispatchPart {
  /**
   * Batches sent to workers, once per worker: below their target (never started, handed off,
   * runs that left) or with a stale run.
   */
  dispatched: string[];
  /** Workers a batch wanted that the worker limit had no room for (sent by a later run). */
  deferredWorkers: number;
  /** Dispatches whose invoke failed; they are retried after the cooldown. */
  failed: string[];
}

/**
 * Send workers to every open batch below its target or with a stale run, one per run it lacks
 * (within its tenant's limit of runs). Each batch is marked in the statement that selects it, so
 * overlapping runs never dispatch it twice within `cooldownMs`; each worker is reserved as an
 * invocation under the worker limit (`WorkerDispatcher.sendClaimed`), and a batch with no room
 * left is unmarked and served by a later run. A failed invoke is reported in `failed`, never thrown.
 */
export function dispatchService(settings: Partial<DispatchSettings> = {}): MaintenanceService<'dispatch', DispatchPart> {
  const s = { ...DISPATCH_DEFAULTS, ...settings };
  return {
    name: 'dispatch',
    run: async ({ sql, workers }) => {
      const { dispatched, failed, held } = await workers.sendClaimed(await claimDispatch(sql, s));
      return { dispatched, deferredWorkers: held, failed };
    },
  };
}
