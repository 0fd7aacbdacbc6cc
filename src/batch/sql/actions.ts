// The statements of bulk actions (leasehold_actions, leasehold_action_batches; migration 032;
// docs/design.md, "Bulk actions"): make an action with its snapshot of matched batches, claim a
// chunk of its batches, record their outcomes, and read its progress. None of them touches a
// batch row: the action's work on the batches is a chunk's cancel (cancels.ts) or the one-batch
// statements' (ends.ts, steer.ts, redrives.ts), each in its own short transaction.
import type { Sql } from '../../store/index.js';
import type { BatchStatus } from '../types.js';

/** What a bulk action does to each batch it matched. */
export type ActionKind = 'cancel' | 'pause' | 'resume' | 'redrive';

/** A batch state a filter may ask for: a stored status, or an open batch that runs or is paused. */
export type FilterStatus = BatchStatus | 'running' | 'paused';

/** The batches an action is for: every field given must hold (absent: any). */
export interface ActionFilter {
  tenant?: string;
  datasource?: string;
  job?: string;
  /** Any of these states. */
  status?: FilterStatus[];
  /** Created at or after this instant. */
  createdAfter?: Date;
  /** Created before this instant. */
  createdBefore?: Date;
}

/** An action's row. */
export interface ActionRow {
  id: string;
  request_key: string;
  action: ActionKind;
  filter: Record<string, unknown>;
  matched: number;
  done: number;
  skipped: number;
  created_at: Date;
  finished_at: Date | null;
}

// The filter's condition on leasehold_batches b, from fragments only (each field given adds one
// term). A status of 'running' or 'paused' is an open batch without or with paused_at.
function filterWhere(sql: Sql, f: ActionFilter) {
  const stored = (f.status ?? []).filter((s) => s !== 'running' && s !== 'paused');
  const running = f.status?.includes('running') ?? false;
  const paused = f.status?.includes('paused') ?? false;
  const status = f.status
    ? sql`and (b.status in (select jsonb_array_elements_text(${JSON.stringify(stored)}::text::jsonb))
        or (${running}::boolean and b.status = 'open' and b.paused_at is null)
        or (${paused}::boolean and b.status = 'open' and b.paused_at is not null))`
    : sql``;
  return sql`true
    ${f.tenant !== undefined ? sql`and b.tenant = ${f.tenant}` : sql``}
    ${f.datasource !== undefined ? sql`and b.datasource = ${f.datasource}` : sql``}
    ${f.job !== undefined ? sql`and b.job = ${f.job}` : sql``}
    ${f.createdAfter !== undefined ? sql`and b.created_at >= ${f.createdAfter}` : sql``}
    ${f.createdBefore !== undefined ? sql`and b.created_at < ${f.createdBefore}` : sql``}
    ${status}`;
}

// Sets, for the caller's transaction only, a lock_timeout of `ms` and synchronous_commit off (see
// shortLocks in ../actions.ts for why both are safe there). Touches no row.
export async function shortLocks(sql: Sql, ms: number): Promise<void> {
  await sql`select set_config('lock_timeout', ${`${ms}ms`}, true), set_config('synchronous_commit', 'off', true)`;
}

/** A batch's status and whether it is paused, or undefined: no such batch. Reads its row only. */
export async function batchState(sql: Sql, batchId: string): Promise<{ status: BatchStatus; paused: boolean } | undefined> {
  const [r] = await sql<{ status: BatchStatus; paused: boolean }[]>`select status, paused_at is not null as paused
    from leasehold_batches where id = ${batchId}`;
  return r;
}

/** The action a request key made, or undefined. Reads only. */
export async function actionByKey(sql: Sql, requestKey: string): Promise<ActionRow | undefined> {
  const [r] = await sql<ActionRow[]>`select * from leasehold_actions where request_key = ${requestKey}`;
  return r;
}

/** An action by id, or undefined. Reads only. */
export async function getAction(sql: Sql, id: string): Promise<ActionRow | undefined> {
  const [r] = await sql<ActionRow[]>`select * from leasehold_actions where id = ${id}`;
  return r;
}

// Makes an action and its snapshot: every batch the filter matches now, at most `max` + 1 read
// (plain reads: no batch row is locked). Runs inside the caller's transaction, after the request
// key's row was inserted, so a concurrent request with the same key waits on that insert and
// then finds the action. Answers the matched count; more than `max` means the caller refuses.
export async function insertAction(
  sql: Sql,
  a: { id: string; requestKey: string; action: ActionKind; filter: ActionFilter; stored: Record<string, unknown>; max: number },
): Promise<{ inserted: boolean; matched: number }> {
  const made = await sql`insert into leasehold_actions (id, request_key, action, filter, matched)
    values (${a.id}, ${a.requestKey}, ${a.action}, ${sql.json(a.stored as never)}, 0)
    on conflict (request_key) do nothing returning id`;
  if (made.length === 0) return { inserted: false, matched: 0 };
  const [r] = await sql<{ matched: number }[]>`with m as (
      insert into leasehold_action_batches (action_id, batch_id)
      select ${a.id}, b.id from leasehold_batches b where ${filterWhere(sql, a.filter)}
      order by b.created_at, b.id limit ${a.max + 1}
      returning 1
    )
    update leasehold_actions set matched = (select count(*) from m)::int,
      finished_at = case when (select count(*) from m) = 0 then now() end
    where id = ${a.id} returning matched`;
  return { inserted: true, matched: r.matched };
}

// Claims the next chunk of an action's batches not worked yet: at most `limit` of them, in batch
// id order from the action's partial index, skipping rows another worker of the action holds
// (FOR UPDATE SKIP LOCKED) or took within `takeMs` (taken_until, database clock). Marks them
// taken and commits at once: no lock is held while the batches are worked.
export async function claimChunk(sql: Sql, a: { actionId: string; limit: number; takeMs: number }): Promise<string[]> {
  const rows = await sql<{ batch_id: string }[]>`${claimChunkStatement(sql, a)}`;
  return rows.map((r) => r.batch_id);
}

/** {@link claimChunk} as a fragment (the plan test reads its plan). */
export function claimChunkStatement(sql: Sql, a: { actionId: string; limit: number; takeMs: number }) {
  return sql`update leasehold_action_batches t
    set taken_until = now() + make_interval(secs => ${a.takeMs}::float8 / 1000.0)
    where (t.action_id, t.batch_id) in (
      select action_id, batch_id from leasehold_action_batches
      where action_id = ${a.actionId} and outcome is null and (taken_until is null or taken_until <= now())
      order by batch_id limit ${a.limit}
      for update skip locked)
    returning t.batch_id`;
}

/** One batch's outcome in a chunk: done, skipped with a reason, or busy (left for later). */
export type BatchOutcome =
  | { batchId: string; outcome: 'done' }
  | { batchId: string; outcome: 'skipped'; reason: string }
  | { batchId: string; outcome: 'busy' };

// Records a chunk's outcomes in one statement, and the action's counts with them: done and
// skipped rows get their outcome (only rows not recorded yet count), busy rows a try more and
// their take moved to `busyRetryMs` from now, so a later chunk tries them again then, until their `maxTries`-th try: then they
// are skipped with reason 'busy'. The action is finished when every batch it matched is done or
// skipped (computed on the action row as it is when this statement locks it, so concurrent
// recorders never both miss the end). Touches this action's rows only.
export async function recordOutcomes(
  sql: Sql,
  actionId: string,
  outcomes: BatchOutcome[],
  r: { maxTries: number; busyRetryMs: number },
): Promise<void> {
  const maxTries = r.maxTries;
  if (outcomes.length === 0) return;
  // One JSON array text (arrays are passed as JSON everywhere: no array types under a pooler).
  const rows = JSON.stringify(
    outcomes.map((o) => ({ batch_id: o.batchId, kind: o.outcome, reason: o.outcome === 'skipped' ? o.reason : null })),
  );
  await sql`with o as (
      select * from jsonb_to_recordset(${rows}::text::jsonb) as o(batch_id uuid, kind text, reason text)
    ), rec as (
      update leasehold_action_batches t
      set outcome = case when o.kind <> 'busy' then o.kind when t.tries + 1 >= ${maxTries} then 'skipped' end,
          reason = case when o.kind = 'busy' and t.tries + 1 >= ${maxTries} then 'busy' else o.reason end,
          tries = t.tries + (o.kind = 'busy')::int,
          taken_until = case when o.kind = 'busy' then now() + make_interval(secs => ${r.busyRetryMs}::float8 / 1000.0) end
      from o
      where t.action_id = ${actionId} and t.batch_id = o.batch_id and t.outcome is null
      returning t.outcome
    ), c as (
      select count(*) filter (where outcome = 'done')::int as d, count(*) filter (where outcome = 'skipped')::int as s from rec
    )
    update leasehold_actions a
    set done = a.done + c.d, skipped = a.skipped + c.s,
        finished_at = case when a.finished_at is null and a.done + c.d + a.skipped + c.s >= a.matched then now()
          else a.finished_at end
    from c
    where a.id = ${actionId}`;
}

/** An action's skipped batches by reason. Reads only the action's rows. */
export async function skippedReasons(sql: Sql, actionId: string): Promise<{ reason: string; count: number }[]> {
  return sql<{ reason: string; count: number }[]>`select reason, count(*)::int as count
    from leasehold_action_batches where action_id = ${actionId} and outcome = 'skipped'
    group by reason order by count(*) desc, reason`;
}

/** Some of an action's skipped batches (at most `limit`), with their reason. Reads only. */
export async function skippedSample(sql: Sql, actionId: string, limit: number): Promise<{ batchId: string; reason: string }[]> {
  return sql<{ batchId: string; reason: string }[]>`select batch_id as "batchId", reason
    from leasehold_action_batches where action_id = ${actionId} and outcome = 'skipped'
    order by batch_id limit ${limit}`;
}

/** Ids of unfinished actions, oldest first, at most `limit` (the partial index). Reads only. */
export async function unfinishedActions(sql: Sql, limit: number): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`select id from leasehold_actions
    where finished_at is null order by created_at limit ${limit}`;
  return rows.map((r) => r.id);
}
