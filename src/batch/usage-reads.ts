// A batch's and a tenant's usage with its estimated cost (docs/design.md, "Usage and cost"): the
// reads the API and the Batch Finished senders make, apart from the meter a worker's runs use
// (usage.ts), so a cold start does not load them.
import type { Sql } from '../store/index.js';
import * as q from './sql/usage-reads.js';
import { pricesFor, type Prices, type TenantUsage, type Usage } from './usage.js';

const round = (usd: number) => Math.round(usd * 1e8) / 1e8;

/** Sums rows of usage (one per architecture) and prices them. */
export function usageOf(rows: readonly q.UsageSumRow[], prices: Prices): Usage {
  const t = prices.table;
  const u = { workerMs: 0, gbSeconds: 0, runs: 0, diedRuns: 0, invocations: 0, items: 0 };
  const s3 = { get: 0, put: 0, list: 0 };
  let lambda = 0;
  for (const r of rows) {
    u.workerMs += r.worker_ms;
    u.gbSeconds += r.gb_seconds;
    u.runs += r.runs;
    u.diedRuns += r.died;
    u.invocations += r.invocations;
    u.items += r.items;
    s3.get += r.s3_get;
    s3.put += r.s3_put;
    s3.list += r.s3_list;
    lambda += r.gb_seconds * t.lambdaGbSecond[r.architecture] + r.invocations * t.lambdaRequest[r.architecture];
  }
  const s3Cost = (s3.get * t.s3PerThousand.get + s3.put * t.s3PerThousand.put + s3.list * t.s3PerThousand.list) / 1000;
  return {
    ...u,
    workerMs: Math.round(u.workerMs),
    gbSeconds: Math.round(u.gbSeconds * 1000) / 1000,
    s3Requests: s3,
    estimatedCost: {
      currency: 'USD',
      total: round(lambda + s3Cost),
      lambda: round(lambda),
      s3: round(s3Cost),
      region: prices.region,
      overridden: prices.overridden,
    },
  };
}

/** A batch's usage as recorded so far, priced at `prices` (default: {@link DEFAULT_PRICE_REGION}'s). */
export async function getBatchUsage(sql: Sql, batchId: string, prices: Prices = pricesFor(undefined)): Promise<Usage> {
  return usageOf(await q.batchUsage(sql, batchId), prices);
}

/** The usage of several batches (one statement), by batch id; a batch with no run recorded has zeros. */
export async function getBatchesUsage(
  sql: Sql,
  batchIds: readonly string[],
  prices: Prices = pricesFor(undefined),
): Promise<Map<string, Usage>> {
  const rows = await q.batchesUsage(sql, batchIds);
  return new Map(
    batchIds.map((id) => [
      id,
      usageOf(
        rows.filter((r) => r.batch_id === id),
        prices,
      ),
    ]),
  );
}

/**
 * A tenant's usage recorded in `[from, to)`: `to` defaults to now and `from` to 30 days before
 * `to` (database clock).
 */
export async function getTenantUsage(
  sql: Sql,
  tenant: string,
  range: { from?: Date; to?: Date } = {},
  prices: Prices = pricesFor(undefined),
): Promise<TenantUsage> {
  const r = await q.tenantUsage(sql, { tenant, ...range });
  return { tenant, from: r.from, to: r.to, ...usageOf(r.rows, prices) };
}
