// The moves of items (leasehold_items, with the run's own leasehold_runs row and the batch's
// stalled runs in leasehold_batches): a step that stores the items a run settled and claims the
// next ones in one statement, and the read of how many moves already landed. Every write is fenced
// on the run's own row (docs/design.md, "Fan-out"): a run that lost its lease moves and claims
// nothing, and a move lands only on an item still running under the run at the attempts it was
// claimed with, so a retried move is idempotent.
import { plansEachStatement, type Sql } from '../../store/connect.js';
import { storableText } from '../values.js';
import type { ItemState } from '../types.js';
import { beatAnswers, beatResult, ownRun, type BeatResult, type BeatRow } from './shared.js';
import type { WokeRow } from './waits.js';

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
  /**
   * How the item's last wait ended (migration 034; docs/design.md, "Waiting items: callbacks and
   * sleeps"); null when none. Absent from rows claimed by statements that do not read it.
   */
  woke?: WokeRow | null;
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
  /** Error text (made storable again as it is encoded: no NUL, no lone surrogate, bounded); null for none. */
  error: string | null;
  /** For a move back to pending: wait before the next claim, ms (clamped to {@link MAX_DELAY_MS}). */
  delayMs: number;
  /** The item's Retry-After waits after the move (docs/design.md, "Retry-After"); unset: unchanged. */
  waits?: number;
}

/** Longest retry delay any statement will write, ms (one day): no computed time can overflow. */
export const MAX_DELAY_MS = 86_400_000;

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
    s += `${i ? ',' : ''}{"key":${JSON.stringify(m.key)},"state":"${m.state}","claimed":${m.claimed},"attempts":${m.attempts},"output":${m.output ?? 'null'},"error":${m.error === null ? 'null' : JSON.stringify(storableText(m.error))},"delay_ms":${delay},"waits":${m.waits ?? 'null'}}`;
  }
  return `${s}]`;
}

// The item writes of one run, fenced on the run's own lease (`own`):
// - `moved`: an item the run settled, from running at the attempts it was claimed with to its
//   new state. A retry waits `delay_ms` (clamped to MAX_DELAY_MS, so no time can overflow).
//   Idempotent when retried: an item already at the target state and attempts by this run
//   counts as moved.
export function moved(sql: Sql, batchId: string, run: string, moves: EncodedMoves) {
  // Each moved key is looked up on the whole primary key through a lateral subquery (a
  // parameterized nested loop: the planner has no other choice), and the row is then updated
  // by its ctid: no plan of it walks the batch, whatever the statistics say of the batch's size
  // (docs/design.md, "The database in production"). The batch is a subquery, as in the claim
  // (see `stepStatement`): a custom plan that knew it costed each look-up below the generic
  // plan's, and the plan cache planned every call anew.
  return sql`with m as (
      select t.tid, v.* from jsonb_to_recordset(${moves.json}::text::jsonb)
        as v(key text, state text, claimed int, attempts int, output jsonb, error text, delay_ms double precision, waits int)
      cross join lateral (
        select x.ctid as tid from leasehold_items x where x.batch_id = (select ${batchId}::uuid) and x.key = v.key limit 1
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
  /**
   * The beat the statement's fence carried ({@link StepArgs.beat}): what a beat answers; null when
   * it carried none.
   */
  beat: BeatResult | null;
}

// Moves the settled items and claims up to `claim` pending items due within `aheadMs` (oldest
// due first, skipping rows other runs' transactions hold) in one statement, both fenced on the
// run's own lease. With moves, the fence is an update of the run's row that adds the items it
// settled; with `recordProgress` the batch's stalled runs go to 0. Also answers how soon the
// next pending item left becomes due.
export async function step(sql: Sql, a: StepArgs): Promise<StepResult> {
  const [r] = await sql<
    { moved: number; claimed: ClaimedRow[] | null; next_due_ms: number | null; beat: BeatRow | null | undefined }[]
  >`${plansEachStatement(sql) ? stepCall(sql, a) : stepStatement(sql, a)}`;
  const beat = a.beat && (a.settled ?? 0) > 0 ? beatResult(r.beat ?? undefined) : null;
  return { moved: r.moved, claimed: r.claimed ?? [], nextDueMs: r.next_due_ms, beat };
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
  /**
   * The fence beats for the run as well (only with `settled` > 0, when it updates the run's row):
   * it sets the run's `beat_at` and the statement answers what a beat answers (`beat` of the
   * result), so a run whose moves land often sends no beat of its own (docs/design.md,
   * "Batches": a move that beats). Default false.
   */
  beat?: boolean;
}

// The fence of a statement that moves items: the run's row, updated when the moves settle
// items (its count of settled items, and its beat with `beat`), else locked key share.
function ownMoving(sql: Sql, run: string, settled: number, beat: boolean) {
  if (settled <= 0) return ownRun(sql, run);
  return beat
    ? sql`update leasehold_runs set settled = settled + ${settled}, beat_at = now() where id = ${run}
        returning id, batch_id, started_at`
    : sql`update leasehold_runs set settled = settled + ${settled} where id = ${run} returning id`;
}

// A batch's stalled runs back to 0 once a run of it stored a move (written only when not 0).
function progress(sql: Sql, batchId: string, recordProgress: boolean) {
  return sql`update leasehold_batches set stalled_runs = 0
    where ${recordProgress} and id = ${batchId} and stalled_runs > 0 and exists (select 1 from own)
    returning 1`;
}

/**
 * The move + claim as a call of the server-side function `leasehold_step` (migration 043), for a
 * pool in pooler mode: the function's statement is {@link stepStatement}'s, and its plan stays in
 * the server session that ran it, where this statement's would be planned at every call behind a
 * transaction-mode pooler (docs/design.md, "Database connections"). Same answer as
 * {@link stepStatement}.
 */
export function stepCall(sql: Sql, a: StepArgs) {
  return sql`select o_moved as moved, o_claimed as claimed, o_next_due_ms as next_due_ms, o_beat as beat
    from leasehold_step(${a.batchId}::uuid, ${a.run}::uuid, ${a.moves.json}::text, ${a.settled ?? 0}::int,
      ${a.claim}::int, ${a.aheadMs}::float8, ${a.recordProgress}::boolean, ${a.beat ?? false}::boolean)`;
}

/**
 * The move + claim statement as a fragment (the plan test reads its plan with EXPLAIN). Migration
 * 043's `leasehold_step` is the same statement as a function: a change here is a change there.
 */
// How it reads (the comments are here, not in the statement's text: every cold start loads that
// text, and every connection sends it to the server):
// - `picked`: the batch, the window and the claim size are subqueries, which no plan folds to
//   constants: a custom plan estimates the pick as the generic plan does, so the plan cache keeps
//   the generic one (made once per connection, after five custom ones) instead of planning every
//   call anew (docs/design.md, "The database in production").
// - `claimed`: the picked rows are locked, so their ctids stay theirs: a Tid Scan, never a walk
//   of the batch.
// - `claimed` of the answer: items come back in the order they start, by due time, ties by key
//   (an unstable sort of equal due times started a later key first now and then).
// - `next_due_ms`: the first entry of the pending index past the window (min() let a planner that
//   thought the batch small read every pending item).
export function stepStatement(sql: Sql, a: StepArgs) {
  return sql`with own as (
      ${ownMoving(sql, a.run, a.settled ?? 0, a.beat ?? false)}
    ), progress as (
      ${progress(sql, a.batchId, a.recordProgress)}
    ), moved as (
      ${moved(sql, a.batchId, a.run, a.moves)}
    ), picked as (
      select ctid from leasehold_items
      where batch_id = (select ${a.batchId}::uuid) and state = 'pending' and exists (select 1 from own)
        and run_after <= now() + make_interval(secs => (select ${a.aheadMs} / 1000.0))
      order by run_after
      limit (select ${a.claim}::int)
      for update skip locked
    ), claimed as (
      update leasehold_items i
      set state = 'running', attempts = i.attempts + 1, run_id = ${a.run}, updated_at = now()
      where i.ctid = any(array(select ctid from picked))
      returning i.key, i.input, i.attempts, i.waits, i.run_after, i.checkpoint, i.woke
    )
    select (select count(*) from moved)::int as moved,
      (select json_agg(json_build_object('key', key, 'input', input, 'attempts', attempts, 'waits', waits,
          'due_in_ms', greatest(0, extract(epoch from run_after - now()) * 1000), 'checkpoint', checkpoint,
          'woke', woke)
          order by run_after, key)
        from claimed) as claimed,
      (select extract(epoch from run_after - now()) * 1000 from leasehold_items
        where batch_id = (select ${a.batchId}::uuid) and state = 'pending'
          and run_after > now() + make_interval(secs => (select ${a.aheadMs} / 1000.0))
        order by run_after limit 1)::float8 as next_due_ms,
      ${a.beat && (a.settled ?? 0) > 0 ? sql`(select row_to_json(x) from (select ${beatAnswers(sql)} from own r) x)` : sql`null::json`} as beat`;
}
