// Retention (docs/design.md, "Retention"): finished batches, with their items and redrives, and
// deferred trigger firings are deleted once older than the retention period, and usage rows once
// older than their own (docs/design.md, "Usage and cost"), in bounded chunks.
import type { Clock } from '../clock.js';
import { systemClock } from '../clock.js';
import type { Sql } from '../store/index.js';
import { RETENTION_DEFAULTS } from './defaults.js';
import * as q from './sql/retention.js';

// The defaults live beside the batch's own, so the runtime's configuration reads them without
// loading retention's statements at every cold start.
export { RETENTION_DEFAULTS };

/** How much one retention pass may delete, and what. */
export interface RetentionOptions {
  /**
   * Finished batches (succeeded, failed, cancelled) whose `finished_at`, and deferred firings
   * whose `created_at`, is more than this many days ago (database clock) are deleted. 0 keeps
   * everything (the pass deletes nothing). Default 30.
   */
  retentionDays?: number;
  /** Most rows one delete statement touches (items, deferred firings). Default 5,000. */
  chunkRows?: number;
  /**
   * Most rows one pass deletes in all; the pass stops before the statement that would start
   * beyond it. Default 500,000.
   */
  maxRowsPerPass?: number;
  /**
   * How long one pass keeps starting statements, ms (by `clock`): once it has passed, the pass
   * ends after the statement in flight. Default 10,000.
   */
  budgetMs?: number;
  /**
   * After each chunk of items the pass pauses this many times as long as the chunk took (1: it
   * deletes at most half the time), so the write-ahead log it writes leaves room for the runs'
   * commits. 0 never pauses. Default 2 (a third of the time deleting).
   */
  pauseRatio?: number;
  /** Measures the budget and the pauses. Default the system clock. */
  clock?: Clock;
}

/** What one retention pass deleted (counts of rows). */
export interface RetentionResult {
  /** Finished batch rows deleted (each only once it had no item left). */
  batches: number;
  /** Items of expired batches deleted. */
  items: number;
  /** Redrive records deleted with their batch. */
  redrives: number;
  /** Deferred trigger firings kept longer than the retention, deleted. */
  deferred: number;
  /** The pass ended on its row cap or time budget with expired rows left (the next pass goes on). */
  more: boolean;
}

/**
 * One retention pass over batches (docs/design.md, "Retention"): deferred firings older than
 * `retentionDays` first, then expired batches oldest finished first — each batch's items in
 * chunks of at most `chunkRows` through its primary key, then the batch row once it has no item
 * left (a batch row is never deleted with its items: the cascade would be one unbounded
 * statement). Every statement is short, autocommitted, and skips rows other transactions hold;
 * none waits for a worker. Stops at `maxRowsPerPass` rows or after `budgetMs`.
 *
 * Idempotent and resumable: what one pass leaves (its cap, its budget, a crash, a row another
 * transaction held) the next pass finds again through the same index. Overlapping passes share
 * the work (SKIP LOCKED) and delete each row once. A batch redriven meanwhile (open again) is
 * left alone from the next statement on.
 *
 * @throws the database error of a failing statement (what earlier statements deleted stays deleted).
 */
export async function deleteExpiredBatches(sql: Sql, options: RetentionOptions = {}): Promise<RetentionResult> {
  const days = options.retentionDays ?? RETENTION_DEFAULTS.retentionDays;
  const chunk = options.chunkRows ?? RETENTION_DEFAULTS.chunkRows;
  const cap = options.maxRowsPerPass ?? RETENTION_DEFAULTS.maxRowsPerPass;
  const clock = options.clock ?? systemClock;
  const pauseRatio = options.pauseRatio ?? RETENTION_DEFAULTS.pauseRatio;
  const until = clock.now() + (options.budgetMs ?? RETENTION_DEFAULTS.budgetMs);
  const result: RetentionResult = { batches: 0, items: 0, redrives: 0, deferred: 0, more: false };
  if (days <= 0) return result;
  const rows = () => result.batches + result.items + result.deferred;
  const spent = () => rows() >= cap || clock.now() >= until;

  for (;;) {
    if (spent()) return { ...result, more: true };
    const n = await q.deleteExpiredDeferred(sql, { days, limit: Math.min(chunk, cap - rows()) });
    result.deferred += n;
    if (n === 0) break;
  }

  // Batches this pass could not finish (rows held by another transaction): tried by the next pass.
  const skip: string[] = [];
  for (;;) {
    if (spent()) return { ...result, more: true };
    const ids = await q.expiredBatches(sql, { days, limit: 16, skip });
    if (ids.length === 0) return result;
    for (const batchId of ids) {
      let after = '';
      for (;;) {
        if (spent()) return { ...result, more: true };
        const started = clock.now();
        const r = await q.deleteExpiredItems(sql, { batchId, days, after, limit: Math.min(chunk, cap - rows()) });
        result.items += r.deleted;
        const pause = (clock.now() - started) * pauseRatio;
        if (pause > 0 && r.last !== null) await clock.sleep(Math.min(pause, Math.max(0, until - clock.now())));
        if (r.last === null) break;
        after = r.last;
      }
      if (spent()) return { ...result, more: true };
      const b = await q.deleteEmptyBatch(sql, { batchId, days });
      if (b.deleted) {
        result.batches++;
        result.redrives += b.redrives;
      } else {
        skip.push(batchId);
      }
    }
  }
}

/** How much one pass over usage rows may delete (`deleteExpiredUsage`). */
export interface UsageRetentionOptions extends Omit<RetentionOptions, 'retentionDays'> {
  /**
   * Usage rows (`leasehold_run_usage`) whose `recorded_at` is more than this many days ago
   * (database clock) are deleted. 0 keeps them for ever (the pass deletes nothing). Default 400.
   */
  usageRetentionDays?: number;
}

/** What one pass over usage rows deleted. */
export interface UsageRetentionResult {
  /** Usage rows deleted. */
  rows: number;
  /** The pass ended on its row cap or time budget with expired rows left (the next pass goes on). */
  more: boolean;
}

/**
 * One retention pass over usage rows (docs/design.md, "Usage and cost" and "Retention"): rows
 * recorded more than `usageRetentionDays` ago, tenant by tenant (a loose scan of the index on
 * `(tenant, recorded_at)`, 64 tenants per look-up), each tenant's oldest first in chunks of at most
 * `chunkRows`, pausing `pauseRatio` times each chunk's time. Independent of the batches: a row
 * whose batch retention deleted stays until its own time (no foreign key), so a tenant's range
 * keeps counting it. Every statement is short, autocommitted, and skips rows other transactions
 * hold. Stops at `maxRowsPerPass` rows or after `budgetMs`; idempotent and resumable as
 * `deleteExpiredBatches`.
 *
 * @throws the database error of a failing statement (what earlier statements deleted stays deleted).
 */
export async function deleteExpiredUsage(sql: Sql, options: UsageRetentionOptions = {}): Promise<UsageRetentionResult> {
  const days = options.usageRetentionDays ?? RETENTION_DEFAULTS.usageRetentionDays;
  const chunk = options.chunkRows ?? RETENTION_DEFAULTS.chunkRows;
  const cap = options.maxRowsPerPass ?? RETENTION_DEFAULTS.maxRowsPerPass;
  const clock = options.clock ?? systemClock;
  const pauseRatio = options.pauseRatio ?? RETENTION_DEFAULTS.pauseRatio;
  const until = clock.now() + (options.budgetMs ?? RETENTION_DEFAULTS.budgetMs);
  const result: UsageRetentionResult = { rows: 0, more: false };
  if (days <= 0) return result;
  const spent = () => result.rows >= cap || clock.now() >= until;

  let tenantAfter = '';
  for (;;) {
    if (spent()) return { ...result, more: true };
    const tenants = await q.usageTenants(sql, { days, after: tenantAfter, limit: 64 });
    if (tenants.length === 0) return result;
    for (const { tenant, expired } of tenants) {
      let after = '-infinity';
      while (expired) {
        if (spent()) return { ...result, more: true };
        const started = clock.now();
        const r = await q.deleteExpiredUsage(sql, { tenant, days, after, limit: Math.min(chunk, cap - result.rows) });
        result.rows += r.deleted;
        if (r.last === null) break;
        after = r.last;
        const pause = (clock.now() - started) * pauseRatio;
        if (pause > 0) await clock.sleep(Math.min(pause, Math.max(0, until - clock.now())));
      }
    }
    tenantAfter = tenants.at(-1)!.tenant;
  }
}
