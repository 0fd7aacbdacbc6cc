// Statements of waiting items (leasehold_waits, leasehold_items' state `waiting` and `woke`, and
// the target of leasehold_batches; migration 034; docs/design.md, "Waiting items: callbacks and
// sleeps"). An attempt registers a wait while its item runs (fenced on its run's lease and on the
// item running under it at the attempts it was claimed with); its move to `waiting` is an ordinary
// move (sql/moves.ts). A wake — a completion, the expiry pass, the run's own wake of an answer that
// came before its move or of its own sleeps come due — turns a waiting item back to pending, due now, with how the wait ended in
// `woke`, deletes its wait row and gives its batch a run again when it had parked. The last run of
// a batch whose only items left are waiting parks it: it leaves with the batch's target at 0, so
// no worker is sent until a wake raises it.
//
// Lock order: a wake locks the wait row, then the item, then the batch row (item rows before the
// batch row). The ends lock the batch row and then the items still pending or running: a waiting
// item being woken is neither in any snapshot an end reads, so an end never waits for it. The park
// locks its run row, then the batch row, and reads the items in a second statement (a fresh
// snapshot): a wake that committed before it is seen, and one that had not yet locked the batch
// row raises the target after the park.
import type { Sql } from '../../store/index.js';
import { MAX_WAIT_MS } from '../types.js';
import { ownRun } from './shared.js';
import { anyWaiting } from './waiting.js';

/** How a wait ends, as `woke` stores it and the next attempt reads it (`ctx.callback`). */
export interface WokeRow {
  /** The wait's id (the token names it). */
  id: string;
  kind: 'callback' | 'sleep';
  /** The attempt that registered the wait. */
  attempt: number;
  status: 'succeeded' | 'failed' | 'timedOut' | 'slept';
  result?: unknown;
  error?: string;
  /** For `timedOut`: `timeout` (timeoutMs passed) or `heartbeat` (heartbeatTimeoutMs passed). */
  reason?: 'timeout' | 'heartbeat';
}

/** What {@link registerWait} writes. */
export interface WaitRegistration {
  batchId: string;
  run: string;
  key: string;
  /** The item's attempts when this run claimed it. */
  claimed: number;
  /** A fresh random id (UUID). */
  id: string;
  kind: 'callback' | 'sleep';
  /** ms from now (database clock) until the wait ends by time: a callback's timeout, a sleep's wake. */
  wakeInMs: number;
  /** A sleep's wake instant instead (`sleepUntil`), at most {@link MAX_WAIT_MS} from now; null: use wakeInMs. */
  wakeAt?: Date | null;
  /** A callback's heartbeat timeout, ms; null: none. */
  heartbeatTimeoutMs: number | null;
  /** The callback's payload as JSON text; null: none. */
  payload: string | null;
}

// Registers one wait of an attempt: its row in leasehold_waits, replacing an earlier one of the
// item (a wait whose attempt ended without waking). Only while the item runs under `run` at
// `claimed` attempts and the run holds its lease; answers the ms from now until the wait ends by
// time (database clock; the run times its own wake of a short sleep from it), or undefined when
// it stored nothing. The item's `woke` (how its last wait ended) is cleared in the same
// statement, so an attempt after this wait never reads the answer of the one before.
export async function registerWait(sql: Sql, w: WaitRegistration): Promise<number | undefined> {
  const rows = await sql<{ wake_in_ms: number }[]>`${registerWaitStatement(sql, w)}`;
  return rows.length === 1 ? rows[0].wake_in_ms : undefined;
}

/** {@link registerWait} as a fragment (the plan test reads its plan). */
export function registerWaitStatement(sql: Sql, w: WaitRegistration) {
  const wakeSecs = Math.min(Math.max(0, w.wakeInMs), MAX_WAIT_MS) / 1000;
  const maxSecs = MAX_WAIT_MS / 1000;
  // The item is found on its whole primary key alone and updated by its ctid (a Tid Scan), as a
  // heartbeat is: with its state in the condition a planner walked the running items' index.
  return sql`with own as (
      ${ownRun(sql, w.run)}
    ), t as (
      select x.ctid as tid from leasehold_items x where x.batch_id = ${w.batchId} and x.key = ${w.key} limit 1
    ), item as (
      update leasehold_items i set woke = null
      from t
      where i.ctid = any(array(select tid from t)) and i.ctid = t.tid and i.run_id = ${w.run} and i.state = 'running'
        and i.attempts = ${w.claimed} and exists (select 1 from own)
      returning i.batch_id, i.key
    )
    insert into leasehold_waits as x (batch_id, key, id, kind, attempt, wake_at, timeout_at, heartbeat_timeout_ms, payload)
    select batch_id, key, ${w.id}, ${w.kind}, ${w.claimed},
      case when ${w.wakeAt ?? null}::timestamptz is not null
        then least(${w.wakeAt ?? null}::timestamptz, now() + make_interval(secs => ${maxSecs}))
        else now() + make_interval(secs => least(${wakeSecs}, ${w.heartbeatTimeoutMs ?? null}::float8 / 1000.0)) end,
      case when ${w.kind} = 'callback' then now() + make_interval(secs => ${wakeSecs}) end,
      ${w.heartbeatTimeoutMs}, ${w.payload}::text::jsonb
    from item
    on conflict (batch_id, key) do update
      set id = excluded.id, kind = excluded.kind, attempt = excluded.attempt, wake_at = excluded.wake_at,
          timeout_at = excluded.timeout_at, heartbeat_timeout_ms = excluded.heartbeat_timeout_ms,
          payload = excluded.payload, answer = null, created_at = now()
    returning greatest(0, extract(epoch from x.wake_at - now()) * 1000)::float8 as wake_in_ms`;
}

// Deletes a wait its attempt registered and then did not wait on (the work threw after it):
// fenced on the run's lease; a wait already answered stays for the expiry pass, which keeps its
// answer for a later attempt.
export async function dropWait(sql: Sql, a: { batchId: string; run: string; key: string; id: string }): Promise<void> {
  await sql`with own as (${ownRun(sql, a.run)})
    delete from leasehold_waits
    where batch_id = ${a.batchId} and key = ${a.key} and id = ${a.id} and answer is null and exists (select 1 from own)`;
}

/** One wait to wake, by its item. */
interface WakeTarget {
  batch_id: string;
  key: string;
}

// The wake of waits: for each (batch, key) whose item is waiting on the wait it registered (the
// item's attempts one below the wait's attempt: the move to waiting gave the attempt back), the
// item goes back to pending due now with `woke` saying how the wait ended — its answer, else
// `slept` for a sleep, else `timedOut` — and the wait row is deleted. Answers the woken items'
// batches with how many woke in each. Locks the wait rows and the items (none of a batch row).
async function wakeItems(t: Sql, targets: WakeTarget[]): Promise<{ batch_id: string; n: number }[]> {
  if (targets.length === 0) return [];
  return t<{ batch_id: string; n: number }[]>`with t as (
      select * from jsonb_to_recordset(${JSON.stringify(targets)}::text::jsonb) as v(batch_id uuid, key text)
    ), w as (
      delete from leasehold_waits w
      using t, leasehold_items i
      where w.batch_id = t.batch_id and w.key = t.key
        and i.batch_id = w.batch_id and i.key = w.key and i.state = 'waiting' and i.attempts = w.attempt - 1
      returning w.*
    ), up as (
      update leasehold_items i
      set state = 'pending', run_after = now(), updated_at = now(),
          woke = ${wokeFrom(t)}
      from w
      where i.batch_id = w.batch_id and i.key = w.key and i.state = 'waiting'
      returning i.batch_id
    )
    select batch_id, count(*)::int as n from up group by batch_id`;
}

// A batch that parked (target 0, not paused) gets runs again for the items a wake made due: one
// per RUN_ITEMS woken items, at least one, at most its maxConcurrency; its dispatch mark cleared
// so the scheduler sends them in its next pass. Batch rows are locked in id order.
// The batch rows are locked first, whatever their target, in a statement of their own: a park
// that holds one is waited for, and the update, from a later snapshot, then sees its target 0
// (one statement would judge the target by its own snapshot, from before the park, and leave
// the woken items in a parked batch); a park that comes later sees the woken items.
async function unpark(t: Sql, woken: { batch_id: string; n: number }[]): Promise<string[]> {
  if (woken.length === 0) return [];
  const v = JSON.stringify(woken);
  await t`select b.id from leasehold_batches b
    where b.id = any(array(select (x ->> 'batch_id')::uuid from jsonb_array_elements(${v}::text::jsonb) x))
    order by b.id for no key update`;
  const rows = await t<{ id: string }[]>`update leasehold_batches b
    set target = least(b.max_concurrency, greatest(1, ceil(v.n / 100.0)::int)), dispatched_at = null
    from jsonb_to_recordset(${v}::text::jsonb) as v(batch_id uuid, n int)
    where b.id = v.batch_id and b.target = 0 and b.paused_at is null and b.status = 'open'
    returning b.id`;
  return rows.map((r) => r.id);
}

/** What {@link wakeSleeps} did. */
export interface SleepsWoken {
  /** Items woken (pending again, due now). */
  woken: number;
  /** Batches that had parked and now want runs again (the run's lease was lost meanwhile). */
  unparked: string[];
  /** Sleeps not yet due by the database clock: their keys and ms until they are. */
  later: { key: string; dueInMs: number }[];
}

// A run's own wake of its items' sleeps that came due (docs/design.md, "Waiting items: callbacks
// and sleeps"): the expiry pass's wake, for waits of one batch this run registered. Each names its
// item's key, the wait's id and its length: the ms from its registration (`created_at`) to its wake,
// as the registration answered them, so "due" is `created_at` + that length <= now() by the
// database clock, whatever a pass that met the attempt still running did to `wake_at` (it defers
// such a wait a minute). A sleep due whose item waits on it (waiting, its attempts one below the
// wait's) wakes as the pass wakes it — its wait row deleted, the item pending due now with `woke`
// saying it slept — and a parked batch gets a run again (unpark: a run that lost its lease may wake
// an item of a batch another run parked). Not fenced on the run: a wake by time is anyone's to make,
// and the wait row's delete makes it once (a pass or another wake that deleted it first leaves this
// one nothing). Answers too the sleeps not yet due, with the ms left; any other (its wait gone or
// replaced, its item not waiting on it) is forgotten: the expiry pass deals with what is left.
export async function wakeSleeps(
  sql: Sql,
  batchId: string,
  sleeps: { key: string; id: string; ms: number }[],
): Promise<SleepsWoken> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const rows = await t<{ key: string; due_in_ms: number | null }[]>`${wakeSleepsStatement(t, { batchId, sleeps })}`;
    const woken = rows.filter((r) => r.due_in_ms === null).length;
    const later = rows.filter((r) => r.due_in_ms !== null).map((r) => ({ key: r.key, dueInMs: r.due_in_ms! }));
    return { woken, later, unparked: woken > 0 ? await unpark(t, [{ batch_id: batchId, n: woken }]) : [] };
  }) as Promise<SleepsWoken>;
}

/**
 * {@link wakeSleeps}'s statement as a fragment (the plan test reads its plan). Each sleep's wait is
 * found by its whole primary key through a lateral look-up (a nested loop the planner cannot
 * turn into a walk of the batch's waits), then deleted by its ctid; each woken item is found the
 * same way and updated by its ctid: the statement reads a few rows per sleep, whatever the
 * statistics say of the batch's waits or items (docs/design.md, "The database in production").
 */
export function wakeSleepsStatement(sql: Sql, a: { batchId: string; sleeps: { key: string; id: string; ms: number }[] }) {
  return sql`with k as (
      select v.key, l.tid, l.created_at + make_interval(secs => v.ms / 1000.0) as due_at, it.tid as item
      from jsonb_to_recordset(${JSON.stringify(a.sleeps)}::text::jsonb) as v(key text, id uuid, ms float8)
      cross join lateral (
        select x.ctid as tid, x.created_at, x.attempt from leasehold_waits x
        where x.batch_id = (select ${a.batchId}::uuid) and x.key = v.key and x.id = v.id and x.kind = 'sleep'
        limit 1
      ) l
      -- Its item, while it waits on this wait (its attempts one below the wait's).
      left join lateral (
        select y.ctid as tid from leasehold_items y
        where y.batch_id = (select ${a.batchId}::uuid) and y.key = v.key and y.state = 'waiting' and y.attempts = l.attempt - 1
        limit 1
      ) it on true
    ), w as (
      -- By its ctid, found with the sleep (k): a Tid Scan, never a walk of the batch's waits.
      delete from leasehold_waits w
      using k
      where w.ctid = any(array(select tid from k where due_at <= now() and item is not null)) and w.ctid = k.tid
      returning w.*
    ), up as (
      update leasehold_items i
      set state = 'pending', run_after = now(), updated_at = now(), woke = ${wokeFrom(sql)}
      from w join k on k.key = w.key
      where i.ctid = any(array(select item from k where due_at <= now())) and i.ctid = k.item and i.state = 'waiting'
      returning i.key
    )
    select key, null::float8 as due_in_ms from up
    union all
    select key, extract(epoch from due_at - now())::float8 * 1000 from k where due_at > now()`;
}

/** What {@link wakeAnswered} did. */
export interface WakeResult {
  /** Items woken (pending again). */
  woken: number;
  /** Batches that had parked and now want runs again. */
  unparked: string[];
}

// Wakes the items among `keys` of a batch whose wait was answered while they still ran (a
// completion that came before their move to waiting landed): sent by the run after a move that
// parked items. Not fenced on the run: a wake is anyone's to make. It waits for a completion in
// flight on one of them (never skips it): a completion that saw the item still running, and
// whose answer commits after this move, is woken here, before the run may park the batch.
// So every wait row of `keys` is locked, answered or not, and whether it is answered is read
// from the row as locked: a condition on the answer in the locking statement would be judged
// on the statement's snapshot, where an answer not yet committed is still null, and the row
// would be passed over without waiting for its completion — which, having read the item still
// running, wakes nothing either, leaving an answered item waiting in a parked batch.
export async function wakeAnswered(sql: Sql, batchId: string, keys: string[]): Promise<WakeResult> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const rows = await t<{ key: string; answered: boolean }[]>`select key, answer is not null as answered
      from leasehold_waits
      where batch_id = ${batchId} and key = any(array(select jsonb_array_elements_text(${JSON.stringify(keys)}::text::jsonb)))
      order by key for update`;
    const woken = await wakeItems(
      t,
      rows.filter((r) => r.answered).map((r) => ({ batch_id: batchId, key: r.key })),
    );
    return { woken: woken.reduce((n, w) => n + w.n, 0), unparked: await unpark(t, woken) };
  }) as Promise<WakeResult>;
}

/** What one {@link expireWaits} pass did. */
export interface ExpiryResult {
  /** Items woken: timed out, slept, or answered while they ran. */
  woken: number;
  /** Wait rows deleted whose item no longer waited on them. */
  dropped: number;
  /** Waits whose attempt still runs, looked at again later. */
  deferred: number;
  /** Batches that had parked and now want runs again. */
  unparked: string[];
}

/** How long a wait whose attempt still runs is left before the expiry pass looks again, s. */
const DEFER_S = 60;

// The expiry pass (the scheduler's `waits` service): up to `limit` waits due by time, soonest
// first, from the index on wake_at alone (never a scan of items or waits), skipping rows a
// completion holds. A wait whose item waits on it wakes (timed out, slept, or answered) in the
// same statement that finds it (set-based: no second look-up of the same rows); one whose attempt
// still runs (it registered, its move has not landed) is looked at again in a minute; any other is
// stale (its attempt ended without waiting, its run died) and is deleted, its answer, if it had
// one, kept in the item's `woke` for a later attempt. Items of a finished batch wake too (pending,
// never run), so the pass never meets them again. Deferred and stale waits (rare: a run's
// registration in flight, a failed attempt) take one more statement each.
export async function expireWaits(sql: Sql, limit: number): Promise<ExpiryResult> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const rows = await t<ExpiryRow[]>`${expiryStatement(t, { limit })}`;
    const woken = rows.filter((r) => r.fate === 'woke').map((r) => ({ batch_id: r.batch_id, n: r.n }));
    const defer = rows.filter((d) => d.fate === 'defer').map((d) => ({ batch_id: d.batch_id, key: d.key }));
    const drop = rows.filter((d) => d.fate === 'drop').map((d) => ({ batch_id: d.batch_id, key: d.key }));
    if (defer.length > 0) {
      await t`update leasehold_waits w set wake_at = now() + make_interval(secs => ${DEFER_S})
        from jsonb_to_recordset(${JSON.stringify(defer)}::text::jsonb) as v(batch_id uuid, key text)
        where w.batch_id = v.batch_id and w.key = v.key`;
    }
    if (drop.length > 0) {
      await t`with d as (
          delete from leasehold_waits w
          using jsonb_to_recordset(${JSON.stringify(drop)}::text::jsonb) as v(batch_id uuid, key text)
          where w.batch_id = v.batch_id and w.key = v.key
          returning w.*
        )
        update leasehold_items i
        set woke = jsonb_build_object('id', d.id, 'kind', d.kind, 'attempt', d.attempt) || d.answer
        from d where i.batch_id = d.batch_id and i.key = d.key and d.answer is not null`;
    }
    return {
      woken: woken.reduce((n, w) => n + w.n, 0),
      dropped: drop.length,
      deferred: defer.length,
      unparked: await unpark(t, woken),
    };
  }) as Promise<ExpiryResult>;
}

/** A row of {@link expiryStatement}: a batch's woken items (`woke`, `n`), or one wait left (`defer`, `drop`). */
interface ExpiryRow {
  fate: 'woke' | 'defer' | 'drop';
  batch_id: string;
  /** The wait's item key (`defer`, `drop`); null for `woke`. */
  key: string | null;
  /** Items of the batch woken (`woke`); 0 otherwise. */
  n: number;
}

/**
 * The expiry pass's statement as a fragment (the plan test reads its plan): the first `limit`
 * waits of the index on wake_at that are due, locked (skipping locked ones), each with its item's
 * fate; those whose item waits on them woken (wait row deleted, item pending due now, with how the
 * wait ended in `woke`). Answers one `woke` row per batch with its count, and one row per wait
 * left to defer or drop. Must run in a transaction (its locks and the deferred and dropped rows'
 * statements go together).
 */
export function expiryStatement(sql: Sql, { limit }: { limit: number }) {
  // The index on (wake_at, batch_id, key) is walked one entry at a time (a recursive query whose
  // every step is `> the last entry … limit 1`, an index scan whatever the statistics say): a plain
  // `order by wake_at limit n` let a planner that thought the table small read all of it and sort.
  // `due` is materialized: the wake's delete and update read it once, and its row locks are taken
  // before them (the lock order of a wake: wait rows, then items).
  return sql`with recursive walk as (
      (select w.wake_at, w.batch_id, w.key, 1 as n from leasehold_waits w
       where w.wake_at <= now() order by w.wake_at, w.batch_id, w.key limit 1)
      union all
      (select x.wake_at, x.batch_id, x.key, walk.n + 1 from walk
       cross join lateral (
         select w.wake_at, w.batch_id, w.key from leasehold_waits w
         where (w.wake_at, w.batch_id, w.key) > (walk.wake_at, walk.batch_id, walk.key) and w.wake_at <= now()
         order by w.wake_at, w.batch_id, w.key limit 1
       ) x
       where walk.n < ${limit})
    ), due as materialized (
      select w.batch_id, w.key,
        case when i.state = 'waiting' and i.attempts = w.attempt - 1 then 'wake'
             when i.state = 'running' and i.attempts = w.attempt then 'defer'
             else 'drop' end as fate
      from walk
      cross join lateral (
        select l.batch_id, l.key, l.attempt from leasehold_waits l
        where l.batch_id = walk.batch_id and l.key = walk.key and l.wake_at <= now()
        for update skip locked
      ) w
      left join lateral (
        select x.state, x.attempts from leasehold_items x
        where x.batch_id = w.batch_id and x.key = w.key limit 1
      ) i on true
    ), gone as (
      delete from leasehold_waits w
      using due d
      where w.batch_id = d.batch_id and w.key = d.key and d.fate = 'wake'
      returning w.*
    ), up as (
      update leasehold_items i
      set state = 'pending', run_after = now(), updated_at = now(),
          woke = ${wokeFrom(sql)}
      from gone w
      where i.batch_id = w.batch_id and i.key = w.key and i.state = 'waiting'
      returning i.batch_id
    )
    select 'woke' as fate, batch_id, null as key, count(*)::int as n from up group by batch_id
    union all
    select fate, batch_id, key, 0 from due where fate <> 'wake'`;
}

/** What a completion of a callback asks for. */
export type Completion = { action: 'succeed'; result: string } | { action: 'fail'; error: string } | { action: 'heartbeat' };

/** How {@link completeWait} answered. */
export type CompletionAnswer =
  /** Stored: the item woke (`woken`), or its attempt still runs and wakes once its move lands. */
  | { outcome: 'completed'; woken: boolean; unparked: boolean }
  /** The same answer was stored before: nothing changed. */
  | { outcome: 'repeated' }
  /** The heartbeat moved the wait's heartbeat deadline (or it has none). */
  | { outcome: 'beaten' }
  /** Another answer was stored first, or the wait timed out. */
  | { outcome: 'conflict'; status: WokeRow['status'] }
  /** The batch is finished or cancelled: nothing stored. */
  | { outcome: 'finished'; status: string }
  /** No such wait: never registered, or its attempt ended without waiting. */
  | { outcome: 'gone' };

// A completion of one callback: a wait named by (batch, key, wait id), in one transaction that
// locks the wait row first, so a completion and the expiry pass (which skips locked rows) or a
// second completion are ordered; the first answer stored wins. An answer is stored only while the
// batch is open; a heartbeat moves the heartbeat deadline (never past the timeout).
export async function completeWait(
  sql: Sql,
  a: { batchId: string; key: string; id: string; completion: Completion },
): Promise<CompletionAnswer> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const [w] = await t<{ answer: { status: WokeRow['status']; result?: unknown; error?: string } | null; kind: string }[]>`
      select answer, kind from leasehold_waits
      where batch_id = ${a.batchId} and key = ${a.key} and id = ${a.id} and kind = 'callback' for update`;
    const [b] = await t<{ status: string }[]>`select status from leasehold_batches where id = ${a.batchId}`;
    if (!w) return settledBefore(t, a);
    if (!b || b.status !== 'open') return { outcome: 'finished', status: b?.status ?? 'deleted' };
    const c = a.completion;
    if (c.action === 'heartbeat') {
      if (w.answer) return { outcome: 'conflict', status: w.answer.status };
      await t`update leasehold_waits
        set wake_at = least(timeout_at, now() + make_interval(secs => heartbeat_timeout_ms / 1000.0))
        where batch_id = ${a.batchId} and key = ${a.key} and heartbeat_timeout_ms is not null`;
      return { outcome: 'beaten' };
    }
    const answer = answerJson(c);
    if (w.answer) return sameAnswer(t, w.answer, answer);
    await t`update leasehold_waits set answer = ${answer}::text::jsonb, wake_at = now()
      where batch_id = ${a.batchId} and key = ${a.key}`;
    const woken = await wakeItems(t, [{ batch_id: a.batchId, key: a.key }]);
    const unparked = await unpark(t, woken);
    return { outcome: 'completed', woken: woken.length > 0, unparked: unparked.length > 0 };
  }) as Promise<CompletionAnswer>;
}

function answerJson(c: Exclude<Completion, { action: 'heartbeat' }>): string {
  return c.action === 'succeed'
    ? `{"status":"succeeded","result":${c.result}}`
    : JSON.stringify({ status: 'failed', error: c.error });
}

// Whether `stored` (an answer) is the same as `answer` (JSON text), compared as jsonb.
async function sameAnswer(t: Sql, stored: { status: WokeRow['status'] }, answer: string): Promise<CompletionAnswer> {
  const [r] = await t<{ same: boolean }[]>`select ${JSON.stringify(stored)}::text::jsonb = ${answer}::text::jsonb as same`;
  return r.same ? { outcome: 'repeated' } : { outcome: 'conflict', status: stored.status };
}

// A completion whose wait row is gone: the wait woke before (the item's `woke` names it: the same
// answer again is a repeat, another one or a timeout a conflict), or it never was.
async function settledBefore(
  t: Sql,
  a: { batchId: string; key: string; id: string; completion: Completion },
): Promise<CompletionAnswer> {
  const [i] = await t<{ woke: (WokeRow & Record<string, unknown>) | null }[]>`
    select woke from leasehold_items where batch_id = ${a.batchId} and key = ${a.key}`;
  const woke = i?.woke;
  if (!woke || woke.id !== a.id) return { outcome: 'gone' };
  const c = a.completion;
  if (c.action === 'heartbeat' || woke.status === 'timedOut') return { outcome: 'conflict', status: woke.status };
  const stored =
    woke.status === 'succeeded' ? { status: woke.status, result: woke.result } : { status: woke.status, error: woke.error };
  return sameAnswer(t, stored, answerJson(c));
}

/** What {@link parkRun} did. */
export type ParkResult = 'parked' | 'kept' | 'lost';

/** {@link parkRun}'s answer: what it did, and for `kept` when the batch's next pending item is due. */
export interface ParkAnswer {
  result: ParkResult;
  /**
   * ms until the batch's soonest pending item is due (database clock, 0 when due), as the park's
   * fresh snapshot saw it; null when none is pending (or the run parked or lost its lease).
   */
  dueInMs: number | null;
}

// Parks a batch whose only items left are waiting: its last run leaves with the target at 0, so
// no worker is sent until a wake raises it (docs/design.md, "Waiting items: callbacks and
// sleeps"). First the run's row, then the batch row are locked (the lock order of every
// statement); then, from a fresh snapshot, the batch is parked only while this is its one run,
// its source is not being read, no item is pending or running and one is waiting. A pause keeps
// its own target 0. `kept`: something is left to do (the run goes on), with when the soonest
// pending item is due: a wake that committed after the run's wait state and before this park
// made an item due, and the run claims it now, not a beat later; `lost`: its lease is gone.
export async function parkRun(sql: Sql, a: { batchId: string; run: string }): Promise<ParkAnswer> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    const [l] = await t`select b.id from leasehold_batches b
      where b.id = ${a.batchId} and b.status = 'open'
        and exists (select 1 from leasehold_runs where id = ${a.run} and batch_id = ${a.batchId} for update)
      for no key update of b`;
    if (!l) return { result: 'lost', dueInMs: null };
    const [r] = await t<{ parked: number; due_in_ms: number | null }[]>`${parkStatement(t, a)}`;
    return r.parked === 1 ? { result: 'parked', dueInMs: null } : { result: 'kept', dueInMs: r.due_in_ms };
  }) as Promise<ParkAnswer>;
}

/** The park's second statement as a fragment (the plan test reads its plan). */
export function parkStatement(sql: Sql, { batchId, run }: { batchId: string; run: string }) {
  return sql`with due as (
      select run_after from leasehold_items where batch_id = ${batchId} and state = 'pending'
      order by run_after limit 1
    ), ok as (
      select 1 from leasehold_batches b
      where b.id = ${batchId} and b.live_runs = 1 and not b.reading
        and not exists (select 1 from due)
        and (select batch_id from leasehold_items where batch_id = ${batchId} and state = 'running'
             order by batch_id limit 1) is null
        and ${anyWaiting(sql, batchId)}
    ), parked as (
      update leasehold_batches
      set live_runs = live_runs - 1, target = 0, handed_off_at = now(), stalled_runs = greatest(stalled_runs - 1, 0)
      where id = ${batchId} and exists (select 1 from ok)
      returning id
    ), own as (
      delete from leasehold_runs where id = ${run} and exists (select 1 from parked) returning id
    )
    select (select count(*) from own)::int as parked,
      (select greatest(0, extract(epoch from run_after - now()) * 1000)::float8 from due) as due_in_ms`;
}

// The key callback tokens are signed with (migration 034). Reads only.
export async function callbackKey(sql: Sql): Promise<string> {
  const [r] = await sql<{ secret: string }[]>`select secret from leasehold_callback_keys where id = 1`;
  return r.secret;
}

// What a woken item's next attempt is told (`woke`), from its deleted wait row `w`: the answer
// of a completed callback, `slept`, or `timedOut` with why (database clock). Both wake paths
// (a run's own wake, the expiry pass) write it alike.
function wokeFrom(sql: Sql) {
  return sql`jsonb_build_object('id', w.id, 'kind', w.kind, 'attempt', w.attempt) || case
    when w.answer is not null then w.answer
    when w.kind = 'sleep' then '{"status":"slept"}'::jsonb
    else jsonb_build_object('status', 'timedOut',
      'reason', case when w.timeout_at <= now() then 'timeout' else 'heartbeat' end) end`;
}
