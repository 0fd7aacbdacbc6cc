// Retention: what is older than the retention days is deleted (docs/design.md, "Retention").
import { deleteExpiredBatches, deleteExpiredUsage, RETENTION_DEFAULTS, type RetentionResult } from '../../batch/index.js';
import { deleteDeliveredOutboxMessages, type OutboxRetentionResult } from '../../units/index.js';
import type { MaintenanceService } from './service.js';

/** What retention reads; the scheduler passes its `config.retention`. */
export interface RetentionSettings {
  /** Days finished rows are kept; 0 keeps them for ever. */
  retentionDays: number;
  /** Days usage rows are kept (by `recorded_at`); 0 keeps them for ever. */
  usageRetentionDays: number;
  /** Rows one statement deletes at most. */
  chunkRows: number;
  /** Rows of each kind one pass deletes at most. */
  maxRowsPerPass: number;
  /** No statement starts after this long, shared by all passes, ms. */
  budgetMs: number;
}

/** Retention's settings when none are given: the batch module's own. */
export const RETENTION_SERVICE_DEFAULTS: Readonly<RetentionSettings> = {
  /** @defaultValue `RETENTION_DEFAULTS.retentionDays` (30) */
  retentionDays: RETENTION_DEFAULTS.retentionDays,
  /** @defaultValue `RETENTION_DEFAULTS.usageRetentionDays` (400) */
  usageRetentionDays: RETENTION_DEFAULTS.usageRetentionDays,
  /** @defaultValue `RETENTION_DEFAULTS.chunkRows` (5,000) */
  chunkRows: RETENTION_DEFAULTS.chunkRows,
  /** @defaultValue `RETENTION_DEFAULTS.maxRowsPerPass` (500,000) */
  maxRowsPerPass: RETENTION_DEFAULTS.maxRowsPerPass,
  /** @defaultValue `RETENTION_DEFAULTS.budgetMs` (10 s) */
  budgetMs: RETENTION_DEFAULTS.budgetMs,
};

/** What retention deleted. */
export interface RetentionPart {
  /**
   * Counts of rows: expired batches with their items, redrives and deferred firings, and
   * delivered outbox messages with their deliveries; `more` when a pass stopped at its row cap
   * or time budget with expired rows left. All zero with `retentionDays` 0. `usage`: usage rows
   * deleted (`rows`) under their own `usageRetentionDays` (0: none).
   */
  retention: RetentionResult & {
    outbox: Omit<OutboxRetentionResult, 'more'>;
    retentionDays: number;
    usage: { rows: number; retentionDays: number };
  };
}

/**
 * Retention, last, so that it never delays the fleet's work: delete finished batches with their
 * items and redrives, deferred firings and delivered outbox messages older than
 * `retentionDays`, and usage rows older than `usageRetentionDays`, in statements of at most
 * `chunkRows` rows, at most `maxRowsPerPass` rows of each kind, no statement started after
 * `budgetMs` (batches first, then the outbox, then usage rows, each with what is left; see
 * `deleteExpiredBatches`, `deleteDeliveredOutboxMessages`, `deleteExpiredUsage`). Gives up on a
 * lock timeout, reporting nothing deleted and `more`.
 */
export function retentionService(settings: Partial<RetentionSettings> = {}): MaintenanceService<'retention', RetentionPart> {
  const r = { ...RETENTION_SERVICE_DEFAULTS, ...settings };
  return {
    name: 'retention',
    run: async ({ sql }) => {
      const t0 = Date.now();
      const batches = await deleteExpiredBatches(sql, r);
      const left = () => Math.max(0, r.budgetMs - (Date.now() - t0));
      const outbox = await deleteDeliveredOutboxMessages(sql, { ...r, budgetMs: left() });
      const usage = await deleteExpiredUsage(sql, { ...r, budgetMs: left() });
      return {
        retention: {
          ...batches,
          more: batches.more || outbox.more || usage.more,
          outbox: { messages: outbox.messages, deliveries: outbox.deliveries },
          retentionDays: r.retentionDays,
          usage: { rows: usage.rows, retentionDays: r.usageRetentionDays },
        },
      };
    },
    onLockTimeout: () => ({
      retention: {
        batches: 0,
        items: 0,
        redrives: 0,
        deferred: 0,
        more: true,
        outbox: { messages: 0, deliveries: 0 },
        retentionDays: r.retentionDays,
        usage: { rows: 0, retentionDays: r.usageRetentionDays },
      },
    }),
  };
}
