// What a tenant runs and waits for, and its limit (docs/design.md, "Tenant fairness").
import type { Sql } from '../store/index.js';
import { InvalidBatchError } from './request-errors.js';
import { NO_LIMIT } from './sql/index.js';
import * as q from './sql/tenants.js';

/** One open batch of a tenant, as {@link getTenant} lists it. */
export interface TenantBatch {
  id: string;
  datasource: string;
  job: string;
  priority: number;
  createdAt: Date;
  /** Running: when a run last joined it; waiting: when it began to wait (its start, or its last handoff). */
  since: Date;
  /** Its live runs now, and the runs it wants (docs/design.md, "Fan-out"). */
  liveRuns: number;
  target: number;
  /** ms since `since`, by the database clock. */
  forMs: number;
}

/** A tenant's share of the workers: counts, limit, and its running and waiting batches. */
export interface TenantInfo {
  tenant: string;
  /**
   * Live runs of the tenant's batches (a run that died counts until it is taken over): what
   * its limit caps (docs/design.md, "Fan-out").
   */
  running: number;
  /** Open batches below their target: waiting for a worker (a batch may be running and waiting). */
  waiting: number;
  /** The tenant's own limit on runs, or null when it uses the default. */
  maxRunning: number | null;
  /** The limit in force: its own, else the default; null when there is none. */
  effectiveMaxRunning: number | null;
  /** ms the longest-waiting batch has waited (since its start or last handoff; database clock); null: none waits. */
  oldestWaitMs: number | null;
  /** Batches with a live run, longest running first (at most `limit`). */
  runningBatches: TenantBatch[];
  /** Batches below their target in the order the tenant's turns take them: priority, then age (at most `limit`). */
  waitingBatches: TenantBatch[];
}

/** Largest per-tenant limit (PostgreSQL integer). */
export const MAX_TENANT_LIMIT = NO_LIMIT;

/**
 * A tenant's counts, limit and open batches. A tenant that never had a batch or a limit reads
 * as all zeros. `defaultMaxRunning` is the runner's default (`maxRunning`; undefined: no limit);
 * `limit` bounds each list (default 100).
 */
export async function getTenant(
  sql: Sql,
  tenant: string,
  options: { defaultMaxRunning?: number; limit?: number } = {},
): Promise<TenantInfo> {
  const limit = options.limit ?? 100;
  const [row, running, waiting] = await Promise.all([
    q.tenantState(sql, tenant),
    q.tenantBatches(sql, tenant, { running: true, limit }),
    q.tenantBatches(sql, tenant, { running: false, limit }),
  ]);
  const own = row?.max_running ?? null;
  const fallback =
    options.defaultMaxRunning === undefined || options.defaultMaxRunning >= NO_LIMIT ? null : options.defaultMaxRunning;
  const toBatch = (r: q.TenantBatchRow): TenantBatch => ({
    id: r.id,
    datasource: r.datasource,
    job: r.job,
    priority: r.priority,
    createdAt: r.created_at,
    since: r.since,
    forMs: r.for_ms,
    liveRuns: r.live_runs,
    target: r.target,
  });
  return {
    tenant,
    running: row?.running ?? 0,
    waiting: row?.wanting ?? 0,
    maxRunning: own,
    effectiveMaxRunning: own ?? fallback,
    oldestWaitMs: row?.oldest_wait_ms ?? null,
    runningBatches: running.map(toBatch),
    waitingBatches: waiting.map(toBatch),
  };
}

/**
 * Set a tenant's limit on runs (0 pauses it: no new run starts), or with null go back to the
 * default. Batches beyond the limit wait; a lower limit stops no run (docs/design.md, "Tenant
 * fairness" and "Fan-out").
 * @throws {InvalidBatchError} not null and not an integer from 0 to {@link MAX_TENANT_LIMIT}.
 */
export async function setTenantLimit(sql: Sql, tenant: string, maxRunning: number | null): Promise<void> {
  if (maxRunning !== null && !(Number.isInteger(maxRunning) && maxRunning >= 0 && maxRunning <= MAX_TENANT_LIMIT)) {
    throw new InvalidBatchError(
      `maxRunning must be null or an integer from 0 to ${MAX_TENANT_LIMIT} (got ${String(maxRunning)})`,
    );
  }
  await q.setTenantLimit(sql, tenant, maxRunning);
}
