// The outbox's rules that its definition (outbox-delivery.ts), its runs (outbox-run.ts) and its
// enqueue and reads (outbox.ts) share: the job's name, its limits, the shard of a key, the
// idempotency key and the body each endpoint receives (docs/design.md, "Outbox").
import { createHash } from 'node:crypto';
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

/** The settings one run of an outbox unit works with (`outboxDelivery`'s, defaults filled in); durations in ms. */
export interface DeliverySettings {
  /** Most due deliveries one run takes per endpoint. */
  batchSize: number;
  /** Messages delivered at once to one endpoint. */
  parallel: number;
  /** Timeout of one POST, ms. */
  timeoutMs: number;
  /** First backoff interval after a failed attempt, ms. */
  backoffMs: number;
  /** Longest retry delay, ms. */
  maxBackoffMs: number;
  /** Longest pause an endpoint's `Retry-After` buys, ms. */
  maxRetryAfterMs: number;
  /** Failed attempts in a row after which a run stops posting to an endpoint. */
  failureStreak: number;
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
