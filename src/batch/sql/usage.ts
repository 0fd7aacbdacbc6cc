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
