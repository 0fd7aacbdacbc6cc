// Callback tokens (docs/design.md, "Waiting items: callbacks and sleeps"): what a waiting item's
// work hands to the outside world, and all a third party needs to complete the callback without
// AWS credentials. A token is `<payload>.<signature>`, both base64url: the payload names the
// batch, the item, the attempt and the wait (a random id stored with the wait, so a token of an
// earlier wait of the item matches nothing); the signature is HMAC-SHA-256 of the payload with the
// key stored in leasehold_callback_keys (migration 034). A forged or altered token is refused
// before any statement touches an item.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Sql } from '../store/index.js';
import { LeaseholdError } from '../errors.js';
import { callbackKey } from './sql/waits.js';

/** What a callback token names. */
export interface CallbackClaims {
  batchId: string;
  key: string;
  /** The attempt that registered the wait. */
  attempt: number;
  /** The wait's id. */
  waitId: string;
}

/** A callback token that is malformed or not signed by this deployment's key. The API answers 403. */
export class InvalidCallbackTokenError extends LeaseholdError {
  constructor() {
    super('invalid_callback_token', 'the callback token is malformed or its signature does not match');
  }
}

const keys = new WeakMap<Sql, Promise<string>>();

/** The signing key, read once per pool (a failed read is tried again next time). */
function keyOf(sql: Sql): Promise<string> {
  let k = keys.get(sql);
  if (!k) {
    k = callbackKey(sql);
    k.catch(() => keys.delete(sql));
    keys.set(sql, k);
  }
  return k;
}

function sign(secret: string, payload: string): Buffer {
  return createHmac('sha256', secret).update(payload).digest();
}

/** Make the token of one wait (signed with the deployment's key, read from `sql` once). */
export async function signCallbackToken(sql: Sql, c: CallbackClaims): Promise<string> {
  const payload = Buffer.from(JSON.stringify([c.batchId, c.key, c.attempt, c.waitId])).toString('base64url');
  return `${payload}.${sign(await keyOf(sql), payload).toString('base64url')}`;
}

/**
 * Check a token's signature and read what it names.
 * @throws {InvalidCallbackTokenError} malformed, or not signed by this deployment's key.
 */
export async function verifyCallbackToken(sql: Sql, token: string): Promise<CallbackClaims> {
  const [payload, signature, extra] = token.split('.');
  if (!payload || !signature || extra !== undefined || token.length > 8_192) throw new InvalidCallbackTokenError();
  const given = Buffer.from(signature, 'base64url');
  const expected = sign(await keyOf(sql), payload);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new InvalidCallbackTokenError();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    throw new InvalidCallbackTokenError();
  }
  if (!Array.isArray(parsed) || parsed.length !== 4) throw new InvalidCallbackTokenError();
  const [batchId, key, attempt, waitId] = parsed as unknown[];
  if (typeof batchId !== 'string' || typeof key !== 'string' || !Number.isInteger(attempt) || typeof waitId !== 'string') {
    throw new InvalidCallbackTokenError();
  }
  return { batchId, key, attempt: attempt as number, waitId };
}
