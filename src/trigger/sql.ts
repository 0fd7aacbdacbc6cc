// Statements of the trigger's own table: scheduled firings deferred until their datasource has
// a free slot (leasehold_deferred_starts, migration 006).
import type { ToleratedFailures } from '../batch/index.js';
import type { Sql } from '../store/index.js';

/** A firing waiting for a slot. */
export interface DeferredStartRow {
  tenant: string;
  request_key: string;
  datasource: string;
  job: string;
  params: Record<string, unknown>;
  /** The tolerance the event asked for (migration 012); null: none. */
  tolerated_failures: ToleratedFailures | null;
  /** The maxConcurrency the event asked for (migration 016); null: the default. */
  max_concurrency: number | null;
  tries: number;
}

// Keeps a refused firing once per (tenant, request key): a redelivered event adds nothing.
export async function deferStart(
  sql: Sql,
  d: {
    tenant: string;
    requestKey: string;
    datasource: string;
    job: string;
    params: Record<string, unknown>;
    toleratedFailures: ToleratedFailures | null;
    maxConcurrency: number | null;
    error: string;
  },
): Promise<boolean> {
  const rows = await sql`insert into leasehold_deferred_starts
      (tenant, request_key, datasource, job, params, tolerated_failures, max_concurrency, last_error)
    values (${d.tenant}, ${d.requestKey}, ${d.datasource}, ${d.job}, ${sql.json(d.params as never)},
      ${d.toleratedFailures === null ? null : sql.json(d.toleratedFailures as never)}, ${d.maxConcurrency}, ${d.error})
    on conflict (tenant, request_key) do nothing`;
  return rows.count === 1;
}

// The oldest deferred firings; reads only.
export function deferredStarts(sql: Sql, limit: number): Promise<DeferredStartRow[]> {
  return sql<DeferredStartRow[]>`select tenant, request_key, datasource, job, params, tolerated_failures, max_concurrency, tries
    from leasehold_deferred_starts order by created_at, tenant, request_key limit ${limit}`;
}

// Forgets a deferred firing once its batch exists (or it can never start).
export async function forgetDeferred(sql: Sql, tenant: string, requestKey: string): Promise<void> {
  await sql`delete from leasehold_deferred_starts where tenant = ${tenant} and request_key = ${requestKey}`;
}

// Counts a start refused again, with why.
export async function deferredRefused(sql: Sql, tenant: string, requestKey: string, error: string): Promise<void> {
  await sql`update leasehold_deferred_starts set tries = tries + 1, last_error = ${error}
    where tenant = ${tenant} and request_key = ${requestKey}`;
}

// How many firings wait; reads only.
export async function countDeferred(sql: Sql): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*) as n from leasehold_deferred_starts`;
  return r.n;
}
