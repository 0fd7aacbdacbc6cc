// What several families of the batch statements share: the shape of a batch row as the reads
// and a takeover answer it (leasehold_batches with its item counts and its live leasehold_runs)
// and its mapping to BatchInfo, the constants a start, a setting and a takeover compare with,
// and the fence of every run statement: the run's own row in leasehold_runs, locked key share,
// so a statement holding it changes rows only while the run holds its lease, and an end or a
// takeover that deletes the row waits for it (docs/design.md, "Fan-out"); and the status answer
// of the statements that steer an open batch (`statusAfter`, which runs its caller's update).
import type postgres from 'postgres';
import type { Sql } from '../../store/index.js';
import type { BatchInfo, BatchStatus, ItemState, RunInfo } from '../types.js';

/** A row of `leasehold_batches` joined with its item counts. */
export interface BatchRow {
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
  /** Migration 031. */
  pool?: string | null;
  min_succeeded?: number | null;
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
  /** Migration 035: when it was paused (null: not paused), and its deadline (null: none). */
  paused_at?: Date | null;
  deadline_at?: Date | null;
  /** Migration 037: the start's W3C `traceparent`, or null. */
  trace_context?: string | null;
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

/** A batch row as the {@link BatchInfo} every read and a takeover answer (counts default to 0). */
export function toInfo(r: BatchRow): BatchInfo {
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
    counts: {
      pending: c.pending ?? 0,
      running: c.running ?? 0,
      waiting: c.waiting ?? 0,
      done: c.done ?? 0,
      failed: c.failed ?? 0,
    },
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
    pool: r.pool ?? null,
    minSucceeded: r.min_succeeded ?? null,
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
    pausedAt: r.status === 'open' ? (r.paused_at ?? null) : null,
    deadline: r.deadline_at ?? null,
    traceContext: r.trace_context ?? null,
  };
}

/**
 * Items per run the target counts: a batch wants one run per this many items, at most its
 * `maxConcurrency` (docs/design.md, "Fan-out"), so a 20-item batch wakes one worker.
 */
export const RUN_ITEMS = 100;

/** A transaction of a start or a redrive (any {@link Sql} the statements can take). */
export type Tx = Sql;

/** No per-tenant limit: the largest `max_running` a statement compares with. */
export const NO_LIMIT = 2_147_483_647;

// The fence of a run's statements: its own row, locked key share (a cancel, finish, end or
// takeover deletes it, and waits for the statement holding it; a beat does not conflict).
export function ownRun(sql: Sql, run: string) {
  return sql`select id from leasehold_runs where id = ${run} for key share`;
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
  /**
   * The batch is paused (migration 030; docs/design.md, "Pause, deadline and startBy"): the run
   * hands off as a surplus one does. `surplus` is true as well.
   */
  paused: boolean;
  /** The batch's deadline has passed (database clock): the run ends it (`endPastDeadline`). */
  pastDeadline: boolean;
}

/** A row of {@link beatAnswers}. */
export interface BeatRow {
  surplus: boolean;
  rate: number | null;
  paused: boolean;
  past_deadline: boolean | null;
}

// What a beat answers of the run `r` (a row of leasehold_runs, or a CTE returning its id,
// batch_id and started_at): whether it is a surplus run (as many runs of the batch joined before
// it as max_concurrency allows), the batch's own rate, whether the batch is paused, and whether
// its deadline passed (database clock). The beat's `returning` list, and the answers a move that
// beats for the run reads of its fence (moves.ts, `step`).
export function beatAnswers(sql: Sql) {
  return sql`(select count(*) from leasehold_runs o
               where o.batch_id = r.batch_id and (o.started_at, o.id) < (r.started_at, r.id))
      >= (select max_concurrency from leasehold_batches where id = r.batch_id) as surplus,
      (select rate_per_second from leasehold_batches where id = r.batch_id) as rate,
      (select paused_at is not null from leasehold_batches where id = r.batch_id) as paused,
      (select deadline_at <= now() from leasehold_batches where id = r.batch_id) as past_deadline`;
}

/** A beat's answer from its row; no row: the run no longer holds its lease. */
export function beatResult(r: BeatRow | undefined): BeatResult {
  const paused = r?.paused ?? false;
  return {
    owned: r !== undefined,
    surplus: paused || (r?.surplus ?? false),
    ratePerSecond: r?.rate ?? null,
    paused,
    pastDeadline: r?.past_deadline ?? false,
  };
}

// Answers an open batch's status after a change of its row: `ctes` are the statement's CTEs, one
// of them `b`, the update of the row (only while it is open) returning its status. The status
// is the update's when it changed the row, else the row's as it stands (a finished batch's, or
// an open one the update's own condition passed over); undefined when there is no such batch.
// The steering and settings statements (sql/steer.ts, sql/settings.ts) share it.
export async function statusAfter(sql: Sql, batchId: string, ctes: postgres.Fragment): Promise<BatchStatus | undefined> {
  const [r] = await sql<{ status: BatchStatus }[]>`with ${ctes}
    select status from b
    union all
    select status from leasehold_batches where id = ${batchId} and not exists (select 1 from b)`;
  return r?.status;
}
