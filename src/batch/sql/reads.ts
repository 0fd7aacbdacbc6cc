// The reads of batches and their items (leasehold_batches, leasehold_items, leasehold_runs): one
// batch, a page of batches, the runs of open batches, a page of a batch's items and a stream of
// all of them. They change nothing and take no lock; each is bounded by its own limit (a page's
// size, one batch's items) whatever the planner estimates (docs/design.md, "The database in
// production"). A finished batch's counts are read from its row, an open one's from its items.
import type { Sql } from '../../store/index.js';
import type { BatchInfo, BatchStatus, ItemResult, ItemState } from '../types.js';
import { toInfo, type BatchRow } from './shared.js';

// A batch row `b`'s live runs, oldest first, as one json array (null when none).
function runList(sql: Sql) {
  return sql`(select json_agg(json_build_object('id', r.id, 'process', r.process, 'started_at', r.started_at,
      'beat_at', r.beat_at, 'settled', r.settled, 'age_ms', extract(epoch from now() - r.started_at) * 1000)
      order by r.started_at, r.id)
    from leasehold_runs r where r.batch_id = b.id) as run_list`;
}

// A batch's item counts by state as one jsonb object, counted from its items (one index range of
// the batch, bounded by its own size): `id` is the batch id expression.
function countItems(sql: Sql, id: ReturnType<Sql>) {
  return sql`(select jsonb_object_agg(s.state, s.n) from
    (select state, count(*) as n from leasehold_items where batch_id = ${id} group by state) s)`;
}

// The counts of batch row `b`: those stored when it finished, else counted from its items.
function batchCounts(sql: Sql) {
  return sql`coalesce(b.final_counts, ${countItems(sql, sql`b.id`)}) as counts`;
}

// Reads one batch with its item counts.
export async function getBatch(sql: Sql, id: string): Promise<BatchInfo | undefined> {
  const [r] = await sql<BatchRow[]>`${getBatchStatement(sql, { id })}`;
  return r && toInfo(r);
}

/** {@link getBatch} as a fragment (the plan test reads its plan). */
export function getBatchStatement(sql: Sql, { id }: { id: string }) {
  return sql`select b.*, ${batchCounts(sql)}, ${runList(sql)} from leasehold_batches b where b.id = ${id}`;
}

/** What {@link listBatches} takes: optional filters and the page size. */
export interface ListArgs {
  tenant?: string;
  status?: BatchStatus;
  limit: number;
}

// Lists batches, newest first, optionally by tenant and status.
export async function listBatches(sql: Sql, f: ListArgs): Promise<BatchInfo[]> {
  const rows = await sql<BatchRow[]>`${listBatchesStatement(sql, f)}`;
  return rows.map(toInfo);
}

/**
 * {@link listBatches} as a fragment. Each filter combination is its own statement with its own
 * index in `created_at desc, id` order (migration 015), so a page reads `limit` batch rows; a
 * finished batch's counts are read from its row, an open one's from its items.
 */
export function listBatchesStatement(sql: Sql, f: ListArgs) {
  const where =
    f.tenant !== undefined && f.status !== undefined
      ? sql`where b.tenant = ${f.tenant} and b.status = ${f.status}`
      : f.tenant !== undefined
        ? sql`where b.tenant = ${f.tenant}`
        : f.status !== undefined
          ? sql`where b.status = ${f.status}`
          : sql``;
  return sql`select b.*, ${batchCounts(sql)}, ${runList(sql)} from leasehold_batches b ${where}
    order by b.created_at desc, b.id
    limit ${f.limit}`;
}

/** The runs of open batches, as the scheduler reports them. */
export interface RunsSummary {
  /** Open batches with at least one live run. */
  batches: number;
  /** Live runs of all open batches. */
  runs: number;
  /** Most live runs of one open batch. */
  maxPerBatch: number;
}

// Reads the runs of open batches from their rows (the open batches' partial index).
export async function runsSummary(sql: Sql): Promise<RunsSummary> {
  const [r] = await sql<RunsSummary[]>`select count(*) filter (where live_runs > 0)::int as batches,
      coalesce(sum(live_runs), 0)::int as runs, coalesce(max(live_runs), 0)::int as "maxPerBatch"
    from leasehold_batches where status = 'open'`;
  return r;
}

// Counts open batches (any tenant); the scheduler scales to zero on 0.
export async function countAllOpen(sql: Sql): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*) as n from leasehold_batches where status = 'open'`;
  return r.n;
}

// Reads one page of a batch's items in key order, after key `after` (exclusive), optionally
// only those in one state.
export async function itemsPage(sql: Sql, batchId: string, a: PageArgs): Promise<ItemResult[]> {
  return sql<ItemResult[]>`${itemsPageStatement(sql, { batchId, ...a })}`;
}

/** What {@link itemsPage} takes: the key to start after (exclusive), the page size, a state. */
export interface PageArgs {
  after?: string;
  limit: number;
  state?: ItemState;
}

/**
 * {@link itemsPage} as a fragment. A page of all states reads the primary key from
 * `(batch, after)` on, in its order, `limit` entries at most (the range is open at its end, so
 * no planner estimate of the batch's size makes a bitmap of the whole batch and a sort cheaper),
 * and keeps those of the batch. The failed items of a page are read through their partial index
 * (`leasehold_items_failed`, in key order); pages of another state walk the primary key from
 * `after`, skipping items of other states (bounded by the batch).
 */
export function itemsPageStatement(sql: Sql, a: PageArgs & { batchId: string }) {
  if (a.state === undefined) {
    const from = a.after === undefined ? sql`>= (${a.batchId}::uuid, '')` : sql`> (${a.batchId}::uuid, ${a.after})`;
    return sql`select key, state, attempts, output, error, progress, heartbeat_at as "heartbeatAt" from (
        select batch_id, key, state, attempts, output, error, progress, heartbeat_at from leasehold_items
        where (batch_id, key) ${from}
        order by batch_id, key limit ${a.limit}
      ) p
      where p.batch_id = ${a.batchId}
      order by key`;
  }
  const after = a.after === undefined ? sql`` : sql`and key > ${a.after}`;
  const state = a.state === 'failed' ? sql`and state = 'failed'` : sql`and state = ${a.state}`;
  return sql`select key, state, attempts, output, error, progress, heartbeat_at as "heartbeatAt" from leasehold_items
    where batch_id = ${a.batchId} ${after} ${state}
    order by key limit ${a.limit}`;
}

// Streams the items of a batch in key order, `size` rows at a time.
export function itemResults(sql: Sql, batchId: string, size = 1000): AsyncIterable<ItemResult[]> {
  return sql<ItemResult[]>`select key, state, attempts, output, error from leasehold_items
    where batch_id = ${batchId} order by key`.cursor(size);
}
