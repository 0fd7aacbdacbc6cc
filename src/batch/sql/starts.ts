// The statements of a start (src/batch/batches.ts, src/batch/items.ts): the locks that order
// starts (an advisory lock per tenant and request key, the leasehold_datasources row per
// datasource, so maxOpen is decided one start at a time), the read of a request key's batch and of
// a datasource's open batches, and the inserts of the batch row (leasehold_batches, once per
// request key: the unique key decides) and of its items (leasehold_items, in pieces, a repeated
// key failing the start). All run inside the start's transaction (docs/design.md, "Batches").
import type { Sql } from '../../store/index.js';
import type { ToleratedFailures } from '../types.js';
import { RUN_ITEMS, type Tx } from './shared.js';

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
    pool?: string | null;
    minSucceeded?: number | null;
    notify?: { url: string } | null;
    /** A source read by the runs (the batch starts `reading`, with no items). */
    source?: unknown;
    /** Where results go when it finishes. */
    results?: unknown;
    /** Its deadline as an instant (migration 030); null or absent: see `deadlineMs`. */
    deadline?: Date | null;
    /** Its deadline in ms from its start (database clock); null or absent with no `deadline`: none. */
    deadlineMs?: number | null;
    /** The W3C `traceparent` of the start's span (migration 037); null or absent: none. */
    traceContext?: string | null;
  },
): Promise<string | undefined> {
  const t = b.toleratedFailures;
  const count = t && 'count' in t ? t.count : null;
  // As text, cast to numeric: the percent is stored exactly as given.
  const percent = t && 'percent' in t ? String(t.percent) : null;
  const [r] = await tx<{ id: string }[]>`insert into leasehold_batches
      (tenant, datasource, job, params, request_key, total, priority, tolerated_count, tolerated_percent,
       max_concurrency, target, timeout_ms, rate_per_second, notify_url, source, reading, results, deadline_at,
       pool, min_succeeded, trace_context)
    values (${b.tenant}, ${b.datasource}, ${b.job}, ${tx.json(b.params as never)}, ${b.requestKey}, ${b.total}, ${b.priority},
      ${count}::int, ${percent}::text::numeric, ${b.maxConcurrency},
      ${targetOf(tx, b.maxConcurrency, b.total)}, ${b.timeoutMs ?? null}::int, ${b.ratePerSecond ?? null}::float8,
      ${b.notify?.url ?? null}::text, ${b.source === undefined ? null : tx.json(b.source as never)}, ${b.source !== undefined},
      ${b.results === undefined ? null : tx.json(b.results as never)},
      coalesce(${b.deadline ?? null}::timestamptz, now() + make_interval(secs => ${b.deadlineMs ?? null}::float8 / 1000.0)),
      ${b.pool ?? null}::text, ${b.minSucceeded ?? null}::int, ${b.traceContext ?? null}::text)
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
