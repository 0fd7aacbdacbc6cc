import { createHash } from 'node:crypto';
import * as z from 'zod';
import type { UnitKey } from '../lease/index.js';
import type { Sql } from '../store/index.js';
import { defineUnitJob, type UnitContext, type UnitJob } from './job.js';
import * as q from './sql.js';

/** Name of the outbox delivery unit job (`job` in `PUT /tenants/{tenant}/units`). */
export const OUTBOX_JOB = 'outbox-delivery';

/** Most endpoints one tenant may register. */
export const MAX_ENDPOINTS = 32;

const httpUrl = z
  .string({ error: (i) => `must be a string, got ${i.input === null ? 'null' : Array.isArray(i.input) ? 'array' : typeof i.input}` })
  .max(2048, 'must be at most 2048 characters')
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
    } catch {
      return false;
    }
  }, 'must be an absolute http:// or https:// URL');

/** Configuration of an outbox delivery unit: the tenant's webhook endpoints (1..32 http(s) URLs). */
export const outboxConfigSchema = z
  .object({
    endpoints: z
      .array(httpUrl, { error: (i) => (i.input === undefined ? 'Required' : 'must be an array of URLs') })
      .min(1, 'must list at least one URL')
      .max(MAX_ENDPOINTS, `must list at most ${MAX_ENDPOINTS} URLs`),
  })
  .strict();

/** Configuration of an outbox delivery unit. */
export type OutboxConfig = z.infer<typeof outboxConfigSchema>;

/** Settings of {@link outboxDelivery}; durations in ms. */
export interface OutboxDeliveryOptions {
  /** Pause between runs of one unit, ms. Default 1,000. */
  intervalMs?: number;
  /** Most due messages one run takes, oldest first. Default 100. */
  batchSize?: number;
  /** Messages delivered at once by one unit. Default 4. */
  parallel?: number;
  /** Timeout of one POST to one endpoint, ms. Default 5,000. */
  timeoutMs?: number;
  /** First retry delay after a failed attempt, ms; doubles per attempt, plus up to 25 % jitter. Default 1,000. */
  backoffMs?: number;
  /** Longest retry delay, ms. Default 60,000. */
  maxBackoffMs?: number;
  /** A run ends early after this many messages failed in a row (the rest wait for the next run). Default `parallel`. */
  failureStreak?: number;
  /** The HTTP client. Default the global `fetch`. */
  fetch?: typeof fetch;
}

/** The JSON body every endpoint receives for one message. */
export interface OutboxDeliveryBody {
  id: number;
  tenant: string;
  key: string;
  payload: unknown;
}

/** The `Idempotency-Key` header value of a message: `<tenant>:<id>`, the same on every attempt and endpoint. */
export function idempotencyKey(tenant: string, id: number): string {
  return `${tenant}:${id}`;
}

/**
 * The shard a message key is enqueued on: the first 48 bits of the key's SHA-256, modulo the
 * tenant's shard count. Stable across processes, versions and restarts.
 * @throws {RangeError} `shards` not a positive whole number.
 */
export function outboxShard(key: string, shards: number): number {
  if (!Number.isInteger(shards) || shards < 1) throw new RangeError(`shards must be a positive whole number, got ${shards}`);
  return createHash('sha256').update(key, 'utf8').digest().readUIntBE(0, 6) % shards;
}

/** The tenant has no outbox delivery units of weight > 0 to enqueue on. API: 404. */
export class NoOutboxUnitsError extends Error {
  readonly code = 'no_outbox_units';
  constructor(readonly tenant: string) {
    super(`tenant "${tenant}" has no ${OUTBOX_JOB} units of weight > 0 (nothing would deliver): register them first with PUT /tenants/${tenant}/units { "job": "${OUTBOX_JOB}", "shards": N, "endpoints": [URL, …] }`);
    this.name = 'NoOutboxUnitsError';
  }
}

/**
 * Enqueue a message in `tenant`'s outbox on the shard its `key` hashes to ({@link outboxShard}
 * over the tenant's current shard count). The owner of that unit delivers it.
 * @param payload any JSON value (stored as `jsonb`).
 * @returns the message id and its shard.
 * @throws {NoOutboxUnitsError} the tenant has no `outbox-delivery` units.
 */
export async function enqueueOutbox(sql: Sql, tenant: string, message: { key: string; payload: unknown }): Promise<{ id: number; shard: number }> {
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
 * Mark message `id` of `unit` delivered — once, and only while `processId` owns the unit with a
 * live process row (one statement conditioned on `leasehold_units.owner` and `expires_at > now()`). Returns false when it changed nothing: the
 * unit was lost or the message was already delivered.
 */
export function markDelivered(sql: Sql, unit: UnitKey, processId: string, id: number): Promise<boolean> {
  return q.markDelivered(sql, unit, processId, id);
}

/**
 * The per-tenant outbox delivery unit job (DESIGN.md, "Two kinds of work": "deliver each
 * tenant's outbox to its webhook endpoints"), with its settings.
 *
 * Each run of unit `(tenant, shard)` takes up to `batchSize` due undelivered messages of that
 * shard, oldest first, and POSTs each (`parallel` at once) as JSON {@link OutboxDeliveryBody}
 * with header `Idempotency-Key: <tenant>:<id>` to every endpoint of the unit's config, with
 * `timeoutMs` per request (redirects are not followed; any non-2xx answer fails). A message
 * every endpoint accepted is marked delivered in one statement fenced on still owning the unit;
 * otherwise its `attempts` grows and its next attempt is due after
 * `min(maxBackoffMs, backoffMs × 2^(attempts−1) × (1 + 0.25 × jitter))` by the database clock, so a
 * failing message never holds up the others, nor the tenant's other shards (each unit runs on
 * its own). The owner of shard 0 also moves undelivered messages of shards that no longer exist
 * onto `shard mod count`. Delivery is at least once (a lost unit's message is posted again by
 * the next owner; endpoints deduplicate on the idempotency key); marking happens once.
 * @throws {RangeError} a setting out of range.
 */
export function outboxDelivery(options: OutboxDeliveryOptions = {}): UnitJob<OutboxConfig> {
  const s = {
    intervalMs: options.intervalMs ?? 1_000,
    batchSize: options.batchSize ?? 100,
    parallel: options.parallel ?? 4,
    timeoutMs: options.timeoutMs ?? 5_000,
    backoffMs: options.backoffMs ?? 1_000,
    maxBackoffMs: options.maxBackoffMs ?? 60_000,
    failureStreak: options.failureStreak ?? options.parallel ?? 4,
    fetch: options.fetch ?? fetch,
  };
  for (const k of ['batchSize', 'parallel', 'timeoutMs', 'failureStreak'] as const) {
    if (!Number.isInteger(s[k]) || s[k] < 1) throw new RangeError(`${k} must be a positive whole number, got ${s[k]}`);
  }
  for (const k of ['backoffMs', 'maxBackoffMs'] as const) {
    if (!Number.isFinite(s[k]) || s[k] < 0) throw new RangeError(`${k} must be 0 or more ms, got ${s[k]}`);
  }
  return defineUnitJob<OutboxConfig>({
    name: OUTBOX_JOB,
    description: "POST the tenant's outbox messages to its webhook endpoints, at least once",
    config: outboxConfigSchema,
    intervalMs: s.intervalMs,
    weight: (config) => config.endpoints.length,
    run: (ctx) => deliverDue(ctx, s),
  });
}

/** The `outbox-delivery` unit job with default settings. */
export const outboxDeliveryJob: UnitJob<OutboxConfig> = outboxDelivery();

type Settings = Required<Omit<OutboxDeliveryOptions, 'fetch'>> & { fetch: typeof fetch };

async function deliverDue(ctx: UnitContext<OutboxConfig>, s: Settings): Promise<void> {
  const unit = { tenant: ctx.tenant, shard: ctx.shard };
  if (ctx.shard === 0) {
    const moved = await q.rehome(ctx.sql, ctx.tenant, OUTBOX_JOB, ctx.processId);
    if (moved > 0) ctx.log('info', 'moved messages of removed shards', { moved });
  }
  const due = await q.dueMessages(ctx.sql, unit, s.batchSize);
  let next = 0;
  let streak = 0;
  let lost = false;
  const worker = async () => {
    while (next < due.length && !ctx.signal.aborted && !lost && streak < s.failureStreak) {
      // A process that was frozen past its TTL must not send on for a unit it may have lost.
      if (!ctx.leaseValid()) return;
      const m = due[next++];
      const error = await post(ctx, s, m);
      if (ctx.signal.aborted) return;
      if (error === undefined) {
        streak = 0;
        if (!(await q.markDelivered(ctx.sql, unit, ctx.processId, m.id))) {
          // Unit lost (or the message was delivered and marked by someone else): stop here;
          // the owner now delivers what is left.
          if (!(await ctx.owns())) lost = true;
        }
      } else {
        streak++;
        const recorded = await q.markFailed(ctx.sql, unit, ctx.processId, {
          id: m.id,
          error,
          backoffMs: s.backoffMs,
          maxBackoffMs: s.maxBackoffMs,
        });
        if (!recorded && !(await ctx.owns())) lost = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(s.parallel, due.length) }, worker));
  if (lost) ctx.log('info', 'unit lost during delivery; stopped', {});
}

/** POST one message to every endpoint; resolves with undefined when all accepted it, else what failed. */
async function post(ctx: UnitContext<OutboxConfig>, s: Settings, m: q.OutboxMessage): Promise<string | undefined> {
  const body: OutboxDeliveryBody = { id: m.id, tenant: ctx.tenant, key: m.key, payload: m.payload };
  const text = JSON.stringify(body);
  const results = await Promise.all(
    ctx.config.endpoints.map(async (url): Promise<string | undefined> => {
      try {
        const res = await s.fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': idempotencyKey(ctx.tenant, m.id),
            'user-agent': 'leasehold-outbox',
          },
          body: text,
          redirect: 'manual',
          signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(s.timeoutMs)]),
        });
        // Only the status matters: the body is cancelled unread, so an endpoint answering an
        // endless (or huge) body cannot fill the worker's memory or hold the delivery.
        await res.body?.cancel().catch(() => undefined);
        return res.status >= 200 && res.status < 300 ? undefined : `${url}: HTTP ${res.status}`;
      } catch (e) {
        const err = e as Error;
        if (err?.name === 'TimeoutError') return `${url}: no answer within ${s.timeoutMs} ms`;
        const cause = (err?.cause as Error | undefined)?.message;
        return `${url}: ${err?.message ?? String(e)}${cause ? ` (${cause})` : ''}`;
      }
    }),
  );
  const failed = results.filter((r): r is string => r !== undefined);
  return failed.length ? failed.join('; ') : undefined;
}
