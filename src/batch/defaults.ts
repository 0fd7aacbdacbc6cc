// The defaults of a batch, each written once (docs/design.md, "Batches"): what a start, a
// redrive, the batch reads and the runtime's configuration take when a setting is not given.
import { NO_LIMIT } from './sql/shared.js';
import { MAX_ITEM_TIMEOUT_MS } from './types.js';

/**
 * The defaults of a batch's settings and of the reads of batches. `createBatch`, `startBatch`,
 * `redriveBatch`, `listBatches`, `itemsPage` and `claimDispatch` fill what they are not given
 * from here, and the runtime's configuration (`LEASEHOLD_MAX_OPEN`,
 * `LEASEHOLD_BATCH_CONCURRENCY`) defaults to the same values. The start limits (`maxItems`,
 * `maxInputBytes`, `maxTotalBytes`) have their own table, `DEFAULT_START_LIMITS`.
 */
export const BATCH_DEFAULTS = {
  /**
   * Most unfinished batches one (tenant, datasource) may have (`maxOpen`): a start or a redrive
   * past it is refused with `too_many_batches` (docs/design.md, "Batches"). Default 4.
   */
  maxOpen: 4,
  /** A batch's order among its tenant's own batches, 0..9 (docs/design.md, "Tenant fairness"). Default 5. */
  priority: 5,
  /**
   * Most runs that work a batch at once when its start names none and the deployment sets no
   * `batchConcurrency` (docs/design.md, "Fan-out"). Default 1.
   */
  maxConcurrency: 1,
  /**
   * Longest item timeout a start may set, ms, when the deployment gives no `itemTimeoutLimitMs`:
   * Lambda's longest invocation, {@link MAX_ITEM_TIMEOUT_MS} (docs/design.md, "Item timeouts").
   */
  itemTimeoutLimitMs: MAX_ITEM_TIMEOUT_MS,
  /** Batches one `listBatches` answers, newest first. Default 100. */
  listLimit: 100,
  /** Items one `itemsPage` answers, in key order. Default 1,000. */
  pageLimit: 1_000,
  /** Batches (not workers) one `claimDispatch` marks. Default 100. */
  dispatchLimit: 100,
  /** The per-tenant limit of running batches `claimDispatch` applies to a tenant without its own: none. */
  maxRunning: NO_LIMIT,
} as const;

/**
 * Defaults of `RetentionOptions` (`deleteExpiredBatches`; docs/design.md, "Retention"): 30 days,
 * chunks of 5,000 rows, at most 500,000 rows and 10,000 ms a pass, a pause of twice each chunk's time;
 * usage rows (`deleteExpiredUsage`) 400 days, longer than a year so annual chargeback works.
 */
export const RETENTION_DEFAULTS = {
  retentionDays: 30,
  usageRetentionDays: 400,
  chunkRows: 5_000,
  maxRowsPerPass: 500_000,
  budgetMs: 10_000,
  pauseRatio: 2,
} as const;

/**
 * What one start may hold (docs/design.md, "Batches"). A start over any of them is refused
 * with `BatchTooLargeError` naming the limit, and stores nothing. Item keys are at most
 * `MAX_KEY_BYTES` (src/batch/items.ts) bytes whatever these say.
 */
export interface StartLimits {
  /** Most items in one batch. Default 200,000. */
  maxItems: number;
  /** Largest input of one item, in bytes of its JSON text (UTF-8). Default 65,536. */
  maxInputBytes: number;
  /** Largest sum over all items of key bytes plus input bytes. Default 536,870,912 (512 MiB). */
  maxTotalBytes: number;
}

/** Defaults of {@link StartLimits}. */
export const DEFAULT_START_LIMITS: Readonly<StartLimits> = {
  maxItems: 200_000,
  maxInputBytes: 65_536,
  maxTotalBytes: 512 * 1024 * 1024,
};
