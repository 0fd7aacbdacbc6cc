// The outbox's enqueue and reads (docs/design.md, "Outbox"): what the API and scripts call, by
// the outbox delivery unit job's name and shard rule (outbox-rules.ts).
import type { UnitKey } from '../lease/sql/ownership.js';
import type { Sql } from '../store/connect.js';
import { NoOutboxUnitsError, OUTBOX_JOB, outboxShard } from './outbox-rules.js';
import * as q from './sql/outbox.js';

/**
 * Enqueue a message in `tenant`'s outbox on the shard its `key` hashes to ({@link outboxShard}
 * over the tenant's current shard count). The owner of that unit assigns it to the unit's
 * endpoints on its next run and delivers it to each.
 * @param payload any JSON value (stored as `jsonb`).
 * @returns the message id (a 64-bit integer as decimal text) and its shard.
 * @throws {NoOutboxUnitsError} the tenant has no `outbox-delivery` units.
 */
export async function enqueueOutbox(
  sql: Sql,
  tenant: string,
  message: { key: string; payload: unknown },
): Promise<{ id: string; shard: number }> {
  // A concurrent change of the shard count can remove the shard between the count and the
  // insert (which then inserts nothing): count again.
  for (let tries = 0; tries < 5; tries++) {
    const shards = await q.outboxShards(sql, tenant, OUTBOX_JOB);
    if (shards === 0) throw new NoOutboxUnitsError(tenant);
    const shard = outboxShard(message.key, shards);
    const id = await q.enqueue(sql, { tenant, shard, job: OUTBOX_JOB, key: message.key, payload: message.payload ?? null });
    if (id !== undefined) return { id, shard };
  }
  throw new NoOutboxUnitsError(tenant);
}

/**
 * Mark the delivery of message `id` to `endpoint` (of `unit`) delivered — once, and only while
 * `processId` owns the unit with a live row (one statement conditioned on
 * `leasehold_units.owner` and `expires_at > now()`). Returns false when it changed nothing: the
 * unit was lost, the message is not assigned to that endpoint, or it was already marked.
 */
export async function markDelivered(sql: Sql, unit: UnitKey, processId: string, id: string, endpoint: string): Promise<boolean> {
  return (await q.markDelivered(sql, unit, processId, id, endpoint)).marked;
}

/** How one endpoint of a tenant's outbox fares, over all its shards ({@link outboxStatus}). */
export interface OutboxEndpointStatus {
  /** The endpoint URL as registered. */
  url: string;
  /** Messages not yet delivered to it: its pending deliveries plus messages not yet assigned (each endpoint gets those). */
  backlog: number;
  /** The oldest of those (lowest id, decimal text), with its enqueue time and its age by the database clock, ms; null when none. */
  oldest: { id: string; enqueuedAt: Date; ageMs: number } | null;
  /** Failed attempts since the last accepted one (summed over the tenant's shards). */
  failures: number;
  /** The most recent failure (it stays after later successes; compare with `lastDeliveredAt`), or null. */
  lastError: { message: string; at: Date } | null;
  /** When it last accepted a message, or null. */
  lastDeliveredAt: Date | null;
  /**
   * Its `Retry-After` pause while one is in force, else null: `until` when the last of the
   * tenant's shards may post to it again (the capped wait plus its wake-up jitter), `remainingMs`
   * until then and `askedMs` (the wait the endpoint asked for, before the cap) by the database
   * clock, `at` when it asked.
   */
  pause: { until: Date; remainingMs: number; askedMs: number; at: Date } | null;
}

/** A tenant's outbox as {@link outboxStatus} reads it. */
export interface OutboxStatus {
  tenant: string;
  /** The tenant's `outbox-delivery` shard count. */
  shards: number;
  /** Its endpoints, in the order of its config. */
  endpoints: OutboxEndpointStatus[];
}

/**
 * The backlog, oldest undelivered message and last error of each endpoint of `tenant`'s outbox
 * (`GET /tenants/{tenant}/outbox`). Reads only; cost grows with the tenant's backlog (one index
 * range over its pending deliveries).
 * @throws {NoOutboxUnitsError} the tenant has no `outbox-delivery` units.
 */
export async function outboxStatus(sql: Sql, tenant: string): Promise<OutboxStatus> {
  const status = await q.endpointStatus(sql, tenant, OUTBOX_JOB);
  if (!status) throw new NoOutboxUnitsError(tenant);
  return {
    tenant,
    shards: status.shards,
    endpoints: status.rows.map((r) => ({
      url: r.endpoint,
      backlog: r.backlog,
      oldest:
        r.oldestId === null || r.oldestAt === null
          ? null
          : { id: r.oldestId, enqueuedAt: r.oldestAt, ageMs: Math.max(0, Math.round(r.oldestAgeMs ?? 0)) },
      failures: r.failures,
      lastError: r.lastError === null || r.lastErrorAt === null ? null : { message: r.lastError, at: r.lastErrorAt },
      lastDeliveredAt: r.lastDeliveredAt,
      pause:
        r.pausedUntil === null || r.pauseAskedAt === null
          ? null
          : {
              until: r.pausedUntil,
              remainingMs: Math.max(0, Math.round(r.pauseLeftMs ?? 0)),
              askedMs: Math.round(r.pauseAskedMs ?? 0),
              at: r.pauseAskedAt,
            },
    })),
  };
}
