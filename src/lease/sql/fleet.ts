// Statements of the fleet's size that a worker runs: its start under the worker limit, and the
// invocations it plans, reserves (leasehold_invocations) and confirms. The desired count and the
// fleet's read are ./fleet-size.ts.
import type { Sql } from '../../store/index.js';

/** What one scheduling decision saw and did. */
export interface InvocationPlan {
  desired: number;
  /** Live fleet processes not retiring, before this decision. */
  live: number;
  /** Fleet invocations counted as coming, before this decision. */
  pending: number;
  /**
   * Invocations (fleet or batch) whose confirmation window passed without their worker's first
   * heartbeat, deleted by this decision: `unconfirmed` in all, `unstarted` of them never claimed
   * by a worker (the platform dropped the event: a function throttled to zero, say).
   */
  expired: { unconfirmed: number; unstarted: number };
  /**
   * Some unit has weight > 0, or some open batch is below its target by more than the workers
   * on their way for it.
   */
  work: boolean;
  /** Ids of the invocations to send now. */
  invocations: string[];
  /** Ids of the processes asked to retire now. */
  retired: string[];
}

/** No worker limit: the largest `maxWorkers` a statement compares with. */
export const NO_WORKER_LIMIT = 2_147_483_647;

// Serialises the decisions that invoke workers (the scheduler's, a start's, a replacement's).
function lockInvoking(sql: Sql) {
  return sql`select pg_advisory_xact_lock(hashtextextended('leasehold:scheduler:' || current_schema(), 0))`;
}

// Worker slots left under the worker limit: every live process (fleet or batch, retiring or
// not: each holds a Lambda until it returns) and every invocation counted as coming take one.
function workerRoom(sql: Sql, maxWorkers: number) {
  return sql`greatest(0, ${maxWorkers}::int
    - (select count(*) from leasehold_processes where expires_at > now())::int
    - (select count(*) from leasehold_invocations where confirm_by > now())::int)`;
}

/**
 * The scheduler's decision, keeping the live count of fleet processes at the desired count both
 * ways (docs/design.md, "Process membership and unit ownership"):
 * - up: workers to invoke now, as invocation ids to pass in their events —
 *   `desired − live − coming` (fleet invocations), at most `cap` and at most the room under
 *   `maxWorkers` (default no limit; docs/design.md, "Fan-out"), none when no unit has weight
 *   > 0 and no open batch is below its target by more than the workers on their way for it
 *   (fleet processes join batches below target, so raising the desired count adds runs to
 *   running batches the worker limit held back). An invocation counts as coming
 *   until its worker's first heartbeat confirms it (`invocationLive`) or for `pendingMs` (the
 *   confirmation window), so a dropped invocation holds back the count for that window only;
 * - down: exactly the surplus of live fleet processes is marked retiring, the latest started
 *   first (ties by id); each learns it on its next heartbeat and leaves. Retiring processes no
 *   longer count as live.
 * Batch workers count neither way for the desired count. Overlapping callers are serialised, so
 * they never over-invoke or over-retire.
 */
export async function planInvocations(
  sql: Sql,
  a: { cap: number; pendingMs: number; maxWorkers?: number },
): Promise<InvocationPlan> {
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await lockInvoking(t);
    // The invocations whose window passed are counted as they go: only this decision deletes them
    // (a reservation skips them), so the scheduler's run sees every one that was never confirmed.
    const [expired] = await t<{ unconfirmed: number; unstarted: number }[]>`with gone as (
        delete from leasehold_invocations where confirm_by <= now() returning claimed
      )
      select count(*)::int as unconfirmed, (count(*) filter (where not claimed))::int as unstarted from gone`;
    const [s] = await t<{ desired: number; live: number; pending: number; work: boolean; room: number }[]>`select
        coalesce((select value::int from leasehold_settings where key = 'desired'), 0) as desired,
        (select count(*) from leasehold_processes where expires_at > now() and role = 'fleet' and not retiring) as live,
        (select count(*) from leasehold_invocations where batch_id is null) as pending,
        coalesce((select weight from leasehold_unit_totals) > 0, false)
          -- A batch below its target that the workers on their way for it do not fill.
          or exists (select 1 from leasehold_batches b
                     where b.status = 'open' and b.live_runs < b.target
                       and b.live_runs + (select count(*) from leasehold_invocations i where i.batch_id = b.id) < b.target)
          as work,
        ${workerRoom(t, a.maxWorkers ?? NO_WORKER_LIMIT)} as room`;
    const surplus = Math.max(0, s.live - s.desired);
    const retired =
      surplus > 0
        ? await t<{ id: string }[]>`update leasehold_processes set retiring = true
          where id in (
            select id from leasehold_processes
            where expires_at > now() and role = 'fleet' and not retiring
            order by started_at desc, id desc limit ${surplus}
          )
          returning id`
        : [];
    const need = s.work ? Math.max(0, Math.min(a.cap, s.desired - s.live - s.pending, s.room)) : 0;
    const rows =
      need > 0
        ? await t<{ id: string }[]>`insert into leasehold_invocations (id, confirm_by)
          select gen_random_uuid(), now() + make_interval(secs => ${a.pendingMs / 1000})
          from generate_series(1, ${need}) returning id`
        : [];
    const { room: _room, ...seen } = s;
    return { ...seen, expired, invocations: rows.map((r) => r.id), retired: retired.map((r) => r.id) };
  });
}

/** A worker invocation reserved for a batch. */
export interface BatchInvocation {
  batchId: string;
  /** Passed in the worker's event; the worker confirms it on its first heartbeat. */
  invocationId: string;
}

/**
 * Reserve worker invocations for batches under the worker limit (docs/design.md, "Fan-out"):
 * `batchIds` names one batch per worker wanted (a batch that wants 3 workers appears 3 times);
 * the first ones that fit in the room under `maxWorkers` (live processes and invocations
 * counted as coming take one slot each) get an invocation id, counted as coming for
 * `pendingMs` or until its worker's first heartbeat. Decided one caller at a time with the
 * scheduler's decisions, so callers together never pass the limit.
 */
export async function reserveInvocations(
  sql: Sql,
  a: { batchIds: string[]; maxWorkers: number; pendingMs: number },
): Promise<BatchInvocation[]> {
  if (a.batchIds.length === 0) return [];
  return sql.begin(async (tx) => {
    const t = tx as unknown as Sql;
    await lockInvoking(t);
    // Invocations past their window are left for the scheduler's decision to count and delete.
    const rows = await t<BatchInvocation[]>`insert into leasehold_invocations (id, confirm_by, batch_id)
      select gen_random_uuid(), now() + make_interval(secs => ${a.pendingMs / 1000}), w.batch_id::uuid
      from jsonb_array_elements_text(${t.json(a.batchIds)}) with ordinality as w(batch_id, n)
      where w.n <= ${workerRoom(t, a.maxWorkers)}
      returning batch_id as "batchId", id as "invocationId"`;
    return rows;
  });
}

/** What a worker's first statement found (see {@link workerStart}). */
export interface WorkerStart {
  /** The schema version: the newest migration applied. */
  schemaVersion: number;
  /** The event's invocation was pending and this worker claimed it (false without an invocation id). */
  claimed: boolean;
  /** The status of the event's batch (`open`, …); null without a batch id or when there is no such batch. */
  batchStatus: string | null;
}

/**
 * A worker's first statement (docs/design.md, "Late and repeated worker events"), one round trip:
 * the schema version; the claim of its invocation, only while it is pending (within its
 * confirmation window) and claimed by no other delivery of the same event (the row stays,
 * counted as coming, until the first heartbeat deletes it); and the status of its batch.
 * With `startMs` (ms; the worker passes its TTL), the claim also shortens the invocation's window
 * to at most `startMs` from now: a worker that died after its claim (before or just after its
 * first heartbeat) stops counting as coming when its process row would expire, not a whole
 * confirmation window later, so the scheduler replaces it on its next run (docs/deploy.md,
 * "Faults and how leasehold answers them").
 */
export async function workerStart(
  sql: Sql,
  e: { invocationId?: string; batchId?: string },
  startMs?: number,
): Promise<WorkerStart> {
  const window =
    startMs === undefined ? sql`confirm_by` : sql`least(confirm_by, now() + make_interval(secs => ${startMs / 1000}))`;
  const [r] = await sql<WorkerStart[]>`with claim as (
      update leasehold_invocations set claimed = true, confirm_by = ${window}
      where id = ${e.invocationId ?? null}::uuid and not claimed and confirm_by > now()
      returning 1
    )
    select (select coalesce(max(version), 0) from leasehold_migrations)::int as "schemaVersion",
      exists (select 1 from claim) as claimed,
      (select status from leasehold_batches where id = ${e.batchId ?? null}::uuid) as "batchStatus"`;
  return r;
}

/**
 * An invoked worker became live (its first heartbeat): its invocation no longer counts as coming.
 */
export async function invocationLive(sql: Sql, invocationId: string): Promise<void> {
  await sql`delete from leasehold_invocations where id = ${invocationId}`;
}
