// Statements of batches, their items and their runs (leasehold_batches, leasehold_items,
// leasehold_runs and the locks of a start): starts, reads, runs, dispatch. Each fenced statement
// changes rows only while the run named by `run` holds its lease: its row in leasehold_runs
// exists, locked by the statement (docs/design.md, "Fan-out"). Every end of a batch (cancel,
// finish, give-up, tolerance) deletes all its run rows first and writes its Batch Finished event
// last, in the same transaction (sql/events.ts), and every statement that changes
// both locks the run rows before the batch row (and the batch row before its tenant's row, in
// the trigger), so moves, takeovers and ends are ordered one after the other and never deadlock.
import type postgres from 'postgres';
import type { Sql } from '../../store/index.js';
import type { BatchInfo, BatchStatus, ItemResult, ItemState, RunInfo, ToleratedFailures } from '../types.js';
import { writeEndEvent } from './events.js';

/** A row of `leasehold_batches` joined with its item counts. */
interface BatchRow {
  id: string;
  tenant: string;
  datasource: string;
  job: string;
  params: unknown;
  request_key: string;
  priority: number;
  status: BatchStatus;
  total: number;
  runs: number;
  max_concurrency: number;
  target: number;
  live_runs: number;
  /** The batch's live runs, oldest first (json_agg: times as ISO text); null when none. */
  run_list: RunRow[] | null;
  stalled_runs: number;
  reason: string | null;
  notify_url: string | null;
  redrives: number;
  tolerated_count: number | null;
  /** numeric: postgres.js reads it as a string. */
  tolerated_percent: string | null;
  allowed_failures: number | null;
  timeout_ms: number | null;
  rate_per_second: number | null;
  created_at: Date;
  finished_at: Date | null;
  counts: Partial<Record<ItemState, number>> | null;
  source: unknown;
  reading: boolean;
  source_pages: number;
  source_error_line: string | null;
  results: unknown;
  results_manifest: string | null;
  results_error: string | null;
}

/** A run as `run_list` carries it. */
interface RunRow {
  id: string;
  process: string;
  started_at: string;
  beat_at: string;
  settled: number;
  /** ms since the run started, database clock. */
  age_ms: number;
}

function toRun(r: RunRow): RunInfo {
  return {
    id: r.id,
    process: r.process,
    startedAt: new Date(r.started_at),
    beatAt: new Date(r.beat_at),
    settled: Number(r.settled),
    itemsPerSecond: r.age_ms > 0 ? Math.round((Number(r.settled) / r.age_ms) * 1000 * 10) / 10 : 0,
  };
}

function toInfo(r: BatchRow): BatchInfo {
  const c = r.counts ?? {};
  const runList = (r.run_list ?? []).map(toRun);
  return {
    id: r.id,
    tenant: r.tenant,
    datasource: r.datasource,
    job: r.job,
    params: r.params,
    requestKey: r.request_key,
    priority: r.priority,
    status: r.status,
    total: r.total,
    counts: { pending: c.pending ?? 0, running: c.running ?? 0, done: c.done ?? 0, failed: c.failed ?? 0 },
    ownerProcess: runList[0]?.process ?? null,
    runs: r.runs,
    maxConcurrency: r.max_concurrency,
    target: r.target,
    liveRuns: r.live_runs,
    runList,
    stalledRuns: r.stalled_runs,
    reason: r.reason,
    notify: r.notify_url === null || r.notify_url === undefined ? null : { url: r.notify_url },
    redrives: r.redrives,
    toleratedFailures:
      r.tolerated_count !== null
        ? { count: r.tolerated_count }
        : r.tolerated_percent !== null
          ? { percent: Number(r.tolerated_percent) }
          : null,
    allowedFailures: r.allowed_failures,
    timeoutMs: r.timeout_ms,
    ratePerSecond: r.rate_per_second ?? null,
    createdAt: r.created_at,
    beatAt: runList.reduce<Date | null>((at, x) => (at === null || x.beatAt > at ? x.beatAt : at), null),
    finishedAt: r.finished_at,
    source: (r.source ?? null) as BatchInfo['source'],
    reading: r.reading ?? false,
    sourcePages: r.source_pages ?? 0,
    sourceErrorLine: r.source_error_line === null || r.source_error_line === undefined ? null : Number(r.source_error_line),
    results: (r.results ?? null) as BatchInfo['results'],
    resultsManifest: r.results_manifest ?? null,
    resultsError: r.results_error ?? null,
  };
}

/** A claimed item. */
export interface ClaimedRow {
  key: string;
  input: unknown;
  attempts: number;
  /** Waits a downstream asked for (Retry-After) that used no attempt, so far. */
  waits: number;
  /** ms until it is due (database clock) when claimed ahead of its time; 0 when due. */
  due_in_ms: number;
  /**
   * The state its work last stored with `checkpoint` (docs/design.md, "Item heartbeats and
   * checkpoints"); null when none. Absent from rows claimed by statements that do not read it.
   */
  checkpoint?: unknown;
}

/** One move of an item the run claimed at `claimed` attempts. */
export interface MoveRow {
  key: string;
  state: ItemState;
  /** attempts when the item was claimed (the expected state is running at this count). */
  claimed: number;
  /** attempts after the move (claimed, or claimed − 1 when the attempt is given back). */
  attempts: number;
  /** The item's output as JSON text, already checked to be storable; null for none. */
  output: string | null;
  /** Error text, already made storable (no NUL, no lone surrogate, bounded); null for none. */
  error: string | null;
  /** For a move back to pending: wait before the next claim, ms (clamped to {@link MAX_DELAY_MS}). */
  delayMs: number;
  /** The item's Retry-After waits after the move (docs/design.md, "Retry-After"); unset: unchanged. */
  waits?: number;
}

/** Longest retry delay any statement will write, ms (one day): no computed time can overflow. */
export const MAX_DELAY_MS = 86_400_000;

/**
 * Items per run the target counts: a batch wants one run per this many items, at most its
 * `maxConcurrency` (docs/design.md, "Fan-out"), so a 20-item batch wakes one worker.
 */
export const RUN_ITEMS = 100;

/** Moves as one statement parameter takes them (see {@link encodeMoves}). */
export interface EncodedMoves {
  /** One JSON array text, for `jsonb_to_recordset`. */
  json: string;
  /** The items' keys, as a JSON array text. */
  keys: string;
}

/**
 * The moves as one JSON array text, for `jsonb_to_recordset`, and their keys. Outputs are
 * embedded as the JSON text they already are, so no output is serialised twice.
 */
export function encodeMoves(moves: readonly MoveRow[]): EncodedMoves {
  return { json: movesJson(moves), keys: JSON.stringify(moves.map((m) => m.key)) };
}

function movesJson(moves: readonly MoveRow[]): string {
  let s = '[';
  for (let i = 0; i < moves.length; i++) {
    const m = moves[i];
    const delay = Number.isFinite(m.delayMs) ? Math.min(Math.max(m.delayMs, 0), MAX_DELAY_MS) : 0;
    s += `${i ? ',' : ''}{"key":${JSON.stringify(m.key)},"state":"${m.state}","claimed":${m.claimed},"attempts":${m.attempts},"output":${m.output ?? 'null'},"error":${m.error === null ? 'null' : JSON.stringify(m.error)},"delay_ms":${delay},"waits":${m.waits ?? 'null'}}`;
  }
  return `${s}]`;
}

export type Tx = Sql;

// Serialises starts with one (tenant, request key) until the first commits.
export async function lockRequestKey(tx: Tx, tenant: string, requestKey: string): Promise<void> {
  await tx`select pg_advisory_xact_lock(hashtextextended('leasehold:key:' || ${tenant} || ':' || ${requestKey}, 0))`;
}

// Takes the per-datasource row lock that serialises starts on one datasource.
export async function lockDatasource(tx: Tx, tenant: string, datasource: string): Promise<void> {
  await tx`insert into leasehold_datasources (tenant, datasource) values (${tenant}, ${datasource})
    on conflict (tenant, datasource) do update set tenant = excluded.tenant`;
}

// Reads the batch a request key started, if any.
export async function batchIdByKey(tx: Tx, tenant: string, requestKey: string): Promise<string | undefined> {
  const [r] = await tx<{ id: string }[]>`select id from leasehold_batches
    where tenant = ${tenant} and request_key = ${requestKey}`;
  return r?.id;
}

// Counts unfinished batches of a datasource (caller holds the datasource lock).
export async function countOpen(tx: Tx, tenant: string, datasource: string): Promise<number> {
  const [r] = await tx<{ n: number }[]>`select count(*) as n from leasehold_batches
    where tenant = ${tenant} and datasource = ${datasource} and status = 'open'`;
  return r.n;
}

// Inserts a batch unless its request key exists; returns the new id or undefined.
export async function insertBatch(
  tx: Tx,
  b: {
    tenant: string;
    datasource: string;
    job: string;
    params: unknown;
    requestKey: string;
    total: number;
    priority: number;
    toleratedFailures?: ToleratedFailures | null;
    maxConcurrency: number;
    /** The items' timeout, ms, when the start set one (it wins over the job's). */
    timeoutMs?: number | null;
    ratePerSecond?: number | null;
    notify?: { url: string } | null;
    /** A source read by the runs (the batch starts `reading`, with no items). */
    source?: unknown;
    /** Where results go when it finishes. */
    results?: unknown;
  },
): Promise<string | undefined> {
  const t = b.toleratedFailures;
  const count = t && 'count' in t ? t.count : null;
  // As text, cast to numeric: the percent is stored exactly as given.
  const percent = t && 'percent' in t ? String(t.percent) : null;
  const [r] = await tx<{ id: string }[]>`insert into leasehold_batches
      (tenant, datasource, job, params, request_key, total, priority, tolerated_count, tolerated_percent,
       max_concurrency, target, timeout_ms, rate_per_second, notify_url, source, reading, results)
    values (${b.tenant}, ${b.datasource}, ${b.job}, ${tx.json(b.params as never)}, ${b.requestKey}, ${b.total}, ${b.priority},
      ${count}::int, ${percent}::text::numeric, ${b.maxConcurrency},
      ${targetOf(tx, b.maxConcurrency, b.total)}, ${b.timeoutMs ?? null}::int, ${b.ratePerSecond ?? null}::float8,
      ${b.notify?.url ?? null}::text, ${b.source === undefined ? null : tx.json(b.source as never)}, ${b.source !== undefined},
      ${b.results === undefined ? null : tx.json(b.results as never)})
    on conflict (tenant, request_key) do nothing
    returning id`;
  return r?.id;
}

// Inserts one piece of a new batch's items, given as the JSON text of `[{"k": key, "i": input}]`
// (bounded by the caller); a key already in the batch fails the statement (primary key). The
// text is sent as text and cast here: a jsonb parameter would be serialised a second time.
export async function insertItemsPiece(tx: Tx, batchId: string, json: string): Promise<void> {
  await tx`insert into leasehold_items (batch_id, key, input)
    select ${batchId}, x.k, x.i from ${itemRows(tx, json)}`;
}

/**
 * The rows `x(k, i)` of the JSON text of `[{"k": key, "i": input}, …]`, for an insert of items:
 * `k` text, `i` jsonb (SQL null for a JSON null or no input, as the items' `input` has always
 * held them). The array is read as `json`, which PostgreSQL only checks, and each input alone is
 * made jsonb: building the whole array as jsonb first cost 3 times as much (250 of 330 ms for
 * 40,000 items of 100 bytes, on PostgreSQL 15), most of an insert's time.
 */
export function itemRows(sql: Sql | Tx, json: string) {
  return sql`(select e->>'k' as k, nullif((e->'i')::jsonb, 'null') as i from json_array_elements(${json}::text::json) as e) as x`;
}

// Records the item count of a batch being started (inside its start transaction), and the
// target that follows from it.
export async function setTotal(tx: Tx, batchId: string, total: number): Promise<void> {
  await tx`update leasehold_batches set total = ${total}, target = least(max_concurrency, greatest(1, ceil(${total} / ${RUN_ITEMS}::float8)::int))
    where id = ${batchId}`;
}

// The target of a batch of `total` items that may have `maxConcurrency` runs: one run per
// RUN_ITEMS items, at least 1, at most maxConcurrency (docs/design.md, "Fan-out").
function targetOf(sql: Sql, maxConcurrency: number, total: number) {
  return sql`least(${maxConcurrency}::int, greatest(1, ceil(${total} / ${RUN_ITEMS}::float8)::int))`;
}

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

// Cancels an open batch for good. Every run row of the batch is deleted first (each delete
// waits for the move in flight on it), then the batch row: a run's next fenced statement
// changes nothing. Items keep the state they had (a count of running items says what was
// running at the cancel). No counts are stored: a move the cancel waited for lands after the
// statement's snapshot, so the batch's counts are read from its items.
export async function cancelBatch(sql: Sql, id: string): Promise<BatchStatus | undefined> {
  return inTransaction(sql, async (t) => {
    const status = await cancelOnce(t, id);
    if (status) {
      await t`${endLateRuns(t, id)}`;
      await writeEndEvent(t, id);
    }
    return status;
  });
}

async function cancelOnce(sql: Sql, id: string): Promise<BatchStatus | undefined> {
  const [r] = await sql<{ status: BatchStatus }[]>`with gone as (
      delete from leasehold_runs where batch_id = ${id} returning 1
    )
    update leasehold_batches b
    set status = 'cancelled', finished_at = now(), live_runs = 0, reading = false
    where id = ${id} and status = 'open' and (select count(*) from gone) >= 0
    returning status`;
  return r?.status;
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

/** No per-tenant limit: the largest `max_running` a statement compares with. */
export const NO_LIMIT = 2_147_483_647;

/** A batch a takeover joined, with how long it waited for its first run. */
export type TakenBatch = BatchInfo & {
  /** ms from its start to this takeover when this is its first run (database clock); else null. */
  queueWaitMs: number | null;
  /** The stale run this one replaced (its running items count their attempt); null: a new run. */
  replaced: string | null;
};

// Starts one run of an open batch in one statement: the new run's row is inserted, and either
// a stale run of the batch is replaced (its row deleted) or the batch's live runs grow by one.
// The choice (docs/design.md, "Fan-out" and "Tenant fairness"):
// - `batchId`: a stale run of that batch, else a new run of it while it is below its target and
//   its tenant below its limit; with `orFairer`, the new run only while no other tenant with a
//   batch below target runs fewer runs (else the choice below); without it nothing else is taken;
// - else a stale run of any batch (beat older than staleMs, database clock): the slot is its own;
// - else a batch below its target of the tenant running the fewest runs, below its limit
//   (`max_running`, else `maxRunning`), longest unchanged first among equals; within the tenant,
//   highest priority, then oldest.
// Every row the choice may change is locked with skip locked (a tenant row, then its batch row;
// a stale run row with its batch row), so nothing here waits for a lock, and a takeover never
// deadlocks with a handoff, cancel or finish (which lock run rows, then the batch, then the
// tenant through the trigger of migration 016). Tenants and batches are found through the partial
// indexes `leasehold_tenants_wanting` and `leasehold_batches_wanting`; stale runs by reading the
// small table of live runs. Batches in `skip` are never taken.
export async function takeOver(sql: Sql, a: TakeOverArgs): Promise<TakenBatch | undefined> {
  const [r] = await sql<(BatchRow & { queue_wait_ms: number | null; replaced: string | null })[]>`${takeOverStatement(sql, a)}`;
  return r && { ...toInfo(r), queueWaitMs: r.queue_wait_ms, replaced: r.replaced };
}

/** What {@link takeOver} takes: the new run and its process, and the choice's settings. */
export interface TakeOverArgs {
  run: string;
  process: string;
  staleMs: number;
  /** Limit of runs of tenants without their own; {@link NO_LIMIT} for none. */
  maxRunning: number;
  batchId?: string;
  /** With `batchId`: take a better choice instead when one exists (a worker sent for the batch). */
  orFairer?: boolean;
  skip?: string[];
}

/** The takeover statement as a fragment (the benchmark and a test read its plan with EXPLAIN). */
export function takeOverStatement(sql: Sql, a: TakeOverArgs) {
  const skip = sql.json(a.skip ?? []);
  const sent = a.batchId ?? null;
  const only = a.batchId !== undefined && !a.orFairer;
  const stale = sql`now() - make_interval(secs => ${a.staleMs / 1000})`;
  return sql`with tenant as materialized (
      select t.tenant, t.running from leasehold_tenants t
      where t.wanting > 0 and t.running < coalesce(t.max_running, ${a.maxRunning})
        and exists (select 1 from leasehold_batches w
                    where w.tenant = t.tenant and w.status = 'open' and w.live_runs < w.target
                      and w.id::text not in (select jsonb_array_elements_text(${skip})))
      order by t.running, t.served_at nulls first, t.tenant
      limit 1
      for update of t skip locked
    ), fair as (
      select w.id, tenant.running
      from tenant
      cross join lateral (
        select id from leasehold_batches
        where leasehold_batches.tenant = tenant.tenant and status = 'open' and live_runs < target
          and id::text not in (select jsonb_array_elements_text(${skip}))
        order by priority desc, created_at, id
        limit 1
        for update skip locked
      ) w
    ), stale as (
      -- The batches are looked up by the ids of the stale runs (= any of an array): joined
      -- plainly, a planner that thought the runs many hashed every open batch.
      select r.batch_id as id, r.id as dead from leasehold_runs r
      join leasehold_batches b on b.id = r.batch_id
      where r.beat_at < ${stale} and b.status = 'open'
        and b.id = any(array(select batch_id from leasehold_runs where beat_at < ${stale}))
        and r.batch_id::text not in (select jsonb_array_elements_text(${skip}))
      order by r.beat_at
      limit 1
      for update of r, b skip locked
    ), sent_stale as (
      select r.batch_id as id, r.id as dead from leasehold_runs r
      join leasehold_batches b on b.id = r.batch_id
      where r.batch_id = ${sent}::uuid and r.beat_at < ${stale} and b.status = 'open'
      order by r.beat_at
      limit 1
      for update of r, b skip locked
    ), sent_free as (
      select b.id, t.running
      from leasehold_batches b join leasehold_tenants t on t.tenant = b.tenant
      where b.id = ${sent}::uuid and b.status = 'open' and b.live_runs < b.target
        and t.running < coalesce(t.max_running, ${a.maxRunning})
      for update of b, t skip locked
    ), pick as (
      select id, dead, 0 as o from sent_stale
      union all select id, null::uuid, 1 from sent_free
        where ${only} or not exists (select 1 from fair where fair.running < sent_free.running)
      union all select id, dead, 2 from stale where not ${only}
      union all select id, null::uuid, 3 from fair where not ${only}
      order by o
      limit 1
    ), gone as (
      delete from leasehold_runs r using pick where r.id = pick.dead returning r.id
    ), joined as (
      update leasehold_batches b
      set live_runs = b.live_runs + case when pick.dead is null then 1 else 0 end,
          taken_at = now(), handed_off_at = null, runs = b.runs + 1, stalled_runs = b.stalled_runs + 1
      from pick
      where b.id = pick.id and (pick.dead is null or (select count(*) from gone) = 1)
      returning b.*
    ), run as (
      insert into leasehold_runs (id, batch_id, process) select ${a.run}, id, ${a.process} from joined
      returning id, batch_id, process, started_at, beat_at, settled
    )
    select j.*, null::jsonb as counts,
      (select json_agg(json_build_object('id', r.id, 'process', r.process, 'started_at', r.started_at,
          'beat_at', r.beat_at, 'settled', r.settled, 'age_ms', 0)) from run r) as run_list,
      case when j.runs = 1 then (extract(epoch from now() - j.created_at) * 1000)::float8 end as queue_wait_ms,
      (select dead from pick) as replaced
    from joined j`;
}

// Whether a takeover that took nothing may have skipped a batch only because a concurrent
// takeover held its row or its tenant's (the choice skips locked rows): the named batch is
// still below its target with its tenant below its limit, or (without one) some such tenant has
// a batch below its target.
export async function takeoverMayFind(sql: Sql, a: { batchId?: string; maxRunning: number }): Promise<boolean> {
  const [r] = a.batchId
    ? await sql<{ waiting: boolean }[]>`select exists (
        select 1 from leasehold_batches b join leasehold_tenants t on t.tenant = b.tenant
        where b.id = ${a.batchId}::uuid and b.status = 'open' and b.live_runs < b.target
          and t.running < coalesce(t.max_running, ${a.maxRunning})
      ) as waiting`
    : await sql<{ waiting: boolean }[]>`select exists (
        select 1 from leasehold_tenants where wanting > 0 and running < coalesce(max_running, ${a.maxRunning})
      ) as waiting`;
  return r.waiting;
}

// Clears the dispatch mark of a batch a worker was sent for but did not join (another tenant was
// served worse, or its tenant is at its limit), so the scheduler may dispatch it again at once.
export async function undispatch(sql: Sql, batchId: string): Promise<void> {
  await sql`update leasehold_batches set dispatched_at = null
    where id = ${batchId} and status = 'open' and live_runs < target`;
}

// Whether a tenant other than `tenant` has a batch below its target and is below its limit
// (through the partial index of tenants wanting runs): a run past its slice hands off then.
export async function othersWaiting(sql: Sql, tenant: string, maxRunning: number): Promise<boolean> {
  const [r] = await sql<{ waiting: boolean }[]>`select exists (
      select 1 from leasehold_tenants
      where wanting > 0 and running < coalesce(max_running, ${maxRunning}) and tenant <> ${tenant}
    ) as waiting`;
  return r.waiting;
}

// The fence of a run's statements: its own row, locked key share (a cancel, finish, end or
// takeover deletes it, and waits for the statement holding it; a beat does not conflict).
export function ownRun(sql: Sql, run: string) {
  return sql`select id from leasehold_runs where id = ${run} for key share`;
}

// After a takeover: items left running by runs that are gone (the stale run replaced, or a run
// that handed off while an item ignored its signal) count that attempt; they go back to
// pending, or to failed when their attempts are used up. An item of a live run of the batch is
// never touched: the runs are read as of the statement's snapshot, so an item is changed only
// while it is still held by the run found gone (an item another recovery put back and a run
// that joined since claimed is that run's). Fenced on the new run.
export async function recoverRunning(sql: Sql, a: RecoverArgs): Promise<number> {
  const rows = await sql`${recoverRunningStatement(sql, a)}`;
  return rows.count;
}

/** What {@link recoverRunning} takes: the batch, the new run, the attempts an item may use. */
export interface RecoverArgs {
  batchId: string;
  run: string;
  attempts: number;
}

/** The recovery statement as a fragment (the plan test reads its plan); see {@link recoverRunning}. */
export function recoverRunningStatement(sql: Sql, a: RecoverArgs) {
  return sql`with own as (
      ${ownRun(sql, a.run)}
    ), gone as (
      select ctid as tid, run_id from leasehold_items
      where batch_id = ${a.batchId} and state = 'running' and exists (select 1 from own)
        and (run_id is null or run_id <> all(array(select id from leasehold_runs where batch_id = ${a.batchId})))
    )
    update leasehold_items i
    set state = case when i.attempts >= ${a.attempts} then 'failed' else 'pending' end,
        error = case when i.attempts >= ${a.attempts}
          then 'the run executing this item died (attempt ' || i.attempts || ' of ' || ${a.attempts}::int || ')'
          else i.error end,
        run_id = ${a.run}, run_after = greatest(i.run_after, now()), updated_at = now()
    from gone
    -- By the ctids found (a Tid Scan: a join on the key let a planner walk the batch's items);
    -- a row another statement changed meanwhile is rechecked as it stands, and left alone
    -- unless the gone run still holds it.
    where i.ctid = any(array(select tid from gone)) and i.ctid = gone.tid and i.state = 'running'
      and i.run_id is not distinct from gone.run_id`;
}

// Puts back items this run holds as running but is not executing (claimed by a statement
// whose answer was lost): pending again, the uncounted attempt given back, due when they were
// (an item claimed ahead of its due time keeps its backoff). Fenced on the run.
export function releaseOrphans(sql: Sql, batchId: string, run: string) {
  return releaseOrphansStatement(sql, { batchId, run });
}

/** {@link releaseOrphans} with its arguments as one object (the plan test's form). */
export function releaseOrphansStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with own as (
      ${ownRun(sql, run)}
    )
    update leasehold_items set state = 'pending', attempts = attempts - 1, run_after = greatest(run_after, now()),
      updated_at = now()
    where batch_id = ${batchId} and run_id = ${run} and state = 'running' and exists (select 1 from own)`;
}

/** What a beat answers. */
export interface BeatResult {
  /** The run still holds its lease (its row exists: the batch is open and it was not taken over). */
  owned: boolean;
  /**
   * The run is a surplus one: as many runs of the batch joined before it as its
   * `max_concurrency` allows (lowered while it runs), so it hands off.
   */
  surplus: boolean;
  /** The batch's own rate limit now (items per second; a start's or a PATCH's), null when none. */
  ratePerSecond: number | null;
}

// Proves the run still holds its lease, and says whether it is a surplus run (the newest runs
// beyond the batch's max_concurrency) and the batch's own rate now. Updates the run's own row only.
export async function beat(sql: Sql, batchId: string, run: string): Promise<BeatResult> {
  const [r] = await sql<{ surplus: boolean; rate: number | null }[]>`${beatStatement(sql, { batchId, run })}`;
  return { owned: r !== undefined, surplus: r?.surplus ?? false, ratePerSecond: r?.rate ?? null };
}

/** The beat as a fragment (the plan test reads its plan); see {@link beat}. */
export function beatStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`update leasehold_runs r set beat_at = now()
    where r.id = ${run} and r.batch_id = ${batchId}
    returning (select count(*) from leasehold_runs o
               where o.batch_id = r.batch_id and (o.started_at, o.id) < (r.started_at, r.id))
      >= (select max_concurrency from leasehold_batches where id = r.batch_id) as surplus,
      (select rate_per_second from leasehold_batches where id = r.batch_id) as rate`;
}

// The item writes of one run, fenced on the run's own lease (`own`):
// - `moved`: an item the run settled, from running at the attempts it was claimed with to its
//   new state. A retry waits `delay_ms` (clamped to MAX_DELAY_MS, so no time can overflow).
//   Idempotent when retried: an item already at the target state and attempts by this run
//   counts as moved.
function moved(sql: Sql, batchId: string, run: string, moves: EncodedMoves) {
  // Each moved key is looked up on the whole primary key through a lateral subquery (a
  // parameterized nested loop: the planner has no other choice), and the row is then updated
  // by its ctid: no plan of it walks the batch, whatever the statistics say of the batch's size
  // (docs/design.md, "The database in production").
  return sql`with m as (
      select t.tid, v.* from jsonb_to_recordset(${moves.json}::text::jsonb)
        as v(key text, state text, claimed int, attempts int, output jsonb, error text, delay_ms double precision, waits int)
      cross join lateral (
        select x.ctid as tid from leasehold_items x where x.batch_id = ${batchId} and x.key = v.key limit 1
      ) t
    )
    update leasehold_items i
    set state = m.state, attempts = m.attempts, output = m.output, error = m.error,
        waits = coalesce(m.waits, i.waits),
        run_after = case when m.state = 'pending' then now() + make_interval(
          secs => least(greatest(coalesce(m.delay_ms, 0), 0), ${MAX_DELAY_MS}) / 1000.0) else i.run_after end,
        updated_at = now()
    from m
    where i.ctid = any(array(select tid from m)) and i.ctid = m.tid and i.run_id = ${run}
      and exists (select 1 from own)
      and ((i.state = 'running' and i.attempts = m.claimed)
           or (i.state = m.state and i.attempts = m.attempts))
    returning 1`;
}

// How many of `moves` already stand as this run left them (state and attempts, by this run)
// while the run still holds its lease: read when a move statement counted short, since a
// retried statement whose first try landed meanwhile (a timed-out statement the server went on
// with) finds its rows changed after its snapshot and moves nothing. Each key is one primary-key
// look-up (LATERAL … LIMIT 1). Reads only.
export async function movesLanded(sql: Sql, a: { batchId: string; run: string; moves: EncodedMoves }): Promise<number> {
  const [r] = await sql<{ landed: number }[]>`select
      case when exists (select 1 from leasehold_runs where id = ${a.run})
      then (select count(*) from jsonb_to_recordset(${a.moves.json}::text::jsonb) as v(key text, state text, attempts int)
            cross join lateral (
              select 1 from leasehold_items x
              where x.batch_id = ${a.batchId} and x.key = v.key and x.run_id = ${a.run}
                and x.state = v.state and x.attempts = v.attempts
              limit 1
            ) t)
      else 0 end::int as landed`;
  return r.landed;
}

/** What one {@link step} did. */
export interface StepResult {
  /** Items moved; fewer than sent means the run lost its lease. */
  moved: number;
  /** Items claimed, oldest due first. */
  claimed: ClaimedRow[];
  /**
   * ms until the next pending item not claimable yet (due later than `aheadMs` from now) becomes
   * due (database clock); null: none.
   */
  nextDueMs: number | null;
}

// Moves the settled items and claims up to `claim` pending items due within `aheadMs` (oldest
// due first, skipping rows other runs' transactions hold) in one statement, both fenced on the
// run's own lease. With moves, the fence is an update of the run's row that adds the items it
// settled; with `recordProgress` the batch's stalled runs go to 0. Also answers how soon the
// next pending item left becomes due.
export async function step(sql: Sql, a: StepArgs): Promise<StepResult> {
  const [r] = await sql<{ moved: number; claimed: ClaimedRow[] | null; next_due_ms: number | null }[]>`${stepStatement(sql, a)}`;
  return { moved: r.moved, claimed: r.claimed ?? [], nextDueMs: r.next_due_ms };
}

/** What {@link step} takes; `settled` is how many of the moves end their item (done or failed). */
export interface StepArgs {
  batchId: string;
  run: string;
  moves: EncodedMoves;
  settled?: number;
  claim: number;
  aheadMs: number;
  recordProgress: boolean;
}

// The fence of a statement that moves items: the run's row, updated when the moves settle
// items (its count of settled items), else locked key share.
function ownMoving(sql: Sql, run: string, settled: number) {
  return settled > 0
    ? sql`update leasehold_runs set settled = settled + ${settled} where id = ${run} returning id`
    : ownRun(sql, run);
}

// A batch's stalled runs back to 0 once a run of it stored a move (written only when not 0).
function progress(sql: Sql, batchId: string, recordProgress: boolean) {
  return sql`update leasehold_batches set stalled_runs = 0
    where ${recordProgress} and id = ${batchId} and stalled_runs > 0 and exists (select 1 from own)
    returning 1`;
}

/** The move + claim statement as a fragment (the plan test reads its plan with EXPLAIN). */
export function stepStatement(sql: Sql, a: StepArgs) {
  return sql`with own as (
      ${ownMoving(sql, a.run, a.settled ?? 0)}
    ), progress as (
      ${progress(sql, a.batchId, a.recordProgress)}
    ), moved as (
      ${moved(sql, a.batchId, a.run, a.moves)}
    ), picked as (
      select ctid from leasehold_items
      where batch_id = ${a.batchId} and state = 'pending' and exists (select 1 from own)
        and run_after <= now() + make_interval(secs => ${a.aheadMs} / 1000.0)
      order by run_after
      limit ${a.claim}
      for update skip locked
    ), claimed as (
      -- The picked rows are locked, so their ctids stay theirs: a Tid Scan, never a walk of the batch.
      update leasehold_items i
      set state = 'running', attempts = i.attempts + 1, run_id = ${a.run}, updated_at = now()
      where i.ctid = any(array(select ctid from picked))
      returning i.key, i.input, i.attempts, i.waits, i.run_after, i.checkpoint
    )
    select (select count(*) from moved)::int as moved,
      (select json_agg(json_build_object('key', key, 'input', input, 'attempts', attempts, 'waits', waits,
          'due_in_ms', greatest(0, extract(epoch from run_after - now()) * 1000), 'checkpoint', checkpoint) order by run_after)
        from claimed) as claimed,
      -- The first entry of the pending index past the window (min() let a planner that thought
      -- the batch small read every pending item).
      (select extract(epoch from run_after - now()) * 1000 from leasehold_items
        where batch_id = ${a.batchId} and state = 'pending'
          and run_after > now() + make_interval(secs => ${a.aheadMs} / 1000.0)
        order by run_after limit 1)::float8 as next_due_ms`;
}

// Ends the run's lease in one statement: writes the settled items; gives every other item this
// run holds as running, except those still executing (`hold`: their keys, with the settled
// ones, as a JSON array), back to pending with its attempt given back and its due time kept —
// claimed ahead but never started, or claimed by a statement whose answer was lost; deletes the
// run's row and counts one live run less, so another process may join at once. With `leave`
// (the run found no work while other runs of the batch go on) it ends only while another run
// of the batch is live (decided on the locked batch row, so the last run never leaves), and
// lowers the batch's target to the runs left, so no worker joins for the tail. A graceful
// handoff is no stalled run: with `recordProgress` the stalled runs go to 0, else this run's
// count is taken back.
export async function handOffRun(
  sql: Sql,
  a: HandOffArgs,
): Promise<{ handed: boolean; kept: boolean; moved: number; givenBack: number }> {
  const [r] = await sql<{ handed: number; kept: boolean; moved: number; given_back: number }[]>`${handOffStatement(sql, a)}`;
  return { handed: r.handed === 1, kept: r.handed === 0 && r.kept, moved: r.moved, givenBack: r.given_back };
}

/**
 * What {@link handOffRun} takes; `hold` is a JSON array text of keys still executing. It answers
 * whether the run's lease ended (`handed`), or, for a `leave` refused because it is the batch's
 * last run, that the lease stands (`kept`).
 */
export interface HandOffArgs {
  batchId: string;
  run: string;
  moves: EncodedMoves;
  hold: string;
  recordProgress: boolean;
  /** Leave for want of work: only while another run is live; the target drops to the runs left. */
  leave?: boolean;
}

/** The handoff as a fragment (the plan test reads its plan); see {@link handOffRun}. */
export function handOffStatement(sql: Sql, a: HandOffArgs) {
  const leave = a.leave ?? false;
  return sql`with left_batch as (
      -- The run's row is locked (by the subquery) before the batch row, as every statement does.
      update leasehold_batches
      set live_runs = live_runs - 1, handed_off_at = now(),
          target = case when ${leave} then greatest(1, least(target, live_runs - 1)) else target end,
          stalled_runs = case when ${a.recordProgress} then 0 else greatest(stalled_runs - 1, 0) end
      where id = ${a.batchId} and status = 'open' and (not ${leave} or live_runs > 1)
        and exists (select 1 from leasehold_runs where id = ${a.run} and batch_id = ${a.batchId} for update)
      returning id
    ), own as (
      delete from leasehold_runs where id = ${a.run} and exists (select 1 from left_batch) returning id
    ), moved as (
      ${moved(sql, a.batchId, a.run, a.moves)}
    ), back as (
      update leasehold_items i
      set state = 'pending', attempts = i.attempts - 1, run_after = greatest(i.run_after, now()), updated_at = now()
      where i.batch_id = ${a.batchId} and i.run_id = ${a.run} and i.state = 'running'
        and i.key <> all(array(select jsonb_array_elements_text(${a.hold}::text::jsonb)))
        and exists (select 1 from own)
      returning 1
    )
    select (select count(*) from own)::int as handed, (select count(*) from moved)::int as moved,
      (select count(*) from back)::int as given_back,
      -- The row still stands (a leave refused for the last run): read locked, so a row that a
      -- finish, cancel or takeover deleted after the statement's snapshot is seen gone (lost).
      exists (select 1 from leasehold_runs where id = ${a.run} for update) as kept`;
}

// Every run row of a batch, deleted (each delete waits for the move in flight on it) when the
// run `run` still holds its lease and `when` holds: the first step of every end of a batch.
function endRuns(sql: Sql, batchId: string, run: string, when: postgres.Fragment) {
  return sql`delete from leasehold_runs
    where batch_id = ${batchId} and exists (select 1 from leasehold_runs where id = ${run}) and ${when}
    returning id`;
}

// The run rows a batch that just ended still has, deleted: runs that joined while the end ran.
// A takeover that joins holds the batch row until it commits; the end's delete of the run rows,
// from a snapshot taken before that commit, missed the new row, and its update of the batch row
// waited for the takeover and then ended the batch. Left standing, such a run worked the ended
// batch (its moves are fenced on its own row). Sent after the end, in the end's transaction: it
// holds the batch row, so no run joins any more, and a later snapshot sees every run that did.
function endLateRuns(sql: Sql, batchId: string) {
  return sql`delete from leasehold_runs where batch_id = ${batchId}`;
}

// Runs `f` in a transaction of its own, or in a savepoint when `sql` is a caller's transaction.
function inTransaction<T>(sql: Sql, f: (t: Sql) => Promise<T>): Promise<T> {
  const within = (sql as { savepoint?: Sql['begin'] }).savepoint?.bind(sql) ?? sql.begin.bind(sql);
  return within((tx) => f(tx as unknown as Sql)) as Promise<T>;
}

// Ends a batch whose runs keep failing before they store anything: `failed` with `reason`, and
// every item still pending or running `failed` with `itemError`. Fenced on the run's lease.
export async function giveUp(sql: Sql, a: { batchId: string; run: string; reason: string; itemError: string }): Promise<boolean> {
  return inTransaction(sql, async (t) => {
    const given = await giveUpOnce(t, a);
    if (given) {
      await t`${endLateRuns(t, a.batchId)}`;
      await writeEndEvent(t, a.batchId);
    }
    return given;
  });
}

async function giveUpOnce(sql: Sql, a: { batchId: string; run: string; reason: string; itemError: string }): Promise<boolean> {
  const [r] = await sql<{ given_up: number }[]>`with gone as (
      ${endRuns(sql, a.batchId, a.run, sql`true`)}
    ), own as (
      update leasehold_batches
      set status = 'failed', reason = ${a.reason}, finished_at = now(), live_runs = 0
      where id = ${a.batchId} and status = 'open' and ${a.run}::uuid in (select id from gone)
      returning id
    ), failed as (
      update leasehold_items i set state = 'failed', error = ${a.itemError}, run_id = ${a.run}, updated_at = now()
      where i.batch_id = ${a.batchId} and i.state in ('pending', 'running') and exists (select 1 from own)
      returning 1
    )
    select (select count(*) from own)::int as given_up, (select count(*) from failed)::int as items`;
  return r.given_up === 1;
}

// Finishes the batch once no item is pending or running: succeeded, or failed when any item
// failed — or, when the batch tolerates failures, when more items failed than it allows (the
// reason then says so). Any run of the batch holding its lease can, and only once (status must
// still be open): every run row of the batch is deleted first, so the other runs stop.
export async function finishBatch(sql: Sql, batchId: string, run: string): Promise<BatchStatus | undefined> {
  return inTransaction(sql, async (t) => {
    const [r] = await t<{ status: BatchStatus }[]>`${finishStatement(t, { batchId, run })}`;
    if (r) {
      await t`${endLateRuns(t, batchId)}`;
      await writeEndEvent(t, batchId);
    }
    return r?.status;
  });
}

/**
 * {@link finishBatch} as a fragment. "No item pending or running" is two look-ups, each of the
 * first entry of the partial index its state has, in that index's order (one test of `state in
 * (…)` let a planner that thought the batch small walk all its items, and a plain `not exists`
 * let one that thought it large scan the table until it met a pending item). The
 * failed count reads the batch's failed items only; the counts are stored on the row.
 */
export function finishStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  const idle = sql`(select run_after from leasehold_items where batch_id = ${batchId} and state = 'pending'
           order by run_after limit 1) is null
      and (select batch_id from leasehold_items where batch_id = ${batchId} and state = 'running'
           order by batch_id limit 1) is null
      and not (select reading from leasehold_batches where id = ${batchId})`;
  return sql`with gone as (
      ${endRuns(sql, batchId, run, idle)}
    )
    update leasehold_batches b
    set status = case when (b.allowed_failures is null and n.failed > 0) or n.failed > b.allowed_failures
          then 'failed' else 'succeeded' end,
        reason = case when n.failed > b.allowed_failures then ${toleranceReason(sql)} else b.reason end,
        final_counts = jsonb_build_object('pending', 0, 'running', 0, 'done', b.total - n.failed, 'failed', n.failed),
        finished_at = now(), live_runs = 0
    from (select count(*)::int as failed from leasehold_items where batch_id = ${batchId} and state = 'failed') n
    where b.id = ${batchId} and b.status = 'open' and ${run}::uuid in (select id from gone)
    returning b.status`;
}

// The reason of a batch ended by its tolerance, from `b` (the batch row) and `n.failed`.
function toleranceReason(sql: Sql) {
  return sql`'more items failed than tolerated: ' || n.failed || ' failed, ' || b.allowed_failures || ' tolerated ('
    || case when b.tolerated_count is not null then 'count ' || b.tolerated_count
            else b.tolerated_percent || ' % of ' || b.total || ' items' end || ')'`;
}

/** What {@link endIntolerable} did. */
export interface IntolerableEnd {
  /** The batch ended `failed` by this statement. */
  ended: boolean;
  /** Items put back to pending (running or claimed when it ended). */
  givenBack: number;
  /** The batch's failed items as counted by the statement. */
  failed: number;
  /**
   * Failed items the batch tolerates now: its count, or its percent of the items stored so far;
   * null when it has no tolerance, or when its tolerance is a percent and its source is still
   * read (a percent ends a batch early only once its total is known: docs/design.md, "End").
   */
  allowed: number | null;
}

// Ends the batch `failed` at once when more of its items have failed than its tolerance allows
// (a batch without one is never ended here), with the reason; the items still running under
// any of its runs (executing or claimed ahead) go back to pending with their attempt given
// back (the end interrupted them), pending ones stay pending. The failed count is the batch's,
// shared by all its runs: every run checks it after each move that failed an item, so the run
// whose move passes the allowance (or a later one) ends the batch, once (every run row is
// deleted first; a second end finds none). A percent tolerance is judged only once the batch's
// source has been read (its total is final; a percent of the first pages would end a healthy
// batch at a few early failures); a count applies at once. It answers the allowance it judged
// by, which the run keeps (docs/design.md, "End").
// The give-back is a second statement of the end's transaction: the end's deletes wait for the
// moves in flight on the run rows, and a claim among them (pending to running, committed after
// the end's snapshot) is seen only by a later snapshot; in the end's own statement such items
// stayed running in the ended batch (docs/design.md, "Fan-out").
export async function endIntolerable(sql: Sql, batchId: string, run: string): Promise<IntolerableEnd> {
  return inTransaction(sql, async (t) => {
    const [r] = await t<
      { ended: number; failed: number; allowed: number | null }[]
    >`${endIntolerableStatement(t, { batchId, run })}`;
    if (r.ended === 1) await t`${endLateRuns(t, batchId)}`;
    const givenBack = r.ended === 1 ? (await t`${giveBackRunningStatement(t, { batchId })}`).count : 0;
    if (r.ended === 1) await writeEndEvent(t, batchId);
    return { ended: r.ended === 1, givenBack, failed: r.failed, allowed: r.allowed };
  });
}

/** The end of {@link endIntolerable} as a fragment (the plan test reads its plan). */
export function endIntolerableStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with n as materialized (
      select count(*)::int as failed from leasehold_items where batch_id = ${batchId} and state = 'failed'
    ), a as materialized (
      select case when tolerated_percent is not null and reading then null else allowed_failures end as allowed
      from leasehold_batches where id = ${batchId}
    ), gone as (
      ${endRuns(sql, batchId, run, sql`(select failed from n) > (select allowed from a)`)}
    ), ended as (
      update leasehold_batches b
      set status = 'failed', reason = ${toleranceReason(sql)}, finished_at = now(), live_runs = 0
      from n
      where b.id = ${batchId} and b.status = 'open' and ${run}::uuid in (select id from gone)
      returning b.id
    )
    select (select count(*) from ended)::int as ended, (select failed from n) as failed, (select allowed from a) as allowed`;
}

/**
 * The give-back of {@link endIntolerable} as a fragment (the plan test reads its plan): the
 * items of the batch still running go back to pending with their attempt given back, due now
 * at the latest. Sent only in the transaction that just ended the batch.
 */
export function giveBackRunningStatement(sql: Sql, { batchId }: { batchId: string }) {
  return sql`update leasehold_items i
    set state = 'pending', attempts = greatest(i.attempts - 1, 0), run_after = greatest(i.run_after, now()),
        updated_at = now()
    where i.batch_id = ${batchId} and i.state = 'running'`;
}

// Whether the run still holds its lease, how long until the batch's next pending item is due
// (ms, by the database clock; null when none is pending), how many runs the batch has, and
// whether its source is still being read (more items are coming).
export async function waitState(
  sql: Sql,
  batchId: string,
  run: string,
): Promise<{ owned: boolean; dueInMs: number | null; liveRuns: number; reading: boolean }> {
  const [r] = await sql<
    { owned: boolean; due_in_ms: number | null; live_runs: number; reading: boolean }[]
  >`${waitStateStatement(sql, { batchId, run })}`;
  return { owned: r.owned, dueInMs: r.due_in_ms, liveRuns: r.live_runs ?? 0, reading: r.reading };
}

/** {@link waitState} as a fragment (the plan test reads its plan). */
export function waitStateStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`select
      exists (select 1 from leasehold_runs where id = ${run}) as owned,
      (select greatest(0, extract(epoch from run_after - now()) * 1000)::float8 from leasehold_items
        where batch_id = ${batchId} and state = 'pending' order by run_after limit 1) as due_in_ms,
      (select live_runs from leasehold_batches where id = ${batchId}) as live_runs,
      coalesce((select reading from leasehold_batches where id = ${batchId}), false) as reading`;
}

// Hands back a batch this runner joined but cannot run (its job is unknown here): its run row
// is deleted so any process joins at once; the takeover does not count as a stalled run.
export async function handBack(sql: Sql, batchId: string, run: string): Promise<boolean> {
  const rows = await sql`with b as (
      update leasehold_batches
      set live_runs = live_runs - 1, handed_off_at = now(), stalled_runs = greatest(stalled_runs - 1, 0)
      where id = ${batchId} and status = 'open'
        and exists (select 1 from leasehold_runs where id = ${run} and batch_id = ${batchId} for update)
      returning id
    )
    delete from leasehold_runs where id = ${run} and exists (select 1 from b) returning id`;
  return rows.length === 1;
}

/** A batch the scheduler sends workers to, and how many. */
export interface DispatchRow {
  id: string;
  /** Runs it lacks: below its target (within its tenant's limit), plus its stale runs. */
  workers: number;
}

// Marks open batches that need workers (below their target with their tenant below its limit,
// or with a stale run) as dispatched and returns them with how many workers each needs; a
// batch dispatched less than cooldownMs ago that no run has joined since is skipped, so
// overlapping schedulers never dispatch one batch twice. A batch below its target whose tenant
// runs its limit of runs (`max_running`, else `maxRunning`) needs no worker yet.
export async function claimDispatch(sql: Sql, a: DispatchArgs): Promise<DispatchRow[]> {
  return sql<DispatchRow[]>`${claimDispatchStatement(sql, a)}`;
}

/** What {@link claimDispatch} takes (ms, database clock), the most batches to mark, the default tenant limit. */
export interface DispatchArgs {
  staleMs: number;
  cooldownMs: number;
  limit: number;
  maxRunning: number;
}

/** {@link claimDispatch} as a fragment (the plan test reads its plan). */
export function claimDispatchStatement(sql: Sql, a: DispatchArgs) {
  return sql`update leasehold_batches b set dispatched_at = now()
    from (
      select o.id, s.workers from leasehold_batches o
      cross join lateral (
        select least(greatest(o.target - o.live_runs, 0),
                     coalesce((select greatest(coalesce(t.max_running, ${a.maxRunning}) - t.running, 0)
                               from leasehold_tenants t where t.tenant = o.tenant), ${a.maxRunning}))
          + (select count(*) from leasehold_runs r
             where r.batch_id = o.id and r.beat_at < now() - make_interval(secs => ${a.staleMs / 1000}))::int as workers
      ) s
      where o.status = 'open' and s.workers > 0
        and (o.dispatched_at is null or o.dispatched_at < o.taken_at
             or o.dispatched_at < now() - make_interval(secs => ${a.cooldownMs / 1000}))
      order by o.created_at
      limit ${a.limit}
      for update of o skip locked
    ) s
    where b.id = s.id
    returning b.id, s.workers`;
}

// Marks one batch as dispatched now (the API sends a new batch to workers at once).
export async function markDispatched(sql: Sql, batchId: string): Promise<void> {
  await sql`update leasehold_batches set dispatched_at = now() where id = ${batchId}`;
}

// Sets how many runs a batch may have while it is open; the target follows (one run per
// RUN_ITEMS items, at most the new limit). Runs beyond it are told by their next beat
// (`surplus`) and hand off. Answers the batch's status, undefined when there is no such batch.
export async function setMaxConcurrency(sql: Sql, batchId: string, maxConcurrency: number): Promise<BatchStatus | undefined> {
  const [r] = await sql<{ status: BatchStatus }[]>`with b as (
      update leasehold_batches
      set max_concurrency = ${maxConcurrency},
          target = least(${maxConcurrency}::int, greatest(1, ceil(total / ${RUN_ITEMS}::float8)::int))
      where id = ${batchId} and status = 'open'
      returning status
    )
    select status from b
    union all
    select status from leasehold_batches where id = ${batchId} and not exists (select 1 from b)`;
  return r?.status;
}

// Sets an open batch's own rate limit (items per second), which every run's next token take
// reads (sql/rate.ts) and a run without a rate limit picks up at its next beat. Answers the
// batch's status, undefined when there is no such batch.
//
// A raise also brings forward the items given back for want of a token (pending, due later, no
// error: a retry's backoff and a Retry-After wait keep their error text, and their times): they
// were spaced at the old rate. With an old rate of the batch's own, the wait left is scaled by
// old / new; with the job's rate (unknown here), they are due at once, and the next claim gives
// them back again spaced at the new rate. The CTEs share one snapshot, so `old` reads the rate
// before the update.
export async function setRatePerSecond(sql: Sql, batchId: string, perSecond: number): Promise<BatchStatus | undefined> {
  const [r] = await sql<{ status: BatchStatus }[]>`with old as (
      select rate_per_second as rate from leasehold_batches where id = ${batchId} and status = 'open'
    ), b as (
      update leasehold_batches set rate_per_second = ${perSecond}::float8
      where id = ${batchId} and status = 'open'
      returning status
    ), sooner as (
      update leasehold_items i
      set run_after = now() + (i.run_after - now()) * coalesce((select rate from old) / ${perSecond}::float8, 0)
      where i.batch_id = ${batchId} and i.state = 'pending' and i.run_after > now() and i.error is null
        and coalesce((select rate from old) < ${perSecond}::float8, true) and exists (select 1 from b)
    )
    select status from b
    union all
    select status from leasehold_batches where id = ${batchId} and not exists (select 1 from b)`;
  return r?.status;
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

// ---- Redrive (src/batch/redrive.ts). One transaction takes, in this order, the datasource
// row lock (as a start does, so maxOpen is decided one at a time with starts) and then the batch
// row lock (as a takeover, finish or cancel does), so a redrive and a run's statements on the
// batch are ordered one after the other.

// Reads the tenant and datasource of a batch (they never change), to lock its datasource.
export async function batchPlace(tx: Tx, id: string): Promise<{ tenant: string; datasource: string } | undefined> {
  const [r] = await tx<
    { tenant: string; datasource: string }[]
  >`select tenant, datasource from leasehold_batches where id = ${id}`;
  return r;
}
