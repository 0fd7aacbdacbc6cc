// Statements of writing a finished batch's results (leasehold_batches.results…,
// leasehold_items; docs/design.md, "Sources and results"). Only finished batches (succeeded or
// failed) are touched, whose items no run changes any more.
import type { Sql } from '../../store/index.js';
import { storableText } from '../values.js';
import type { BatchStatus, ItemResult } from '../types.js';

/** A batch whose results a writer took on. */
export interface ResultsJob {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  status: BatchStatus;
  total: number;
  finished_at: Date;
  results: { s3: { bucket: string; prefix: string } };
  /** Writes begun, this one included. */
  results_tries: number;
  /** The batch's W3C trace context (migration 037), or null: the write's span joins its trace. */
  trace_context: string | null;
}

/**
 * Writes of one batch's results begun before it is no longer due (the run's, then the
 * scheduler's). Written as a literal in the statements below and in the partial index of
 * migration 022, which must say the same number.
 */
export const RESULTS_MAX_TRIES = 8;

// Takes on writing batch `id`'s results: a finished batch with a results target, no manifest
// yet and tries left, that no writer began within the last `leaseMs` (database clock), stamped
// as begun now with one more try counted. Answers undefined when there is nothing to write, or
// another writer is at it.
export async function beginResults(sql: Sql, id: string, leaseMs: number): Promise<ResultsJob | undefined> {
  const [r] = await sql<ResultsJob[]>`update leasehold_batches
    set results_started_at = now(), results_tries = results_tries + 1
    where id = ${id} and results is not null and results_manifest is null and results_tries < 8
      and status in ('succeeded', 'failed')
      and (results_started_at is null or results_started_at < now() - make_interval(secs => ${leaseMs / 1000}))
    returning id, tenant, datasource, job, status, total, finished_at, results, results_tries, trace_context`;
  return r;
}

// Finished batches whose results are due (no manifest, tries left, no writer within `leaseMs`),
// oldest finished first, through the partial index of migration 022; reads only.
export async function dueResults(sql: Sql, leaseMs: number, limit: number): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`select id from leasehold_batches
    where results is not null and results_manifest is null and results_tries < 8 and status in ('succeeded', 'failed')
      and (results_started_at is null or results_started_at < now() - make_interval(secs => ${leaseMs / 1000}))
    order by finished_at
    limit ${limit}`;
  return rows.map((r) => r.id);
}

// Records why a write of batch `id`'s results failed, and ends its writer's claim, so the next
// pass may try again at once (while tries are left); a batch whose manifest is written is not
// touched.
export async function resultsFailed(sql: Sql, id: string, error: string): Promise<void> {
  await sql`update leasehold_batches set results_error = ${storableText(error, 1000)}, results_started_at = null
    where id = ${id} and results_manifest is null`;
}

// One page of a batch's items in key order after `after` (exclusive): the primary key's range
// from (batch, after) on, `limit` entries, kept while they are the batch's (see itemsPageStatement).
export async function resultsPage(sql: Sql, batchId: string, after: string | null, limit: number): Promise<ItemResult[]> {
  const from = after === null ? sql`>= (${batchId}::uuid, '')` : sql`> (${batchId}::uuid, ${after})`;
  return sql<ItemResult[]>`select key, state, attempts, output, error from (
      select batch_id, key, state, attempts, output, error from leasehold_items
      where (batch_id, key) ${from}
      order by batch_id, key limit ${limit}
    ) p
    where p.batch_id = ${batchId}
    order by key`;
}

// Records the manifest's location once it is written (the last step), clearing the error of an
// earlier try; a second writer's record changes nothing.
export async function recordManifest(sql: Sql, id: string, location: string): Promise<void> {
  await sql`update leasehold_batches set results_manifest = ${location}, results_error = null
    where id = ${id} and results_manifest is null`;
}
