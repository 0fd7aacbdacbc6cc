// Statements of tenants (leasehold_tenants): their counts, limits and waiting batches
// (docs/design.md, "Tenant fairness").
import type { Sql } from '../../store/index.js';

export interface TenantRow {
  tenant: string;
  open: number;
  /** Live runs of its open batches. */
  running: number;
  /** Open batches below their target. */
  wanting: number;
  max_running: number | null;
  /** ms since the longest-waiting batch began to wait (start or handoff), database clock; null: none. */
  oldest_wait_ms: number | null;
}

// Reads a tenant's counts, its limit override and its oldest wait; undefined: no such tenant.
export async function tenantState(sql: Sql, tenant: string): Promise<TenantRow | undefined> {
  const [r] = await sql<TenantRow[]>`${tenantStateStatement(sql, tenant)}`;
  return r;
}

/** The read of {@link tenantState} as a fragment (the plan test reads its plan with EXPLAIN). */
export function tenantStateStatement(sql: Sql, tenant: string) {
  return sql`select t.tenant, t.open, t.running, t.wanting, t.max_running,
      (select (extract(epoch from now() - min(coalesce(b.handed_off_at, b.created_at))) * 1000)::float8
        from leasehold_batches b where b.tenant = t.tenant and b.status = 'open' and b.live_runs < b.target) as oldest_wait_ms
    from leasehold_tenants t where t.tenant = ${tenant}`;
}

/** One open batch of a tenant, as {@link tenantBatches} lists it. */
export interface TenantBatchRow {
  id: string;
  datasource: string;
  job: string;
  priority: number;
  created_at: Date;
  /** Running: when a run last joined it; waiting: when it began to wait (start or handoff). */
  since: Date;
  /** Its live runs and its target. */
  live_runs: number;
  target: number;
  /** ms since `since`, database clock. */
  for_ms: number;
}

// Lists a tenant's running batches (with a live run; oldest join first) or waiting batches
// (below their target, in the order its turns take them: priority, then age), at most `limit`.
export async function tenantBatches(sql: Sql, tenant: string, a: { running: boolean; limit: number }): Promise<TenantBatchRow[]> {
  return sql<TenantBatchRow[]>`${tenantBatchesStatement(sql, tenant, a)}`;
}

/** The read of {@link tenantBatches} as a fragment (the plan test reads its plan with EXPLAIN). */
export function tenantBatchesStatement(sql: Sql, tenant: string, a: { running: boolean; limit: number }) {
  return a.running
    ? sql`select id, datasource, job, priority, created_at, taken_at as since, live_runs, target,
          (extract(epoch from now() - taken_at) * 1000)::float8 as for_ms
        from leasehold_batches where tenant = ${tenant} and status = 'open' and live_runs > 0
        order by taken_at, id limit ${a.limit}`
    : sql`select id, datasource, job, priority, created_at, coalesce(handed_off_at, created_at) as since,
          live_runs, target, (extract(epoch from now() - coalesce(handed_off_at, created_at)) * 1000)::float8 as for_ms
        from leasehold_batches where tenant = ${tenant} and status = 'open' and live_runs < target
        order by priority desc, created_at, id limit ${a.limit}`;
}

// Sets (or, with null, clears) a tenant's limit on runs; creates its row if needed.
export async function setTenantLimit(sql: Sql, tenant: string, maxRunning: number | null): Promise<void> {
  await sql`insert into leasehold_tenants (tenant, max_running) values (${tenant}, ${maxRunning})
    on conflict (tenant) do update set max_running = excluded.max_running`;
}
