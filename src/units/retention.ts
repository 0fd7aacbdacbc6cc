// Outbox retention (docs/design.md, "Retention"): delivered messages older than the retention
// period are deleted with their deliveries, in bounded chunks.
import { systemClock, type Clock } from '../clock.js';
import type { Sql } from '../store/index.js';
import { deleteDeliveredOutbox } from './sql/retention.js';

/** What {@link deleteDeliveredOutboxMessages} may do. */
export interface OutboxRetentionOptions {
  /** Messages created more than this many days ago (database clock) are deleted once delivered; 0 keeps everything. Default 30. */
  retentionDays?: number;
  /** Most messages one statement reads. Default 5,000. */
  chunkRows?: number;
  /** Most rows (messages plus deliveries) one pass deletes; it stops before the statement that would start beyond. Default 500,000. */
  maxRowsPerPass?: number;
  /** How long one pass keeps starting statements, ms (by `clock`). Default 10,000. */
  budgetMs?: number;
  /** Measures the budget. Default the system clock. */
  clock?: Clock;
}

/** What one outbox retention pass deleted. */
export interface OutboxRetentionResult {
  /** Delivered messages deleted. */
  messages: number;
  /** Their deliveries, deleted with them. */
  deliveries: number;
  /** The pass ended on its row cap or time budget before reaching the cutoff (the next pass goes on). */
  more: boolean;
}

/**
 * One outbox retention pass (docs/design.md, "Retention"): walks the outbox in id order from the
 * oldest message, `chunkRows` messages per statement, deleting those assigned, older than
 * `retentionDays` and delivered to every endpoint they were assigned to, with their deliveries;
 * it stops at the first message newer than the cutoff. Messages still to deliver (an endpoint
 * that keeps failing) are kept and walked past. Each statement reads at most `chunkRows`
 * messages and skips rows other transactions hold; idempotent and resumable like the batch
 * pass.
 *
 * @throws the database error of a failing statement (what earlier statements deleted stays deleted).
 */
export async function deleteDeliveredOutboxMessages(
  sql: Sql,
  options: OutboxRetentionOptions = {},
): Promise<OutboxRetentionResult> {
  const days = options.retentionDays ?? 30;
  const chunk = options.chunkRows ?? 5_000;
  const cap = options.maxRowsPerPass ?? 500_000;
  const clock = options.clock ?? systemClock;
  const until = clock.now() + (options.budgetMs ?? 10_000);
  const result: OutboxRetentionResult = { messages: 0, deliveries: 0, more: false };
  if (days <= 0) return result;
  let after = '0';
  for (;;) {
    if (result.messages + result.deliveries >= cap || clock.now() >= until) return { ...result, more: true };
    const r = await deleteDeliveredOutbox(sql, { days, after, limit: chunk });
    result.messages += r.messages;
    result.deliveries += r.deliveries;
    if (r.reached || r.last === null) return result;
    after = r.last;
  }
}
