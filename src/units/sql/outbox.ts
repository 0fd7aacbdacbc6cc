// The statements of the outbox unit (leasehold_outbox, leasehold_outbox_deliveries and the
// endpoint records in leasehold_outbox_endpoints, read with leasehold_units): enqueue, assign,
// the deliveries due, their outcomes, pauses, rehoming after a shrink, and the status read. Times
// come from the database clock only (now()). Every write the unit's owner makes is fenced in the
// same statement on that process still owning the unit with a live row (`fence`, sql/runs.ts),
// so a process that lost the unit — or whose TTL passed, so that others may claim it — changes
// nothing.
import type { UnitKey } from '../../lease/index.js';
import type { Sql } from '../../store/index.js';
import { storableText } from '../../batch/values.js';
import type { Fence } from '../job.js';
import { fence } from './runs.js';

// The tenant's shard count for `job` (0 when it has no such units): shards are 0..n−1
// (putTenantUnits keeps them contiguous), so one backward step of the primary key finds it.
export async function outboxShards(sql: Sql, tenant: string, job: string): Promise<number> {
  // Units of weight 0 are never claimed: a message on them would never be delivered.
  const [r] = await sql<{ n: number | null }[]>`select max(shard) + 1 as n from leasehold_units
    where tenant = ${tenant} and job = ${job} and weight > 0`;
  return r.n ?? 0;
}

// Enqueues a message on (tenant, shard), unassigned, only if that unit exists with the outbox
// job — a concurrent shrink of the shard count makes this insert nothing rather than orphan the
// message. The payload goes as JSON text, so JSON null and strings are stored as such. The id
// comes back as decimal text: ids pass 2^53, where a JS number would round it (issue 38).
export async function enqueue(
  sql: Sql,
  m: { tenant: string; shard: number; job: string; key: string; payload: unknown },
): Promise<string | undefined> {
  const [r] = await sql<{ id: string }[]>`insert into leasehold_outbox (tenant, shard, key, payload)
    select ${m.tenant}, ${m.shard}, ${m.key}, ${JSON.stringify(m.payload)}::text::jsonb
    where exists (select 1 from leasehold_units
                  where tenant = ${m.tenant} and shard = ${m.shard} and job = ${m.job} and weight > 0)
    returning id::text as id`;
  return r?.id;
}

// Assigns up to `limit` unassigned messages of the unit, oldest first, to `endpoints` (one
// pending delivery each, due now), only while `processId` owns the unit with a live row. A
// message is assigned once: it is locked (as the update locks it) only while still unassigned,
// its assigned_at is set in the same statement, and a delivery that exists already is left as
// it is. The messages come from the partial index of unassigned ones — the shard as a range and
// the order (shard, id), which only that index gives, so they are never read in id order through
// the primary key from the oldest message on — and are updated by their ctids, which their locks
// keep valid (a Tid Scan: no join or index choice an estimate could turn into a scan of the
// backlog). Returns how many messages it assigned.
export async function assign(
  sql: Sql,
  unit: UnitKey,
  processId: string,
  endpoints: readonly string[],
  limit: number,
): Promise<number> {
  const [r] = await sql<{ n: number }[]>`${assignStatement(sql, unit, processId, endpoints, limit)}`;
  return r.n;
}

/** The statement of {@link assign} as a fragment (the plan test reads its plan with EXPLAIN). */
export function assignStatement(sql: Sql, unit: UnitKey, processId: string, endpoints: readonly string[], limit: number) {
  return sql`with m as (
      update leasehold_outbox set assigned_at = now()
      where ctid = any (array(select ctid from leasehold_outbox
                              where tenant = ${unit.tenant} and shard >= ${unit.shard} and shard <= ${unit.shard}
                                and assigned_at is null and ${fence(sql, unit, processId)}
                              order by shard, id limit ${limit}
                              for no key update))
        and ${fence(sql, unit, processId)}
      returning id
    ), d as (
      insert into leasehold_outbox_deliveries (message_id, endpoint, tenant, shard)
      select m.id, e, ${unit.tenant}, ${unit.shard} from m cross join jsonb_array_elements_text(${sql.json(endpoints as string[])}) as e
      on conflict do nothing
    )
    select count(*) as n from m`;
}

// Deletes the unit's pending deliveries to endpoints no longer in `endpoints`, and their
// endpoint records, only while `processId` owns the unit (live): an endpoint removed from the
// config blocks nothing and is not delivered to again. Index range over the unit's pending
// deliveries. Returns how many deliveries it dropped.
export async function dropRemovedEndpoints(
  sql: Sql,
  unit: UnitKey,
  processId: string,
  endpoints: readonly string[],
): Promise<number> {
  const list = sql.json(endpoints as string[]);
  const [r] = await sql<{ n: number }[]>`with d as (
      delete from leasehold_outbox_deliveries
      where tenant = ${unit.tenant} and shard = ${unit.shard} and delivered_at is null
        and endpoint not in (select jsonb_array_elements_text(${list})) and ${fence(sql, unit, processId)}
      returning 1
    ), e as (
      delete from leasehold_outbox_endpoints
      where tenant = ${unit.tenant} and shard = ${unit.shard} and endpoint not in (select jsonb_array_elements_text(${list}))
        and ${fence(sql, unit, processId)}
    ), p as (
      delete from leasehold_outbox_pauses
      where tenant = ${unit.tenant} and endpoint not in (select jsonb_array_elements_text(${list}))
        and ${fence(sql, unit, processId)}
    )
    select count(*) as n from d`;
  return r.n;
}

/** A pending delivery as the owner of its unit attempts it. */
export interface OutboxDelivery {
  endpoint: string;
  /** The message id, as decimal text (a bigint: exact past 2^53). */
  id: string;
  key: string;
  payload: unknown;
  attempts: number;
}

// Whether the tenant's `endpoint` (an SQL expression) is paused for `unit`'s shard now (database
// clock): a Retry-After pause of the endpoint, stored once for the whole tenant (migration 029),
// is over for shard s at paused_until + jitter_ms × frac(wake_offset + s × 0.618…) — the golden
// ratio spreads the tenant's shards evenly over the jitter, so they do not all wake at once. One
// primary-key lookup.
function pausedFor(sql: Sql, unit: UnitKey, endpoint: Fence | string): Fence {
  return sql`exists (select from leasehold_outbox_pauses p
    where p.tenant = ${unit.tenant} and p.endpoint = ${endpoint}
      and p.paused_until + make_interval(secs => p.jitter_ms
        * ((p.wake_offset + ${unit.shard}::float8 * 0.6180339887498949)
           - floor(p.wake_offset + ${unit.shard}::float8 * 0.6180339887498949)) / 1000) > now())`;
}

// The unit's pending deliveries that are due (database clock), of endpoints not paused by a
// Retry-After (for this shard: {@link pausedFor}): for each of `endpoints`, at most
// `limitPerEndpoint`, oldest due first — one statement whatever the endpoint count, each
// endpoint an index range of the partial index over pending deliveries. Reads only.
export async function dueDeliveries(
  sql: Sql,
  unit: UnitKey,
  endpoints: readonly string[],
  limitPerEndpoint: number,
): Promise<OutboxDelivery[]> {
  return sql<OutboxDelivery[]>`${dueDeliveriesStatement(sql, unit, endpoints, limitPerEndpoint)}`;
}

/** The read of {@link dueDeliveries} as a fragment (the plan test reads its plan with EXPLAIN). */
export function dueDeliveriesStatement(sql: Sql, unit: UnitKey, endpoints: readonly string[], limitPerEndpoint: number) {
  return sql`select e.endpoint, o.id::text as id, o.key, o.payload, d.attempts
    from jsonb_array_elements_text(${sql.json(endpoints as string[])}) with ordinality as e(endpoint, ord)
    cross join lateral (
      select message_id, attempts, next_attempt_at from leasehold_outbox_deliveries
      where tenant = ${unit.tenant} and shard = ${unit.shard} and endpoint = e.endpoint
        and delivered_at is null and next_attempt_at <= now()
        and not ${pausedFor(sql, unit, sql`e.endpoint`)}
      order by next_attempt_at, message_id limit ${limitPerEndpoint}
    ) d
    join leasehold_outbox o on o.id = d.message_id
    order by e.ord, d.next_attempt_at, d.message_id`;
}

/** What a mark answers: whether it changed the delivery, and whether the endpoint is paused for the unit's shard now. */
export interface MarkAnswer {
  marked: boolean;
  paused: boolean;
}

// Marks one delivery (message `id` to `endpoint`) delivered, once (delivered_at was null), and
// only while `processId` owns its unit with a live row and the delivery is still on that unit's
// shard. Answers whether it marked, and whether the endpoint is paused now (another shard's owner
// may have stored a pause since this run read its due deliveries): the lane stops at once.
export async function markDelivered(
  sql: Sql,
  unit: UnitKey,
  processId: string,
  id: string,
  endpoint: string,
): Promise<MarkAnswer> {
  const rows = await sql<{ paused: boolean }[]>`${markDeliveredStatement(sql, unit, processId, id, endpoint)}`;
  return { marked: rows.length === 1, paused: rows[0]?.paused ?? false };
}

/** The statement of {@link markDelivered} as a fragment (the plan test reads its plan with EXPLAIN). */
export function markDeliveredStatement(sql: Sql, unit: UnitKey, processId: string, id: string, endpoint: string) {
  return sql`update leasehold_outbox_deliveries set delivered_at = now(), attempts = attempts + 1, last_error = null
    where message_id = ${id}::bigint and endpoint = ${endpoint} and tenant = ${unit.tenant} and shard = ${unit.shard}
      and delivered_at is null and ${fence(sql, unit, processId)}
    returning ${pausedFor(sql, unit, endpoint)} as paused`;
}

/**
 * What {@link markFailed} records: the delivery (message id, endpoint), the error, the backoff and
 * its cap (ms), and the wait the endpoint asked for with Retry-After (ms; the delivery is due no
 * sooner).
 */
export interface MarkFailedArgs {
  /** The message id, as decimal text. */
  id: string;
  endpoint: string;
  error: string;
  backoffMs: number;
  maxBackoffMs: number;
  retryAfterMs?: number;
}

// Records a failed attempt of one pending delivery, only while `processId` owns its unit (live):
// attempts + 1, next attempt at now() + jitter × min(maxBackoff, backoff × 2^(attempts−1)) by the
// database clock, jitter uniform in [0, 1) (full jitter: a wave of failures comes back spread over
// the whole interval), and no sooner than `retryAfterMs`. Answers as {@link markDelivered}.
export async function markFailed(sql: Sql, unit: UnitKey, processId: string, a: MarkFailedArgs): Promise<MarkAnswer> {
  const rows = await sql<{ paused: boolean }[]>`${markFailedStatement(sql, unit, processId, a)}`;
  return { marked: rows.length === 1, paused: rows[0]?.paused ?? false };
}

/** The statement of {@link markFailed} as a fragment (the plan test reads its plan with EXPLAIN). */
export function markFailedStatement(sql: Sql, unit: UnitKey, processId: string, a: MarkFailedArgs) {
  // `attempts` on the right-hand side is the value before this attempt, i.e. the new attempts − 1.
  return sql`update leasehold_outbox_deliveries set
      attempts = attempts + 1,
      last_error = ${storableText(a.error, 1000)},
      next_attempt_at = now() + make_interval(secs => greatest(random() * least(
        ${a.maxBackoffMs}::float8,
        ${a.backoffMs}::float8 * power(2::float8, least(attempts, 40))
      ), ${a.retryAfterMs ?? 0}::float8) / 1000)
    where message_id = ${a.id}::bigint and endpoint = ${a.endpoint} and tenant = ${unit.tenant} and shard = ${unit.shard}
      and delivered_at is null and ${fence(sql, unit, processId)}
    returning ${pausedFor(sql, unit, a.endpoint)} as paused`;
}

// Records how one endpoint of the unit fared in one run, only while `processId` owns the unit
// (live): `failures` failed attempts since the last accepted one of this run (added to the
// stored count when none was accepted), the last error and when (now()), and now() as the last
// delivery when any was accepted. One row per (unit, endpoint).
export async function recordEndpoint(
  sql: Sql,
  unit: UnitKey,
  processId: string,
  r: { endpoint: string; delivered: boolean; failures: number; error: string | undefined },
): Promise<void> {
  const error = r.error === undefined ? null : storableText(r.error, 1000);
  await sql`insert into leasehold_outbox_endpoints as s (tenant, shard, endpoint, failures, last_error, last_error_at, last_delivered_at)
    select ${unit.tenant}, ${unit.shard}, ${r.endpoint}, ${r.failures}, ${error}::text,
      case when ${error}::text is null then null else now() end,
      case when ${r.delivered} then now() end
    where ${fence(sql, unit, processId)}
    on conflict (tenant, shard, endpoint) do update set
      failures = case when ${r.delivered} then excluded.failures else s.failures + excluded.failures end,
      last_error = coalesce(excluded.last_error, s.last_error),
      last_error_at = coalesce(excluded.last_error_at, s.last_error_at),
      last_delivered_at = coalesce(excluded.last_delivered_at, s.last_delivered_at)`;
}

/** A Retry-After pause as {@link pauseEndpoint} stores it: the wait asked for and the wait kept (capped), ms. */
export interface PauseArgs {
  endpoint: string;
  askedMs: number;
  waitMs: number;
  /** Spread of the wake-up past the wait, ms (the tenant's shards wake within it). */
  jitterMs: number;
}

// Pauses the tenant's `endpoint` for every shard and process (it answered Retry-After), only while
// `processId` owns `unit` (live): no delivery to it is due before now() + waitMs, and each shard
// wakes within jitterMs after that (see pausedFor), the offset drawn here. A pause in force is
// never brought forward by a later, shorter answer; a longer one replaces it. One row per
// (tenant, endpoint), primary key.
export async function pauseEndpoint(sql: Sql, unit: UnitKey, processId: string, a: PauseArgs): Promise<void> {
  await sql`insert into leasehold_outbox_pauses as s (tenant, endpoint, paused_until, jitter_ms, wake_offset, asked_ms, asked_at)
    select ${unit.tenant}, ${a.endpoint}, now() + make_interval(secs => ${a.waitMs}::float8 / 1000),
      ${a.jitterMs}::float8, random(), ${a.askedMs}::float8, now()
    where ${fence(sql, unit, processId)}
    on conflict (tenant, endpoint) do update set
      paused_until = excluded.paused_until, jitter_ms = excluded.jitter_ms, wake_offset = excluded.wake_offset,
      asked_ms = excluded.asked_ms, asked_at = excluded.asked_at
    where excluded.paused_until + make_interval(secs => excluded.jitter_ms / 1000)
      > s.paused_until + make_interval(secs => s.jitter_ms / 1000)`;
}

// Moves the tenant's unassigned messages and pending deliveries on shards that no longer exist
// (the shard count shrank) to `shard mod count`, only while `processId` owns the tenant's shard 0
// and is live (so one process does it). Index ranges over (tenant, shard) of unassigned messages
// and of pending deliveries. Returns how many messages it moved.
export async function rehome(sql: Sql, tenant: string, job: string, processId: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`with n as (
      select coalesce(max(shard) + 1, 0) as shards from leasehold_units where tenant = ${tenant} and job = ${job}
    ), m as (
      update leasehold_outbox o set shard = o.shard % n.shards
      from n
      where o.tenant = ${tenant} and o.assigned_at is null and n.shards > 0 and o.shard >= n.shards
        and ${fence(sql, { tenant, shard: 0 }, processId)}
      returning o.id
    ), d as (
      update leasehold_outbox_deliveries d set shard = d.shard % n.shards
      from n
      where d.tenant = ${tenant} and d.delivered_at is null and n.shards > 0 and d.shard >= n.shards
        and ${fence(sql, { tenant, shard: 0 }, processId)}
      returning d.message_id
    )
    select (select count(*) from m) + (select count(distinct message_id) from d) as n`;
  return r.n;
}

/** One endpoint of a tenant's outbox, over all its shards, as `outboxStatus` reads it. */
export interface OutboxEndpointRow {
  endpoint: string;
  backlog: number;
  /** Decimal text (a bigint). */
  oldestId: string | null;
  oldestAt: Date | null;
  oldestAgeMs: number | null;
  failures: number;
  lastError: string | null;
  lastErrorAt: Date | null;
  lastDeliveredAt: Date | null;
  /** The endpoint's Retry-After pause while any shard still waits it out: when the last shard wakes, ms left, ms asked, when asked. */
  pausedUntil: Date | null;
  pauseLeftMs: number | null;
  pauseAskedMs: number | null;
  pauseAskedAt: Date | null;
}

// The tenant's outbox endpoint list (its units' config), and per endpoint: the backlog (pending
// deliveries plus messages not yet assigned, which every endpoint will get), the oldest of them
// with its age by the database clock, the endpoint records summed over shards, and its Retry-After
// pause while one is in force (until its last shard wakes). Reads only: one pass over the
// tenant's pending deliveries (index range), one over its unassigned messages, one over its pauses.
export async function endpointStatus(
  sql: Sql,
  tenant: string,
  job: string,
): Promise<{ shards: number; rows: OutboxEndpointRow[] } | undefined> {
  const [units] = await sql<{ shards: number; config: { endpoints?: unknown } | null }[]>`select count(*) as shards,
      (select config from leasehold_units where tenant = ${tenant} and job = ${job} order by shard limit 1) as config
    from leasehold_units where tenant = ${tenant} and job = ${job}`;
  if (units.shards === 0) return undefined;
  const listed = units.config?.endpoints;
  const endpoints = Array.isArray(listed) ? listed.filter((e): e is string => typeof e === 'string') : [];
  const rows = await sql<OutboxEndpointRow[]>`with e as (
      select endpoint, ord from jsonb_array_elements_text(${sql.json(endpoints)}) with ordinality as e(endpoint, ord)
    ), pending as (
      select endpoint, count(*) as n, min(message_id) as oldest from leasehold_outbox_deliveries
      where tenant = ${tenant} and delivered_at is null and endpoint in (select jsonb_array_elements_text(${sql.json(endpoints)}))
      group by endpoint
    ), waiting as (
      select count(*) as n, min(id) as oldest from leasehold_outbox where tenant = ${tenant} and assigned_at is null
    ), s as (
      select endpoint, sum(failures) as failures, max(last_delivered_at) as last_delivered_at,
        (array_agg(last_error order by last_error_at desc nulls last))[1] as last_error, max(last_error_at) as last_error_at
      from leasehold_outbox_endpoints where tenant = ${tenant} group by endpoint
    ), z as (
      select endpoint, paused_until + make_interval(secs => jitter_ms / 1000) as until, asked_ms, asked_at
      from leasehold_outbox_pauses where tenant = ${tenant}
    )
    select e.endpoint, coalesce(p.n, 0) + w.n as backlog, x.id::text as "oldestId", x.created_at as "oldestAt",
      (extract(epoch from now() - x.created_at) * 1000)::float8 as "oldestAgeMs",
      coalesce(s.failures, 0)::int as failures, s.last_error as "lastError", s.last_error_at as "lastErrorAt",
      s.last_delivered_at as "lastDeliveredAt",
      z.until as "pausedUntil", (extract(epoch from z.until - now()) * 1000)::float8 as "pauseLeftMs",
      z.asked_ms as "pauseAskedMs", z.asked_at as "pauseAskedAt"
    from e cross join waiting w
    left join pending p on p.endpoint = e.endpoint
    left join s on s.endpoint = e.endpoint
    left join z on z.endpoint = e.endpoint and z.until > now()
    left join leasehold_outbox x on x.id = least(p.oldest, w.oldest)
    order by e.ord`;
  return { shards: units.shards, rows };
}
