// The reads of usage rows (leasehold_run_usage; docs/design.md, "Usage and cost"): a batch's, many
// batches', a tenant's, summed per architecture. Apart from the writes a worker's runs make
// (usage.ts), so a cold start does not load them (the API and the event senders read them).
import type { Sql } from '../../store/index.js';

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
