import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { Dispatcher } from 'undici';
import * as z from 'zod';
import type { UnitKey } from '../lease/sql/ownership.js';
import type { Sql } from '../store/connect.js';
import { EndpointGuard, type AddressLookup } from './endpoint-guard.js';
import { postWebhookAnswer, type WebhookAnswer } from './webhook.js';
import { defineUnitJob, type ConfigIssue, type UnitContext, type UnitJob } from './job.js';
import * as q from './sql/outbox.js';
import { LeaseholdError, InvalidSettingError } from '../errors.js';

/** Name of the outbox delivery unit job (`job` in `PUT /tenants/{tenant}/units`). */
export const OUTBOX_JOB = 'outbox-delivery';

/** Most endpoints one tenant may register. */
export const MAX_ENDPOINTS = 32;

/** Most unassigned messages one run of a unit assigns to its endpoints. */
export const ASSIGN_BATCH = 1_000;

/**
 * Longest pause an endpoint's `Retry-After` buys, ms: 15 minutes (docs/design.md, "Outbox").
 * Longer answers are cut to it: a receiver asking for a day (a maintenance page, a misread
 * quota) would otherwise hold every message for a day after it recovered. 15 minutes outlasts
 * the windows rate limiters count in (a second to a few minutes), costs a still-refusing endpoint
 * one request per shard per 15 minutes, and is the longest a Lambda invocation lives.
 */
export const MAX_RETRY_AFTER_MS = 15 * 60_000;

/** Share of a Retry-After pause its wake-up is spread over, after the wait (a tenth: 3 s of a 30 s pause). */
export const RETRY_AFTER_JITTER = 0.1;

const httpUrl = z
  .string({
    error: (i) => `must be a string, got ${i.input === null ? 'null' : Array.isArray(i.input) ? 'array' : typeof i.input}`,
  })
  .max(2048, 'must be at most 2048 characters')
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
    } catch {
      return false;
    }
  }, 'must be an absolute http:// or https:// URL');

/**
 * Configuration of an outbox delivery unit: the tenant's webhook endpoints, 1..32 distinct
 * http(s) URLs (two spellings of one URL, such as `HTTP://A.example/x` and `http://a.example/x`,
 * count as the same). Syntax only: where the URLs point is checked by the job's
 * {@link UnitJob.admit} and, on every connection, at delivery.
 */
export const outboxConfigSchema = z
  .object({
    endpoints: z
      .array(httpUrl, { error: (i) => (i.input === undefined ? 'Required' : 'must be an array of URLs') })
      .min(1, 'must list at least one URL')
      .max(MAX_ENDPOINTS, `must list at most ${MAX_ENDPOINTS} URLs`)
      .superRefine((urls, ctx) => {
        if (urls.length > MAX_ENDPOINTS) return;
        const seen = new Map<string, number>();
        urls.forEach((url, i) => {
          let href: string;
          try {
            href = new URL(url).href;
          } catch {
            return;
          }
          const first = seen.get(href);
          if (first === undefined) seen.set(href, i);
          else ctx.addIssue({ code: 'custom', path: [i], message: `the same URL as endpoints[${first}]` });
        });
      }),
  })
  .strict();

/** Configuration of an outbox delivery unit. */
export type OutboxConfig = z.infer<typeof outboxConfigSchema>;

/** Settings of {@link outboxDelivery}; durations in ms. */
export interface OutboxDeliveryOptions {
  /** Pause between runs of one unit, ms. Default 1,000. */
  intervalMs?: number;
  /** Most due deliveries one run takes per endpoint, oldest due first. Default 100. */
  batchSize?: number;
  /** Messages delivered at once to one endpoint by one unit. Default 4. */
  parallel?: number;
  /** Timeout of one POST to one endpoint (connecting included), ms. Default 5,000. */
  timeoutMs?: number;
  /**
   * First backoff interval after a failed attempt, ms; doubles per attempt, and the delivery is
   * due again at a random time within it (full jitter). Default 1,000.
   */
  backoffMs?: number;
  /** Longest retry delay, ms. Default 60,000. */
  maxBackoffMs?: number;
  /**
   * Longest pause an endpoint's `Retry-After` (429 or 503) buys, ms; longer ones are cut to it.
   * Default {@link MAX_RETRY_AFTER_MS} (15 minutes).
   */
  maxRetryAfterMs?: number;
  /**
   * A run stops posting to an endpoint after this many failed attempts in a row (the endpoint's
   * other due deliveries wait for the next run; the other endpoints go on). Default `parallel`.
   */
  failureStreak?: number;
  /**
   * Endpoint hosts, IP addresses and CIDR ranges that may be reached although they are not
   * public (for example a webhook receiver inside your VPC, or a local test sink). An array, or
   * one string of entries separated by commas. Default: the environment variable
   * `LEASEHOLD_OUTBOX_ALLOW`, read when used; unset means only public addresses.
   */
  allow?: string | readonly string[];
  /** Resolves endpoint host names (every address is checked). Default the system resolver (`dns.lookup`). */
  lookup?: AddressLookup;
}

/** The JSON body every endpoint receives for one message. */
export interface OutboxDeliveryBody {
  /** The message id: a 64-bit integer as decimal text (exact past 2^53, where a JSON number is not). */
  id: string;
  tenant: string;
  key: string;
  payload: unknown;
}

/** The `Idempotency-Key` header value of a message: `<tenant>:<id>` (id in decimal), the same on every attempt and endpoint. */
export function idempotencyKey(tenant: string, id: string): string {
  return `${tenant}:${id}`;
}

/**
 * The shard a message key is enqueued on: the first 48 bits of the key's SHA-256, modulo the
 * tenant's shard count. Stable across processes, versions and restarts.
 * @throws {InvalidSettingError} `shards` not a positive whole number.
 */
export function outboxShard(key: string, shards: number): number {
  if (!Number.isInteger(shards) || shards < 1)
    throw new InvalidSettingError('shards', `must be a positive whole number, got ${shards}`);
  return createHash('sha256').update(key, 'utf8').digest().readUIntBE(0, 6) % shards;
}

/** The tenant has no outbox delivery units (of weight > 0, to enqueue on). API: 404. */
export class NoOutboxUnitsError extends LeaseholdError {
  constructor(readonly tenant: string) {
    super(
      'no_outbox_units',
      `tenant "${tenant}" has no ${OUTBOX_JOB} units of weight > 0 (nothing would deliver): register them first with PUT /tenants/${tenant}/units { "job": "${OUTBOX_JOB}", "shards": N, "endpoints": [URL, …] }`,
    );
  }
}

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

/**
 * The per-tenant outbox delivery unit job (docs/design.md, "Two kinds of work": "deliver each
 * tenant's outbox to its webhook endpoints"), with its settings.
 *
 * Each run of unit `(tenant, shard)`:
 * 1. assigns up to {@link ASSIGN_BATCH} newly enqueued messages of the shard to the endpoints
 *    of the unit's config — one delivery per endpoint — in one statement fenced on still owning
 *    the unit. An endpoint added later gets only messages assigned after it was added (in
 *    practice: enqueued after, or within the interval before); an endpoint removed has its
 *    pending deliveries dropped, on the first run that sees the new config.
 * 2. per endpoint, on its own: takes up to `batchSize` due deliveries, oldest due first, and
 *    POSTs each (`parallel` at once) as JSON {@link OutboxDeliveryBody} with header
 *    `Idempotency-Key: <tenant>:<id>`, with `timeoutMs` per request. A 2xx answer marks that
 *    delivery delivered; anything else (3xx included: redirects are not followed) records a
 *    failure, and the delivery is due again after
 *    `jitter × min(maxBackoffMs, backoffMs × 2^(attempts−1))` by the database clock, jitter
 *    uniform in [0, 1) (full jitter: failures of one moment come back spread out).
 *    After `failureStreak` failures in a row the run stops posting to that endpoint.
 * 3. a 429 or 503 with `Retry-After` (seconds, or an HTTP date read against the answer's `Date`)
 *    pauses that endpoint for the whole tenant — every shard, on every process — for the wait
 *    asked, at most `maxRetryAfterMs`, plus a wake-up jitter of up to {@link RETRY_AFTER_JITTER}
 *    of it spread over the shards; stored in the database and compared with its clock. Each mark
 *    answers whether the endpoint is paused, so a run of another shard stops posting to it after
 *    the POSTs it had already started.
 *
 * So a failing endpoint never makes a healthy one receive a message again, nor holds up its
 * other messages, the other endpoints or the tenant's other shards. Every write is fenced on
 * owning the unit. Delivery is at least once per endpoint (a process that loses the unit after a
 * POST and before its mark leaves the delivery to the next owner; endpoints deduplicate on the
 * idempotency key); marking happens once. The owner of shard 0 also moves unassigned messages and
 * pending deliveries of shards that no longer exist onto `shard mod count`.
 *
 * Where a POST may go: only to public addresses, or to those `allow` lists (see
 * {@link EndpointGuard}). Registration refuses other endpoints; at delivery every address a
 * host name resolves to is checked inside the connection's own lookup, so the request goes to
 * the address that was checked. A refused endpoint fails its deliveries with the reason.
 * @throws {InvalidSettingError} a setting out of range, or an `allow` entry that does not parse.
 */
export function outboxDelivery(options: OutboxDeliveryOptions = {}): UnitJob<OutboxConfig> {
  const s: Settings = {
    intervalMs: options.intervalMs ?? 1_000,
    batchSize: options.batchSize ?? 100,
    parallel: options.parallel ?? 4,
    timeoutMs: options.timeoutMs ?? 5_000,
    backoffMs: options.backoffMs ?? 1_000,
    maxBackoffMs: options.maxBackoffMs ?? 60_000,
    maxRetryAfterMs: options.maxRetryAfterMs ?? MAX_RETRY_AFTER_MS,
    failureStreak: options.failureStreak ?? options.parallel ?? 4,
  };
  for (const k of ['batchSize', 'parallel', 'timeoutMs', 'failureStreak'] as const) {
    if (!Number.isInteger(s[k]) || s[k] < 1) throw new InvalidSettingError(k, `must be a positive whole number, got ${s[k]}`);
  }
  for (const k of ['backoffMs', 'maxBackoffMs', 'maxRetryAfterMs'] as const) {
    if (!Number.isFinite(s[k]) || s[k] < 0) throw new InvalidSettingError(k, `must be 0 or more ms, got ${s[k]}`);
  }
  const guard = new EndpointGuard({ allow: options.allow, lookup: options.lookup });
  // The endpoint list each unit last dropped removed endpoints for, in this process.
  const pruned = new Map<string, string>();
  return defineUnitJob<OutboxConfig>({
    name: OUTBOX_JOB,
    description: "POST the tenant's outbox messages to its webhook endpoints, at least once each",
    config: outboxConfigSchema,
    intervalMs: s.intervalMs,
    weight: (config) => config.endpoints.length,
    admit: (config) => admitEndpoints(guard, config),
    run: (ctx) => deliverDue(ctx, s, guard, pruned),
  });
}

/** The `outbox-delivery` unit job with default settings. */
export const outboxDeliveryJob: UnitJob<OutboxConfig> = outboxDelivery();

type Settings = Required<Omit<OutboxDeliveryOptions, 'allow' | 'lookup'>>;

/** Registration's check: every endpoint must point at a public address (or an allow-listed one). */
async function admitEndpoints(guard: EndpointGuard, config: OutboxConfig): Promise<ConfigIssue[]> {
  const found = await Promise.all(config.endpoints.map((url) => guard.refusal(url)));
  return found.flatMap((message, i) => (message === undefined ? [] : [{ path: ['endpoints', i], message }]));
}

async function deliverDue(
  ctx: UnitContext<OutboxConfig>,
  s: Settings,
  guard: EndpointGuard,
  pruned: Map<string, string>,
): Promise<void> {
  const unit = { tenant: ctx.tenant, shard: ctx.shard };
  // A config stored before duplicates were refused may list an endpoint twice: it is one endpoint.
  const endpoints = [...new Set(ctx.config.endpoints)];
  if (ctx.shard === 0) {
    const moved = await q.rehome(ctx.sql, ctx.tenant, OUTBOX_JOB, ctx.processId);
    if (moved > 0) ctx.log('info', 'moved messages of removed shards', { moved });
  }
  const unitKey = `${ctx.tenant}\u0000${ctx.shard}`;
  const list = JSON.stringify(endpoints);
  if (pruned.get(unitKey) !== list) {
    const dropped = await q.dropRemovedEndpoints(ctx.sql, unit, ctx.processId, endpoints);
    if (dropped > 0) ctx.log('info', 'dropped pending deliveries of removed endpoints', { dropped });
    if (pruned.size >= 100_000) pruned.clear();
    pruned.set(unitKey, list);
  }
  if (!ctx.leaseValid()) return;
  await q.assign(ctx.sql, unit, ctx.processId, endpoints, ASSIGN_BATCH);

  const due = await q.dueDeliveries(ctx.sql, unit, endpoints, s.batchSize);
  if (due.length === 0) return;
  const dispatcher = await guard.dispatcher(s.timeoutMs);
  const run: Run = { ctx, s, unit, dispatcher, lost: false };
  const byEndpoint = new Map<string, q.OutboxDelivery[]>();
  for (const d of due) {
    const lane = byEndpoint.get(d.endpoint);
    if (lane) lane.push(d);
    else byEndpoint.set(d.endpoint, [d]);
  }
  // Every POST in flight listens on the unit's signal (removed when it ends): room for
  // `parallel` per endpoint without Node's leak warning.
  setMaxListeners(Math.max(10, s.parallel * byEndpoint.size + 10), ctx.signal);
  const lanes = await Promise.allSettled([...byEndpoint].map(([endpoint, deliveries]) => deliverTo(run, endpoint, deliveries)));
  if (run.lost) ctx.log('info', 'unit lost during delivery; stopped', {});
  const failed = lanes.find((l): l is PromiseRejectedResult => l.status === 'rejected');
  if (failed) throw failed.reason;
}

interface Run {
  ctx: UnitContext<OutboxConfig>;
  s: Settings;
  unit: UnitKey;
  dispatcher: Dispatcher;
  lost: boolean;
}

/** One run's deliveries to one endpoint: its due ones, `parallel` at once, until a failure streak or a pause. */
async function deliverTo(run: Run, endpoint: string, due: q.OutboxDelivery[]): Promise<void> {
  const { ctx, s } = run;
  const lane: Lane = { next: 0, streak: 0, paused: false, delivered: false, failures: 0, lastError: undefined };
  const worker = async () => {
    while (lane.next < due.length && !ctx.signal.aborted && !run.lost && !lane.paused && lane.streak < s.failureStreak) {
      // A process that was frozen past its TTL must not send on for a unit it may have lost.
      if (!ctx.leaseValid()) return;
      const m = due[lane.next++];
      const answer = await post(run, endpoint, m);
      if (ctx.signal.aborted) return;
      await settle(run, lane, endpoint, m, answer);
    }
  };
  await Promise.all(Array.from({ length: Math.min(s.parallel, due.length) }, worker));
  if ((lane.delivered || lane.lastError !== undefined) && !run.lost && !ctx.signal.aborted) {
    await q.recordEndpoint(ctx.sql, run.unit, ctx.processId, {
      endpoint,
      delivered: lane.delivered,
      failures: lane.failures,
      error: lane.lastError,
    });
  }
}

/** What one run knows of one endpoint while it posts to it. */
interface Lane {
  /** Index of the next due delivery to post. */
  next: number;
  /** Failed attempts in a row. */
  streak: number;
  /** The endpoint is paused (it asked here, or another shard's owner stored its pause): post nothing more. */
  paused: boolean;
  delivered: boolean;
  failures: number;
  lastError: string | undefined;
}

/** Store what one POST came to: delivered, or failed (pausing the endpoint when it asked); learn of a pause from the mark. */
async function settle(run: Run, lane: Lane, endpoint: string, m: q.OutboxDelivery, answer: WebhookAnswer): Promise<void> {
  const { ctx, s, unit } = run;
  const { error, retryAfterMs } = answer;
  let mark: q.MarkAnswer;
  if (error === undefined) {
    lane.streak = 0;
    lane.failures = 0;
    lane.delivered = true;
    mark = await q.markDelivered(ctx.sql, unit, ctx.processId, m.id, endpoint);
  } else {
    lane.streak++;
    lane.failures++;
    lane.lastError = error;
    let waitMs: number | undefined;
    if (retryAfterMs !== undefined) {
      // Asked to pause: this lane's other workers start nothing more from here on, before the
      // awaits below give them a turn; the pause is stored before the failure, so the owners of
      // the tenant's other shards learn of it as early as can be (docs/design.md, "Outbox").
      lane.paused = true;
      waitMs = Math.min(retryAfterMs, s.maxRetryAfterMs);
      await q.pauseEndpoint(ctx.sql, unit, ctx.processId, {
        endpoint,
        askedMs: retryAfterMs,
        waitMs,
        jitterMs: waitMs * RETRY_AFTER_JITTER,
      });
      ctx.log('info', 'endpoint asked for a pause (Retry-After); paused for the tenant', {
        endpoint,
        askedMs: retryAfterMs,
        waitMs,
      });
    }
    mark = await q.markFailed(ctx.sql, unit, ctx.processId, {
      id: m.id,
      endpoint,
      error,
      backoffMs: s.backoffMs,
      maxBackoffMs: s.maxBackoffMs,
      retryAfterMs: waitMs,
    });
  }
  if (mark.paused) lane.paused = true;
  // Not marked: the unit was lost (or the delivery was marked by someone else). Stop if lost; the
  // owner now delivers what is left.
  if (!mark.marked && !(await ctx.owns())) run.lost = true;
}

/** POST one message to one endpoint: `error` undefined when it accepted it (2xx), else what failed, and any Retry-After. */
function post(run: Run, endpoint: string, m: q.OutboxDelivery): ReturnType<typeof postWebhookAnswer> {
  const { ctx, s } = run;
  const body: OutboxDeliveryBody = { id: m.id, tenant: ctx.tenant, key: m.key, payload: m.payload };
  return postWebhookAnswer(run.dispatcher, {
    url: endpoint,
    body: JSON.stringify(body),
    headers: { 'idempotency-key': idempotencyKey(ctx.tenant, m.id), 'user-agent': 'leasehold-outbox' },
    timeoutMs: s.timeoutMs,
    signal: ctx.signal,
  });
}
