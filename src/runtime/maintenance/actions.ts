// Bulk actions: the scheduler continues every action its request did not finish
// (docs/design.md, "Bulk actions"), in the same bounded chunks the API call works, oldest first.
import { workUnfinishedActions } from '../../batch/index.js';
import type { MaintenanceService } from './service.js';

/** What continuing bulk actions reads. */
export interface ActionsServiceSettings {
  /** Time one pass spends on actions, ms (a chunk begun is finished). @defaultValue 10000 */
  budgetMs: number;
  /** The most unfinished actions one pass looks at. @defaultValue 10 */
  limit: number;
}

/** The actions service's settings when none are given. */
export const ACTIONS_SERVICE_DEFAULTS: Readonly<ActionsServiceSettings> = { budgetMs: 10_000, limit: 10 };

/** What continuing bulk actions did. */
export interface ActionsPart {
  /** Batches of bulk actions this pass worked (done, skipped, or busy and left for later). */
  actionBatches: number;
}

/**
 * Work the unfinished bulk actions' batches, oldest action first, for at most `budgetMs`. Runs
 * after the deadlines and before dispatch, so a batch an action resumed or redrove is sent
 * workers in the same pass, and the Batch Finished events of the batches it cancelled are sent by
 * the events service later in it.
 */
export function actionsService(settings: Partial<ActionsServiceSettings> = {}): MaintenanceService<'actions', ActionsPart> {
  const s = { ...ACTIONS_SERVICE_DEFAULTS, ...settings };
  return {
    name: 'actions',
    run: async ({ sql, config }) => ({
      actionBatches: await workUnfinishedActions(sql, { budgetMs: s.budgetMs, limit: s.limit, maxOpen: config.maxOpen }),
    }),
  };
}
