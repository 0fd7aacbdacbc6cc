// The outbox delivery unit job's definition: its settings, its config schema and the factory.
// What a run does (the outbox's statements, the webhook POSTs) is in outbox-run.ts, imported on a
// unit's first run, and the outbox's reads and enqueue are in outbox.ts: a worker that owns no
// outbox unit does not load them at its cold start (docs/design.md, "Cold starts and code splitting").
import * as z from '../zod.js';
import type { AddressLookup, EndpointGuard } from './endpoint-guard.js';
import { readOutboxAllow } from './outbox-allow.js';
import { defineUnitJob, type ConfigIssue, type UnitJob } from './job.js';
import { MAX_ENDPOINTS, MAX_RETRY_AFTER_MS, OUTBOX_JOB, type DeliverySettings } from './outbox-rules.js';
import { InvalidSettingError } from '../errors.js';

export {
  ASSIGN_BATCH,
  idempotencyKey,
  MAX_ENDPOINTS,
  MAX_RETRY_AFTER_MS,
  NoOutboxUnitsError,
  OUTBOX_JOB,
  outboxShard,
  RETRY_AFTER_JITTER,
  type OutboxDeliveryBody,
} from './outbox-rules.js';

const httpUrl = z
  .string({
    error: (i) => `must be a string, got ${i.input === null ? 'null' : Array.isArray(i.input) ? 'array' : typeof i.input}`,
  })
  .check(
    z.maxLength(2048, 'must be at most 2048 characters'),
    z.refine((s) => {
      try {
        const u = new URL(s);
        return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
      } catch {
        return false;
      }
    }, 'must be an absolute http:// or https:// URL'),
  );

/**
 * Configuration of an outbox delivery unit: the tenant's webhook endpoints, 1..32 distinct
 * http(s) URLs (two spellings of one URL, such as `HTTP://A.example/x` and `http://a.example/x`,
 * count as the same). Syntax only: where the URLs point is checked by the job's
 * {@link UnitJob.admit} and, on every connection, at delivery.
 */
export const outboxConfigSchema = z.strictObject({
  endpoints: z.array(httpUrl, { error: (i) => (i.input === undefined ? 'Required' : 'must be an array of URLs') }).check(
    z.minLength(1, 'must list at least one URL'),
    z.maxLength(MAX_ENDPOINTS, `must list at most ${MAX_ENDPOINTS} URLs`),
    z.superRefine((urls, ctx) => {
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
  ),
});

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
  // The address policy (ipaddr.js) loads with the first registration or run: a worker that owns
  // no outbox unit never reads it. A bad `allow` is refused here all the same (its syntax).
  if (options.allow !== undefined) readOutboxAllow(options.allow);
  let guardLoaded: Promise<EndpointGuard> | undefined;
  const guard = () => {
    guardLoaded ??= import('./endpoint-guard.js').then(
      ({ EndpointGuard }) => new EndpointGuard({ allow: options.allow, lookup: options.lookup }),
    );
    // A failed load is tried again by the next call.
    guardLoaded.catch(() => (guardLoaded = undefined));
    return guardLoaded;
  };
  // The endpoint list each unit last dropped removed endpoints for, in this process.
  const pruned = new Map<string, string>();
  return defineUnitJob<OutboxConfig>({
    name: OUTBOX_JOB,
    description: "POST the tenant's outbox messages to its webhook endpoints, at least once each",
    config: outboxConfigSchema,
    intervalMs: s.intervalMs,
    weight: (config) => config.endpoints.length,
    admit: async (config) => admitEndpoints(await guard(), config),
    run: async (ctx) => (await import('./outbox-run.js')).deliverDue(ctx, s, await guard(), pruned),
  });
}

/** The `outbox-delivery` unit job with default settings. */
export const outboxDeliveryJob: UnitJob<OutboxConfig> = outboxDelivery();

type Settings = Required<Omit<OutboxDeliveryOptions, 'allow' | 'lookup'>> & DeliverySettings;

/** Registration's check: every endpoint must point at a public address (or an allow-listed one). */
async function admitEndpoints(guard: EndpointGuard, config: OutboxConfig): Promise<ConfigIssue[]> {
  const found = await Promise.all(config.endpoints.map((url) => guard.refusal(url)));
  return found.flatMap((message, i) => (message === undefined ? [] : [{ path: ['endpoints', i], message }]));
}
