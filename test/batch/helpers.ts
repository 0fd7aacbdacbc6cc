// Shared pieces of the batch tests: batch inputs, promises to steer item work, polling, and an
// audit of every row change so tests can assert on the order of writes in the database.
import type { Sql } from '../../src/store/index.js';
import type { ItemInput, ItemState, NewBatch, RunResult, Runner } from '../../src/batch/index.js';

let seq = 0;

/** A batch of `n` items `k000`, `k001`, … with a request key unique in this process. */
export function newBatch(
  n: number,
  overrides: Partial<NewBatch> & { items?: ItemInput[] } = {},
): NewBatch & { items: ItemInput[] } {
  seq += 1;
  return {
    tenant: 'acme',
    datasource: 'files',
    job: 'test',
    params: { n },
    requestKey: `req-${process.pid}-${seq}-${Math.random().toString(36).slice(2, 8)}`,
    items: Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}`, input: { i } })),
    ...overrides,
  };
}

/** The run result of batch `id` in `runner`; throws when the runner does not run it. */
export function runOf(runner: Runner, id: string): Promise<RunResult> {
  const p = runner.running(id);
  if (!p) throw new Error(`runner ${runner.owner()} does not run batch ${id}`);
  return p;
}

/** One stored item, as the tests read it. */
export interface ItemRow {
  key: string;
  state: ItemState;
  attempts: number;
  run_id: string | null;
  output: unknown;
  error: string | null;
  updated_at: Date;
}

export function itemRows(sql: Sql, batchId: string): Promise<ItemRow[]> {
  return sql<ItemRow[]>`select key, state, attempts, run_id, output, error, updated_at
    from leasehold_items where batch_id = ${batchId} order by key`;
}

export async function itemCounts(sql: Sql, batchId: string): Promise<Record<ItemState, number>> {
  const rows = await sql<{ state: ItemState; n: number }[]>`select state, count(*) as n
    from leasehold_items where batch_id = ${batchId} group by state`;
  // `waiting` only when some item waits (docs/design.md, "Waiting items"), so the counts of
  // batches without waits compare as before.
  const c = { pending: 0, running: 0, done: 0, failed: 0 } as Record<ItemState, number>;
  for (const r of rows) c[r.state] = r.n;
  return c;
}

/** One recorded change of an item row (see {@link installAudit}). */
export interface ItemChange {
  seq: number;
  /** The transaction that made the change (`pg_current_xact_id()`, as text). */
  xid: string;
  batch_id: string;
  key: string;
  old_state: ItemState;
  state: ItemState;
  attempts: number;
  run_id: string | null;
  /** run_after − updated_at of the new row, ms: the retry delay of a move back to pending. */
  delay_ms: number;
  run_after: Date;
  updated_at: Date;
}

/** One recorded change of a batch row (see {@link installAudit}). */
export interface BatchChange {
  seq: number;
  id: string;
  /** The transaction that made the change (`pg_current_xact_id()`, as text). */
  xid: string;
  old_status: string;
  status: string;
  old_live_runs: number;
  live_runs: number;
  old_target: number;
  target: number;
  old_max_concurrency: number;
  max_concurrency: number;
  old_finished_at: Date | null;
  finished_at: Date | null;
  /** Run rows of this batch the same transaction deleted (ended every run of it, or replaced one). */
  runs_ended: string[];
}

/** One recorded insert or delete of a run row, `leasehold_runs` (see {@link installAudit}). */
export interface RunChange {
  seq: number;
  op: 'insert' | 'delete';
  id: string;
  batch_id: string;
  process: string;
  xid: string;
}

/**
 * Record every update of `leasehold_items` and `leasehold_batches`, and every insert and delete
 * of `leasehold_runs`, in the test's schema, numbered from one sequence (`seq`) in an order
 * consistent with commits where it matters: a row's changes are ordered by its row lock, and a
 * fenced move locks its run's row (key share, or an update of it) while it writes, so a move of a
 * run and the deletion of that run's row (a takeover of it, a cancel, a finish, an end) never
 * interleave: every change of the move has a lower `seq` than the deletion, or the move changes
 * nothing. Each record carries its transaction (`xid`), so the run rows one statement deleted
 * can be matched with its change of the batch row.
 */
export async function installAudit(sql: Sql): Promise<void> {
  await sql.unsafe(`
    create sequence audit_seq;
    create table audit_items (
      seq bigint primary key default nextval('audit_seq'), xid text default pg_current_xact_id()::text,
      batch_id uuid, key text, old_state text, state text,
      attempts int, run_id uuid, delay_ms float8, run_after timestamptz, updated_at timestamptz);
    create table audit_batches (
      seq bigint primary key default nextval('audit_seq'), xid text default pg_current_xact_id()::text,
      id uuid, old_status text, status text, old_live_runs int, live_runs int, old_target int, target int,
      old_max_concurrency int, max_concurrency int, old_finished_at timestamptz, finished_at timestamptz);
    create table audit_runs (
      seq bigint primary key default nextval('audit_seq'), xid text default pg_current_xact_id()::text,
      op text, id uuid, batch_id uuid, process uuid);
    create function audit_items() returns trigger language plpgsql as $$
    begin
      insert into audit_items (batch_id, key, old_state, state, attempts, run_id, delay_ms, run_after, updated_at)
      values (new.batch_id, new.key, old.state, new.state, new.attempts, new.run_id,
              extract(epoch from new.run_after - new.updated_at) * 1000, new.run_after, new.updated_at);
      return null;
    end $$;
    create function audit_batches() returns trigger language plpgsql as $$
    begin
      insert into audit_batches (id, old_status, status, old_live_runs, live_runs, old_target, target,
        old_max_concurrency, max_concurrency, old_finished_at, finished_at)
      values (new.id, old.status, new.status, old.live_runs, new.live_runs, old.target, new.target,
        old.max_concurrency, new.max_concurrency, old.finished_at, new.finished_at);
      return null;
    end $$;
    create function audit_runs() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        insert into audit_runs (op, id, batch_id, process) values ('insert', new.id, new.batch_id, new.process);
      else
        insert into audit_runs (op, id, batch_id, process) values ('delete', old.id, old.batch_id, old.process);
      end if;
      return null;
    end $$;
    create trigger audit_items after update on leasehold_items for each row execute function audit_items();
    create trigger audit_batches after update on leasehold_batches for each row execute function audit_batches();
    create trigger audit_runs after insert or delete on leasehold_runs for each row execute function audit_runs();
  `);
}

export function itemChanges(sql: Sql, batchId: string): Promise<ItemChange[]> {
  return sql<ItemChange[]>`select * from audit_items where batch_id = ${batchId} order by seq`;
}

export function batchChanges(sql: Sql, batchId: string): Promise<BatchChange[]> {
  return sql<BatchChange[]>`select b.*, coalesce((select json_agg(r.id order by r.seq) from audit_runs r
      where r.batch_id = b.id and r.xid = b.xid and r.op = 'delete'), '[]'::json) as runs_ended
    from audit_batches b where b.id = ${batchId} order by b.seq`;
}

export function runChanges(sql: Sql, batchId: string): Promise<RunChange[]> {
  return sql<RunChange[]>`select * from audit_runs where batch_id = ${batchId} order by seq`;
}

/**
 * The takeovers of a batch that replaced a stale run: each insert of a run row together with
 * the deletion, in the same transaction, of the run it replaced.
 */
export async function replacements(sql: Sql, batchId: string): Promise<{ seq: number; from: string; to: string }[]> {
  const changes = await runChanges(sql, batchId);
  const out: { seq: number; from: string; to: string }[] = [];
  for (const c of changes) {
    if (c.op !== 'insert') continue;
    const gone = changes.filter((d) => d.op === 'delete' && d.xid === c.xid);
    // A takeover deletes at most the one run it replaces.
    if (gone.length > 1) throw new Error(`the takeover inserting run ${c.id} deleted ${gone.length} runs`);
    if (gone.length === 1) out.push({ seq: gone[0].seq, from: gone[0].id, to: c.id });
  }
  return out;
}

/**
 * The end of run `runId`'s lease: the deletion of its row, and the change of its batch row the
 * same transaction made (the end of the batch, a handoff or a takeover); throws when its row
 * was never deleted.
 */
export async function runEnd(
  sql: Sql,
  batchId: string,
  runId: string,
): Promise<{ seq: number; batch: BatchChange | undefined; runsEnded: number }> {
  const gone = (await runChanges(sql, batchId)).filter((c) => c.op === 'delete' && c.id === runId);
  if (gone.length !== 1) throw new Error(`run ${runId}'s row was deleted ${gone.length} times`);
  const batch = (await batchChanges(sql, batchId)).find((c) => c.xid === gone[0].xid);
  return { seq: gone[0].seq, batch, runsEnded: batch?.runs_ended.length ?? 0 };
}

/** The batch's live runs now (their ids, oldest first). */
export async function liveRuns(sql: Sql, batchId: string): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`select id from leasehold_runs where batch_id = ${batchId} order by started_at, id`;
  return rows.map((r) => r.id);
}

/** Count of each value in `xs`. */
export function tally<T>(xs: Iterable<T>): Map<T, number> {
  const m = new Map<T, number>();
  for (const x of xs) m.set(x, (m.get(x) ?? 0) + 1);
  return m;
}
