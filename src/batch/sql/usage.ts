// Statements of usage (leasehold_run_usage, migration 038; docs/design.md, "Usage and cost"): a
// run's one row, written at its end, and the sums per batch and per tenant over a time range.
// Nothing here runs per item. The row of a run that died is written by the takeover that
// replaced it (runs.ts, `takeOverStatement`), from its start to its last beat.
import type { Sql } from '../../store/index.js';

/** One run's figures as it stores them at its end. */
export interface RunUsageRow {
  runId: string;
  batchId: string;
  tenant: string;
  process: string;
  /** The worker time the run used, ms (its share of its invocation while it ran). */
  workerMs: number;
  memoryMb: number;
  architecture: 'x86_64' | 'arm64';
  /** Item attempts the run started. */
  items: number;
  s3Get: number;
  s3Put: number;
  s3List: number;
}

// Stores a run's figures once. A takeover that found the run dead may have stored an estimate
// (from its last beat) first: the run's own figures replace it; a second report of the run
// changes nothing.
export async function recordRunUsage(sql: Sql, u: RunUsageRow): Promise<void> {
  await sql`insert into leasehold_run_usage
      (run_id, batch_id, tenant, process, worker_ms, memory_mb, architecture, items, s3_get, s3_put, s3_list)
    values (${u.runId}, ${u.batchId}, ${u.tenant}, ${u.process}, ${u.workerMs}, ${u.memoryMb}, ${u.architecture},
      ${u.items}, ${u.s3Get}, ${u.s3Put}, ${u.s3List})
    on conflict (run_id) do update set worker_ms = excluded.worker_ms, memory_mb = excluded.memory_mb,
      architecture = excluded.architecture, items = excluded.items, s3_get = excluded.s3_get,
      s3_put = excluded.s3_put, s3_list = excluded.s3_list, died = false, recorded_at = now()
    where leasehold_run_usage.died`;
}

// Adds the idle time a process had after its last run ended, up to its end, to that run's row
// (docs/design.md, "Usage and cost"): one statement per process, at its end. A row not stored
// (its insert failed) is left as it is.
export async function addRunWorkerMs(sql: Sql, runId: string, ms: number): Promise<void> {
  await sql`update leasehold_run_usage set worker_ms = worker_ms + ${ms}::float8 where run_id = ${runId}`;
}

/** Sums of usage rows of one architecture (what {@link batchUsage} and {@link tenantUsage} read). */
export interface UsageSumRow {
  architecture: 'x86_64' | 'arm64';
  runs: number;
  died: number;
  invocations: number;
  worker_ms: number;
  gb_seconds: number;
  items: number;
  s3_get: number;
  s3_put: number;
  s3_list: number;
}

// The sums of a set of usage rows (`u`), one row per architecture.
function sums(sql: Sql) {
  return sql`u.architecture, count(*)::int as runs, (count(*) filter (where u.died))::int as died,
    count(distinct u.process)::int as invocations, sum(u.worker_ms)::float8 as worker_ms,
    (sum(u.worker_ms * u.memory_mb) / 1024 / 1000)::float8 as gb_seconds, sum(u.items)::float8 as items,
    sum(u.s3_get)::float8 as s3_get, sum(u.s3_put)::float8 as s3_put, sum(u.s3_list)::float8 as s3_list`;
}

// A batch's usage so far, per architecture: its run rows (index on batch_id).
export async function batchUsage(sql: Sql, batchId: string): Promise<UsageSumRow[]> {
  return sql<UsageSumRow[]>`select ${sums(sql)} from leasehold_run_usage u
    where u.batch_id = ${batchId} group by u.architecture order by u.architecture`;
}

// The usage of many batches at once (a list's page, the events of a send): one statement.
export async function batchesUsage(sql: Sql, batchIds: readonly string[]): Promise<(UsageSumRow & { batch_id: string })[]> {
  if (batchIds.length === 0) return [];
  return sql<(UsageSumRow & { batch_id: string })[]>`select u.batch_id, ${sums(sql)} from leasehold_run_usage u
    where u.batch_id in (select x::uuid from jsonb_array_elements_text(${sql.json(batchIds as string[])}) as x)
    group by u.batch_id, u.architecture order by u.batch_id, u.architecture`;
}

// A tenant's usage recorded in [from, to) (instants the caller gives; the index on
// (tenant, recorded_at)), per architecture, with the range as the database took it: `to`
// defaults to now() and `from` to 30 days before `to`.
export async function tenantUsage(
  sql: Sql,
  a: { tenant: string; from?: Date; to?: Date },
): Promise<{ from: Date; to: Date; rows: UsageSumRow[] }> {
  const rows = await sql<(UsageSumRow & { range_from: Date; range_to: Date })[]>`
    with range as (
      select coalesce(${a.from ?? null}::timestamptz, coalesce(${a.to ?? null}::timestamptz, now()) - interval '30 days') as f,
        coalesce(${a.to ?? null}::timestamptz, now()) as t
    ), s as (
      select ${sums(sql)} from leasehold_run_usage u, range
      where u.tenant = ${a.tenant} and u.recorded_at >= range.f and u.recorded_at < range.t
      group by u.architecture
    )
    select range.f as range_from, range.t as range_to, s.* from range left join s on true order by s.architecture`;
  const first = rows[0]!;
  return { from: first.range_from, to: first.range_to, rows: rows.filter((r) => r.architecture !== null) };
}
