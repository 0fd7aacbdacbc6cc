// Statements of item heartbeats and checkpoints (leasehold_items' heartbeat_at, progress and
// checkpoint, migration 024; docs/design.md, "Item heartbeats and checkpoints"). Like every item
// write they are fenced on the writing run's own lease (its row, locked key share by `ownRun`)
// and on the item being running under that run at the attempts it was claimed with, so an
// attempt that was recovered, a run that lost its batch, or an item that settled meanwhile
// changes nothing.
import type { Sql } from '../../store/index.js';
import { ownRun } from './shared.js';

/** What {@link beatItem} writes for one attempt of one item. */
export interface ItemBeat {
  batchId: string;
  run: string;
  key: string;
  /** The item's attempts when this run claimed it. */
  claimed: number;
  /** New progress as JSON text (null: clear it); undefined: the stored progress stays. */
  progress?: string | null;
  /** New checkpoint as JSON text (null: clear it); undefined: the stored checkpoint stays. */
  checkpoint?: string | null;
}

// One heartbeat of an item's attempt: heartbeat_at = now(), with its progress and checkpoint when
// given. Changes the one item (whole primary key) only while it is running under `run` at
// `claimed` attempts and the run holds its lease; answers whether it did.
export async function beatItem(sql: Sql, b: ItemBeat): Promise<boolean> {
  const rows = await sql`${beatItemStatement(sql, b)}`;
  return rows.length === 1;
}

/** {@link beatItem} as a fragment (the plan test reads its plan). */
export function beatItemStatement(sql: Sql, b: ItemBeat) {
  const setProgress = b.progress !== undefined;
  const setCheckpoint = b.checkpoint !== undefined;
  // JSON text cast in SQL: a jsonb parameter would be serialised a second time.
  // The item is found on the whole primary key alone and updated by its ctid (a Tid Scan), as the
  // moves are: with the batch and its state in the update's condition, or the ctid alone, a
  // planner walked the running items through their partial index (the plan test's bound).
  return sql`with own as (
      ${ownRun(sql, b.run)}
    ), t as (
      select x.ctid as tid from leasehold_items x where x.batch_id = ${b.batchId} and x.key = ${b.key} limit 1
    )
    update leasehold_items i
    set heartbeat_at = now(),
        progress = case when ${setProgress} then ${b.progress ?? null}::text::jsonb else i.progress end,
        checkpoint = case when ${setCheckpoint} then ${b.checkpoint ?? null}::text::jsonb else i.checkpoint end
    from t
    where i.ctid = any(array(select tid from t)) and i.ctid = t.tid and i.run_id = ${b.run} and i.state = 'running'
      and i.attempts = ${b.claimed} and exists (select 1 from own)
    returning 1`;
}

/** What {@link recoverStaleItems} takes. */
export interface StaleArgs {
  batchId: string;
  run: string;
  /** The run's candidates, as the JSON text of `[{"key", "claimed"}]`. */
  items: string;
  /** The job's `itemStaleMs`, ms. */
  staleMs: number;
  /** The attempts an item may use. */
  attempts: number;
}

/** An item {@link recoverStaleItems} recovered, and where it went. */
export interface StaleItem {
  key: string;
  state: 'pending' | 'failed';
}

// Recovers the run's own attempts whose heartbeat is older than `staleMs` (database clock; none
// yet counts as older) as a takeover recovers a gone run's items (recoverRunning): the attempt
// counts, the item goes back to pending due now, or to failed when its attempts are used up.
// Only the candidates the run names (attempts it started at least `staleMs` ago by its clock),
// each still running under this run at the attempts it was claimed with; fenced on the run's lease.
export async function recoverStaleItems(sql: Sql, a: StaleArgs): Promise<StaleItem[]> {
  return sql<StaleItem[]>`${recoverStaleStatement(sql, a)}`;
}

/** {@link recoverStaleItems} as a fragment (the plan test reads its plan). */
export function recoverStaleStatement(sql: Sql, a: StaleArgs) {
  // Each candidate is one look-up on the whole primary key (LATERAL … LIMIT 1) and its row is
  // updated by ctid, as the moves are: no plan walks the batch (docs/design.md, "The database in
  // production").
  return sql`with own as (
      ${ownRun(sql, a.run)}
    ), m as (
      select t.tid, v.claimed from jsonb_to_recordset(${a.items}::text::jsonb) as v(key text, claimed int)
      cross join lateral (
        select x.ctid as tid from leasehold_items x where x.batch_id = ${a.batchId} and x.key = v.key limit 1
      ) t
    )
    update leasehold_items i
    set state = case when i.attempts >= ${a.attempts} then 'failed' else 'pending' end,
        error = 'no heartbeat within itemStaleMs (' || ${a.staleMs}::int || ' ms; attempt ' || i.attempts
          || ' of ' || ${a.attempts}::int || ')',
        run_after = greatest(i.run_after, now()), updated_at = now()
    from m
    where i.ctid = any(array(select tid from m)) and i.ctid = m.tid and i.run_id = ${a.run}
      and i.state = 'running' and i.attempts = m.claimed and exists (select 1 from own)
      and (i.heartbeat_at is null or i.heartbeat_at < now() - make_interval(secs => ${a.staleMs} / 1000.0))
    returning i.key, i.state`;
}
