// One signed POST of a JSON body to one URL, through outbox delivery's HTTP client and its
// address policy (EndpointGuard): the outbox's own deliveries and the Batch Finished webhook
// (docs/design.md, "Events") both go this way.
import { createHmac } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { parseRetryAfter } from '../batch/http-date.js';
import { EndpointRefusedError } from './endpoint-guard.js';

/** One POST: where, what, with which headers, how long to wait (ms), and a signal that aborts it. */
export interface WebhookPost {
  url: string;
  /** The JSON text sent as the body. */
  body: string;
  headers: Record<string, string>;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * POST `p.body` to `p.url` through `dispatcher` (an {@link EndpointGuard}'s, so every address
 * the host resolves to is checked inside the connection's own lookup). Credentials in the URL
 * (`https://user:secret@host/…`) go as Basic authentication; redirects are not followed; the
 * answer's body is dropped unread. Resolves with undefined when the URL answered 2xx, else with
 * what failed (`HTTP 500`, `no answer within 5000 ms`, `refused: …`, the network error). Never throws.
 */
export async function postWebhook(dispatcher: Dispatcher, p: WebhookPost): Promise<string | undefined> {
  return (await postWebhookAnswer(dispatcher, p)).error;
}

/**
 * What a POST came to: `error` as {@link postWebhook} says it (undefined: accepted), and for a 429
 * or 503 with a readable `Retry-After` the wait it asked for, ms (at most one day: longer ones
 * read as one day, never ignored). Delay-seconds are taken as they are; an HTTP date is measured
 * from the answer's own `Date` header when it has a readable one (so the endpoint's clock and
 * ours need not agree), else from this machine's clock.
 */
export interface WebhookAnswer {
  error: string | undefined;
  retryAfterMs?: number;
  /** The answer's HTTP status code; undefined when none came (a network error, a timeout, a refusal). */
  status?: number;
  /**
   * With `error`, its kind in a few words, as OpenTelemetry's `error.type` takes it: the status
   * code (`500`), `timeout`, `refused` (the address policy), or the network error's code
   * (`ECONNREFUSED`) or name.
   */
  errorType?: string;
}

/** {@link postWebhook}, also reading a 429's or 503's `Retry-After`. Never throws. */
export async function postWebhookAnswer(dispatcher: Dispatcher, p: WebhookPost): Promise<WebhookAnswer> {
  const url = new URL(p.url);
  const headers: Record<string, string> = { 'content-type': 'application/json', ...p.headers };
  if (url.username || url.password) {
    headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`;
  }
  // Aborted at the timeout or with the caller's signal; both are let go once the POST ended, so
  // nothing aborts the (already dropped) answer later.
  const abort = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, p.timeoutMs);
  const onAbort = () => abort.abort();
  p.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const res = await dispatcher.request({
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: 'POST',
      headers,
      body: p.body,
      signal: abort.signal,
      headersTimeout: p.timeoutMs,
      bodyTimeout: p.timeoutMs,
    });
    // Only the status matters: the body is dropped unread, so an endpoint answering an endless
    // (or huge) body cannot fill the worker's memory or hold the delivery.
    res.body.on('error', () => {});
    res.body.destroy();
    const status = res.statusCode;
    if (status >= 200 && status < 300) return { error: undefined, status };
    const error = `HTTP ${status}`;
    const failed = { status, errorType: String(status) };
    if (status !== 429 && status !== 503) return { error, ...failed };
    const header = res.headers['retry-after'];
    const sentAt = Date.parse(String(res.headers.date ?? ''));
    const retryAfterMs = parseRetryAfter(
      Array.isArray(header) ? header[0] : header,
      Number.isFinite(sentAt) ? sentAt : Date.now(),
    );
    return retryAfterMs === undefined
      ? { error, ...failed }
      : { error: `${error}, Retry-After ${retryAfterMs} ms`, retryAfterMs, ...failed };
  } catch (e) {
    if (timedOut) return { error: `no answer within ${p.timeoutMs} ms`, errorType: 'timeout' };
    if (e instanceof EndpointRefusedError) return { error: `refused: ${e.message}`, errorType: 'refused' };
    const err = e as Error & { code?: string };
    const cause = err?.cause as (Error & { code?: string }) | undefined;
    return {
      error: `${err?.message ?? String(e)}${err?.code && !err.message?.includes(err.code) ? ` (${err.code})` : ''}${cause?.message ? ` (${cause.message})` : ''}`,
      errorType: err?.code ?? cause?.code ?? err?.name ?? 'Error',
    };
  } finally {
    clearTimeout(timer);
    p.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * The signature headers of a webhook, as the Standard Webhooks specification signs them:
 * `webhook-id` (the message's stable id), `webhook-timestamp` (Unix seconds) and
 * `webhook-signature` = `v1,` + base64 of HMAC-SHA256 over `<id>.<timestamp>.<body>` with the
 * secret. A secret written `whsec_<base64>` is that key's bytes; any other string is used as its
 * UTF-8 bytes. A receiver recomputes the HMAC and compares it, and refuses old timestamps.
 */
export function signWebhook(secret: string, id: string, timestampS: number, body: string): Record<string, string> {
  const key = secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');
  const mac = createHmac('sha256', key).update(`${id}.${timestampS}.${body}`, 'utf8').digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': String(timestampS), 'webhook-signature': `v1,${mac}` };
}
