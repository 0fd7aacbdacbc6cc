// Results still due: those of finished batches whose writer died or failed (docs/design.md,
// "Sources and results").
import { defaultS3Client, writeDueResults, type DueResults } from '../../batch/index.js';
import type { MaintenanceService } from './service.js';
import { errorFields } from '../../log.js';

/** What writing due results reads. */
export interface ResultsSettings {
  /** The most batches whose results one pass writes. */
  limit: number;
  /** No write begins after this long, and a write still going then is cut short (tried again by the next run), ms. */
  budgetMs: number;
}

/** The settings of due results when none are given. */
export const RESULTS_DEFAULTS: Readonly<ResultsSettings> = {
  /** @defaultValue 3 */
  limit: 3,
  /** @defaultValue 25,000: half the scheduler function's 50 s, so its other work goes on after this */
  budgetMs: 25_000,
};

/** What writing due results did. */
export interface ResultsPart {
  /** Results written for finished batches whose writer died or failed. */
  results?: DueResults;
}

/**
 * Write the results of finished batches whose writer died or failed (see `writeDueResults`),
 * with `ctx.s3` (default the container's client); a batch whose write fails is logged (`warn`)
 * and left for the next run.
 */
export function resultsService(settings: Partial<ResultsSettings> = {}): MaintenanceService<'results', ResultsPart> {
  const s = { ...RESULTS_DEFAULTS, ...settings };
  return {
    name: 'results',
    run: async ({ sql, s3, log }) => ({
      results: await writeDueResults(sql, async () => (s3 ? s3() : defaultS3Client()), {
        ...s,
        onError: (batchId, error) => log?.('warn', 'writing results failed', { batchId, error: errorFields(error) }),
      }),
    }),
  };
}
