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
  const c: Record<ItemState, number> = { pending: 0, running: 0, done: 0, failed: 0 };
  for (const r of rows) c[r.state] = r.n;
  return c;
}

/** One recorded change of an item row (see {@link installAudit}). */
export interface ItemChange {
  seq: number;
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
  old_status: string;
  status: string;
  old_owner_run: string | null;
  owner_run: string | null;
  old_finished_at: Date | null;
  finished_at: Date | null;
}

/**
 * Record every update of `leasehold_items` and `leasehold_batches` in the test's schema, numbered
 * from one sequence (`seq`) in an order consistent with commits where it matters: a row's changes
 * are ordered by its row lock, and a fenced move holds a lock on its batch row while it writes,
 * so a move and a takeover (or cancel, or finish) of one batch never interleave.
 */
export async function installAudit(sql: Sql): Promise<void> {
  await sql.unsafe(`
    create sequence audit_seq;
    create table audit_items (
      seq bigint primary key default nextval('audit_seq'), batch_id uuid, key text, old_state text, state text,
      attempts int, run_id uuid, delay_ms float8, run_after timestamptz, updated_at timestamptz);
    create table audit_batches (
      seq bigint primary key default nextval('audit_seq'), id uuid, old_status text, status text,
      old_owner_run uuid, owner_run uuid, old_finished_at timestamptz, finished_at timestamptz);
    create function audit_items() returns trigger language plpgsql as $$
    begin
      insert into audit_items (batch_id, key, old_state, state, attempts, run_id, delay_ms, run_after, updated_at)
      values (new.batch_id, new.key, old.state, new.state, new.attempts, new.run_id,
              extract(epoch from new.run_after - new.updated_at) * 1000, new.run_after, new.updated_at);
      return null;
    end $$;
    create function audit_batches() returns trigger language plpgsql as $$
    begin
      insert into audit_batches (id, old_status, status, old_owner_run, owner_run, old_finished_at, finished_at)
      values (new.id, old.status, new.status, old.owner_run, new.owner_run, old.finished_at, new.finished_at);
      return null;
    end $$;
    create trigger audit_items after update on leasehold_items for each row execute function audit_items();
    create trigger audit_batches after update on leasehold_batches for each row execute function audit_batches();
  `);
}

export function itemChanges(sql: Sql, batchId: string): Promise<ItemChange[]> {
  return sql<ItemChange[]>`select * from audit_items where batch_id = ${batchId} order by seq`;
}

export function batchChanges(sql: Sql, batchId: string): Promise<BatchChange[]> {
  return sql<BatchChange[]>`select * from audit_batches where id = ${batchId} order by seq`;
}

/** Count of each value in `xs`. */
export function tally<T>(xs: Iterable<T>): Map<T, number> {
  const m = new Map<T, number>();
  for (const x of xs) m.set(x, (m.get(x) ?? 0) + 1);
  return m;
}
