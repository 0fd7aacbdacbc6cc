// Deferred trigger firings: starts refused at `maxOpen` begin once their datasource has a free
// slot (docs/design.md, "Trigger").
import { startDeferred, type DeferredResult } from '../../trigger/index.js';
import type { MaintenanceService } from './service.js';

/** What starting deferred firings reads besides the scheduler's config. */
export interface DeferredSettings {
  /** The most firings one pass starts. @defaultValue `startDeferred`'s (100) */
  limit?: number;
}

/** The settings of deferred firings when none are given: `startDeferred`'s own. */
export const DEFERRED_DEFAULTS: Readonly<DeferredSettings> = {};

/** What starting deferred firings did; absent without the app's jobs. */
export interface DeferredPart {
  /** Deferred trigger firings started now, and those still waiting for a slot. */
  deferred?: DeferredResult;
}

/**
 * Start the trigger firings deferred at `maxOpen` whose datasource has a free slot (see
 * `startDeferred`); their batches are sent workers as every start's are, under the worker
 * limit. Does nothing without `ctx.jobs` and `ctx.log`.
 */
export function deferredService(settings: DeferredSettings = {}): MaintenanceService<'deferred', DeferredPart> {
  const s = { ...DEFERRED_DEFAULTS, ...settings };
  return {
    name: 'deferred',
    run: async ({ sql, jobs, log, config, workers }) =>
      jobs && log
        ? {
            deferred: await startDeferred({
              sql,
              jobs,
              config,
              dispatcher: workers.dispatcher,
              log,
              reserve: workers.reserve,
              ...s,
            }),
          }
        : {},
  };
}
