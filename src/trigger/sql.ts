// Statements of the trigger's own table: scheduled firings deferred until their datasource has
// a free slot (leasehold_deferred_starts, migration 006; start_by, migration 030; trace_context, migration 042).
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
  /** Not started by this instant, it is dropped (migration 030); null: it waits as long as it takes. */
  start_by: Date | null;
  /** The caller's W3C trace context the firing came with (migration 042); null: none. */
  trace_context: string | null;
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
    startBy?: Date | null;
    /** The caller's W3C `traceparent`, kept for the start that follows (docs/design.md, "Traces"). */
    traceparent?: string | null;
    error: string;
  },
): Promise<boolean> {
  const rows = await sql`insert into leasehold_deferred_starts
      (tenant, request_key, datasource, job, params, tolerated_failures, max_concurrency, start_by, trace_context, last_error)
    values (${d.tenant}, ${d.requestKey}, ${d.datasource}, ${d.job}, ${sql.json(d.params as never)},
      ${d.toleratedFailures === null ? null : sql.json(d.toleratedFailures as never)}, ${d.maxConcurrency},
      ${d.startBy ?? null}::timestamptz, ${d.traceparent ?? null}, ${d.error})
    on conflict (tenant, request_key) do nothing`;
  return rows.count === 1;
}

// The oldest deferred firings; reads only.
export function deferredStarts(sql: Sql, limit: number): Promise<DeferredStartRow[]> {
  return sql<DeferredStartRow[]>`select tenant, request_key, datasource, job, params, tolerated_failures, max_concurrency,
      start_by, trace_context, tries
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

// Deletes the deferred firings whose start_by has passed (database clock) and answers them. The
// table holds only firings waiting for a slot (a few), so this reads it whole.
export async function dropLateDeferred(
  sql: Sql,
): Promise<{ tenant: string; request_key: string; datasource: string; start_by: Date }[]> {
  return sql<{ tenant: string; request_key: string; datasource: string; start_by: Date }[]>`delete from leasehold_deferred_starts
    where start_by is not null and start_by <= now()
    returning tenant, request_key, datasource, start_by`;
}

// Whether the instant `at` has passed by the database clock; reads nothing.
export async function passed(sql: Sql, at: Date): Promise<boolean> {
  const [r] = await sql<{ passed: boolean }[]>`select ${at}::timestamptz <= now() as passed`;
  return r.passed;
}
