// The reads of batches and their items (leasehold_batches, leasehold_items, leasehold_runs): one
// batch, a page of batches, the runs of open batches, a page of a batch's items and a stream of
// all of them. They change nothing and take no lock; each is bounded by its own limit (a page's
// size, one batch's items) whatever the planner estimates (docs/design.md, "The database in
// production"). A finished batch's counts are read from its row, an open one's from its items.
import type { Sql } from '../../store/index.js';
import type { BatchInfo, BatchStatus, ItemResult, ItemState, ItemWait } from '../types.js';
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
  /** A stored status, or `running` / `paused`: an open batch not paused / paused. */
  status?: BatchStatus | 'running' | 'paused';
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
  // `running` and `paused` read the open batches' index and keep those (not) paused.
  const status = f.status === 'running' || f.status === 'paused' ? 'open' : f.status;
  const paused =
    f.status === 'paused' ? sql`and b.paused_at is not null` : f.status === 'running' ? sql`and b.paused_at is null` : sql``;
  const where =
    f.tenant !== undefined && status !== undefined
      ? sql`where b.tenant = ${f.tenant} and b.status = ${status} ${paused}`
      : f.tenant !== undefined
        ? sql`where b.tenant = ${f.tenant}`
        : status !== undefined
          ? sql`where b.status = ${status} ${paused}`
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
// only those in one state; a waiting item with its wait's deadlines.
export async function itemsPage(sql: Sql, batchId: string, a: PageArgs): Promise<ItemResult[]> {
  const rows = await sql<PageRow[]>`${itemsPageStatement(sql, { batchId, ...a })}`;
  return rows.map(({ waitKind, waitWakeAt, waitTimeoutAt, waitHeartbeatBy, ...item }) => ({
    ...item,
    wait:
      waitKind === null ? null : { kind: waitKind, wakeAt: waitWakeAt!, timeoutAt: waitTimeoutAt, heartbeatBy: waitHeartbeatBy },
  }));
}

/** A row of {@link itemsPageStatement}: the item, and its wait's columns (null unless it waits). */
type PageRow = Omit<ItemResult, 'wait'> & {
  waitKind: ItemWait['kind'] | null;
  waitWakeAt: Date | null;
  waitTimeoutAt: Date | null;
  waitHeartbeatBy: Date | null;
};

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
 * (`leasehold_items_failed`, in key order), the waiting ones through the batch's wait rows
 * (`leasehold_waits`' primary key, in key order); pages of another state walk the primary key
 * from `after`, skipping items of other states (bounded by the batch).
 */
export function itemsPageStatement(sql: Sql, a: PageArgs & { batchId: string }) {
  // A waiting item's wait row, on its whole primary key (one probe per waiting item of the page).
  const wait = sql`left join lateral (
      select w.kind, w.wake_at, w.timeout_at, w.heartbeat_timeout_ms from leasehold_waits w
      where w.batch_id = p.batch_id and w.key = p.key and p.state = 'waiting' limit 1
    ) w on true`;
  const columns = sql`p.key, p.state, p.attempts, p.output, p.error, p.progress, p.heartbeat_at as "heartbeatAt",
    w.kind as "waitKind", w.wake_at as "waitWakeAt", w.timeout_at as "waitTimeoutAt",
    case when w.heartbeat_timeout_ms is not null then w.wake_at end as "waitHeartbeatBy"`;
  if (a.state === undefined) {
    const from = a.after === undefined ? sql`>= (${a.batchId}::uuid, '')` : sql`> (${a.batchId}::uuid, ${a.after})`;
    return sql`select ${columns} from (
        select batch_id, key, state, attempts, output, error, progress, heartbeat_at from leasehold_items
        where (batch_id, key) ${from}
        order by batch_id, key limit ${a.limit}
      ) p
      ${wait}
      where p.batch_id = ${a.batchId}
      order by p.key`;
  }
  if (a.state === 'waiting') {
    // The waiting items are the batch's wait rows (their primary key's range, in key order), each
    // joined to its item on the whole key while it waits: the page reads its own size, where the
    // items (with no index on `waiting`) would be read for the whole batch.
    const from = a.after === undefined ? sql`>= (${a.batchId}::uuid, '')` : sql`> (${a.batchId}::uuid, ${a.after})`;
    return sql`select ${columns} from (
        select w.batch_id, w.key, i.state, i.attempts, i.output, i.error, i.progress, i.heartbeat_at,
          w.kind, w.wake_at, w.timeout_at, w.heartbeat_timeout_ms
        from leasehold_waits w
        cross join lateral (
          select x.state, x.attempts, x.output, x.error, x.progress, x.heartbeat_at from leasehold_items x
          where x.batch_id = w.batch_id and x.key = w.key and x.state = 'waiting' limit 1
        ) i
        where (w.batch_id, w.key) ${from} and w.batch_id = ${a.batchId}
        order by w.batch_id, w.key limit ${a.limit}
      ) p
      cross join lateral (select p.kind, p.wake_at, p.timeout_at, p.heartbeat_timeout_ms) w
      order by p.key`;
  }
  const after = a.after === undefined ? sql`` : sql`and key > ${a.after}`;
  const state = a.state === 'failed' ? sql`and state = 'failed'` : sql`and state = ${a.state}`;
  return sql`select ${columns} from (
      select batch_id, key, state, attempts, output, error, progress, heartbeat_at from leasehold_items
      where batch_id = ${a.batchId} ${after} ${state}
      order by key limit ${a.limit}
    ) p
    ${wait}
    order by p.key`;
}

// Streams the items of a batch in key order, `size` rows at a time.
export function itemResults(sql: Sql, batchId: string, size = 1000): AsyncIterable<ItemResult[]> {
  return sql<ItemResult[]>`select key, state, attempts, output, error from leasehold_items
    where batch_id = ${batchId} order by key`.cursor(size);
}
