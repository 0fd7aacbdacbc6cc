// Every statement of the units module. Times come from the database clock only (now()). Every
// write a unit's owner makes is fenced in the same statement on that process still owning the
// unit (`leasehold_units.owner`) with a live row (`expires_at > now()`), so a process that lost
// the unit — or whose TTL passed, so that others may claim it — changes nothing.
import type { UnitKey } from '../lease/index.js';
import type { Sql } from '../store/index.js';
import type { Fence } from './job.js';

/** The unit row a run starts from. */
export interface OwnedUnitRow {
  job: string;
  weight: number;
  config: unknown;
}

// The unit's current job and config, only if `processId` owns it and is live now (two primary
// key lookups).
export async function ownedUnit(sql: Sql, unit: UnitKey, processId: string): Promise<OwnedUnitRow | undefined> {
  const [row] = await sql<OwnedUnitRow[]>`select u.job, u.weight, u.config
    from leasehold_units u join leasehold_processes p on p.id = u.owner
    where u.tenant = ${unit.tenant} and u.shard = ${unit.shard} and u.owner = ${processId} and p.expires_at > now()`;
  return row;
}

// A condition (no statement of its own): true only while `processId` owns the unit and its
// row is live (database clock).
export function fence(sql: Sql, unit: UnitKey, processId: string): Fence {
  return sql`exists (select 1 from leasehold_units u join leasehold_processes p on p.id = u.owner
    where u.tenant = ${unit.tenant} and u.shard = ${unit.shard} and u.owner = ${processId} and p.expires_at > now())`;
}

// Whether `processId` owns the unit and is live now.
export async function owns(sql: Sql, unit: UnitKey, processId: string): Promise<boolean> {
  const [r] = await sql<{ owned: boolean }[]>`select ${fence(sql, unit, processId)} as owned`;
  return r.owned;
}

/** A message as the owner of its unit delivers it. */
export interface OutboxMessage {
  id: number;
  key: string;
  payload: unknown;
  attempts: number;
}

// The tenant's shard count for `job` (0 when it has no such units): shards are 0..n−1
// (putTenantUnits keeps them contiguous), so one backward step of the primary key finds it.
export async function outboxShards(sql: Sql, tenant: string, job: string): Promise<number> {
  // Units of weight 0 are never claimed: a message on them would never be delivered.
  const [r] = await sql<{ n: number | null }[]>`select max(shard) + 1 as n from leasehold_units
    where tenant = ${tenant} and job = ${job} and weight > 0`;
  return r.n ?? 0;
}

// Enqueues a message on (tenant, shard), only if that unit exists with the outbox job — a
// concurrent shrink of the shard count makes this insert nothing rather than orphan the message.
// The payload goes as JSON text, so JSON null and strings are stored as such.
export async function enqueue(
  sql: Sql,
  m: { tenant: string; shard: number; job: string; key: string; payload: unknown },
): Promise<number | undefined> {
  const [r] = await sql<{ id: number }[]>`insert into leasehold_outbox (tenant, shard, key, payload)
    select ${m.tenant}, ${m.shard}, ${m.key}, ${JSON.stringify(m.payload)}::text::jsonb
    where exists (select 1 from leasehold_units
                  where tenant = ${m.tenant} and shard = ${m.shard} and job = ${m.job} and weight > 0)
    returning id`;
  return r?.id;
}

// The unit's undelivered messages that are due (database clock), oldest first, through the
// partial index over undelivered messages. Reads only.
export async function dueMessages(sql: Sql, unit: UnitKey, limit: number): Promise<OutboxMessage[]> {
  return sql<OutboxMessage[]>`select id, key, payload, attempts from leasehold_outbox
    where tenant = ${unit.tenant} and shard = ${unit.shard} and delivered_at is null and next_attempt_at <= now()
    order by next_attempt_at, id limit ${limit}`;
}

// Marks one message delivered, once (delivered_at was null), and only while `processId` owns
// its unit with a live row and the message is still on that unit's shard. Returns whether it marked.
export async function markDelivered(sql: Sql, unit: UnitKey, processId: string, id: number): Promise<boolean> {
  const rows = await sql`update leasehold_outbox set delivered_at = now(), attempts = attempts + 1, last_error = null
    where id = ${id} and tenant = ${unit.tenant} and shard = ${unit.shard} and delivered_at is null
      and ${fence(sql, unit, processId)}`;
  return rows.count === 1;
}

// Records a failed attempt of one undelivered message, only while `processId` owns its unit (live):
// attempts + 1, next attempt at now() + min(maxBackoff, backoff × 2^(attempts−1) × (1 + 0.25 × jitter))
// by the database clock. Returns whether it recorded.
export async function markFailed(
  sql: Sql,
  unit: UnitKey,
  processId: string,
  a: { id: number; error: string; backoffMs: number; maxBackoffMs: number },
): Promise<boolean> {
  // `attempts` on the right-hand side is the value before this attempt, i.e. the new attempts − 1.
  const rows = await sql`update leasehold_outbox set
      attempts = attempts + 1,
      last_error = ${a.error.slice(0, 1000)},
      next_attempt_at = now() + make_interval(secs => least(
        ${a.maxBackoffMs}::float8,
        ${a.backoffMs}::float8 * power(2::float8, least(attempts, 40)) * (1 + 0.25 * random())
      ) / 1000)
    where id = ${a.id} and tenant = ${unit.tenant} and shard = ${unit.shard} and delivered_at is null
      and ${fence(sql, unit, processId)}`;
  return rows.count === 1;
}

// Moves the tenant's undelivered messages on shards that no longer exist (the shard count
// shrank) to `shard mod count`, only while `processId` owns the tenant's shard 0 and is live
// (so one process does it). Index range over (tenant, shard) of undelivered messages.
export async function rehome(sql: Sql, tenant: string, job: string, processId: string): Promise<number> {
  const rows = await sql`with n as (
      select coalesce(max(shard) + 1, 0) as shards from leasehold_units where tenant = ${tenant} and job = ${job}
    )
    update leasehold_outbox o set shard = o.shard % n.shards
    from n
    where o.tenant = ${tenant} and o.delivered_at is null and n.shards > 0 and o.shard >= n.shards
      and ${fence(sql, { tenant, shard: 0 }, processId)}`;
  return rows.count;
}
