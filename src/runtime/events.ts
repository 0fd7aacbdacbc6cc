// Sending Batch Finished events (docs/design.md, "Events"): to the stack's EventBridge bus with
// PutEvents, and as signed webhooks through outbox delivery's HTTP client and address policy.
// The run that ended a batch sends its event at once (best effort, for latency); the scheduler
// sends whatever is left. Rows are taken with SKIP LOCKED and a claim window, so no transaction
// stays open across a send; a sender that dies before marking leaves the row to the next one
// after the window: at least once, with the event's stable id every time.
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import {
  BATCH_FINISHED,
  EVENT_SOURCE,
  markNotified,
  markNotifyFailed,
  markSendFailed,
  markSent,
  takeUnnotified,
  takeUnsent,
  type BatchFinishedDetail,
  type TakenEvent,
} from '../batch/events.js';
import type { Prices } from '../batch/usage.js';
import { getBatchesUsage } from '../batch/usage-reads.js';
import { putEventsEntrySize } from '../contract.js';
import {
  formatTraceparent,
  parseTraceparent,
  traced,
  tracing,
  tracingRegistered,
  xrayTraceHeader,
  type TraceLinks,
} from '../tracing.js';
import type { Sql } from '../store/connect.js';
import { EndpointGuard } from '../units/endpoint-guard.js';
import { MAX_RETRY_AFTER_MS } from '../units/outbox-delivery.js';
import { postWebhookAnswer, signWebhook, type WebhookAnswer } from '../units/webhook.js';
import type { Log } from '../log.js';
import { boundDetail, packCalls } from './event-size.js';

/** PutEvents takes at most 10 entries per call. */
const PUT_EVENTS_MAX = 10;

/** Puts events on a bus; answers, per entry in order, undefined when accepted or why not. */
export interface EventPublisher {
  put(entries: readonly BatchFinishedDetail[]): Promise<(string | undefined)[]>;
}

/**
 * Puts Batch Finished events on an EventBridge bus with `PutEvents` (source `leasehold`,
 * detail-type `Batch Finished`, the detail as stored, cut to fit 256 KiB by
 * {@link boundDetail}). The entries go in as few calls as keep each within EventBridge's 256 KiB
 * ({@link packCalls}), so one large event never fails the others; a call that fails fails its
 * own entries only (`PutEvents failed: …`). The endpoint follows the SDK's configuration, so
 * locally `AWS_ENDPOINT_URL_EVENTBRIDGE` points it at `leasehold dev`'s local endpoint.
 * `@aws-sdk/client-eventbridge` is loaded on the first put (a worker that ends no batch never
 * loads it: docs/design.md, "Cold starts and code splitting").
 */
export class EventBridgePublisher implements EventPublisher {
  private client: EventBridgeClient | undefined;

  constructor(
    private readonly busName: string,
    client?: EventBridgeClient,
  ) {
    this.client = client;
  }

  async put(entries: readonly BatchFinishedDetail[]): Promise<(string | undefined)[]> {
    const { EventBridgeClient, PutEventsCommand } = await import('@aws-sdk/client-eventbridge');
    this.client ??= new EventBridgeClient({});
    const all = entries.map((detail) => ({
      EventBusName: this.busName,
      Source: EVENT_SOURCE,
      DetailType: BATCH_FINISHED,
      Detail: JSON.stringify(boundDetail(detail)),
      Resources: [],
      Time: new Date(detail.finishedAt),
      // X-Ray follows the batch's trace to the event's targets (docs/design.md, "Traces").
      TraceHeader: xrayTraceHeader(detail.traceparent),
    }));
    const sizes = all.map(putEventsEntrySize);
    const { calls, tooLarge } = packCalls(sizes);
    const errors: (string | undefined)[] = entries.map(() => 'PutEvents answered no entry for it');
    for (const i of tooLarge) errors[i] = `the event is ${sizes[i]} bytes; PutEvents takes at most 262144`;
    for (const call of calls) {
      try {
        const client = this.client;
        const put = () => client.send(new PutEventsCommand({ Entries: call.map((i) => all[i]) }));
        // A span per PutEvents call when tracing (docs/design.md, "Traces").
        const attributes = {
          'messaging.system': 'aws_eventbridge',
          'messaging.operation.type': 'send',
          'messaging.destination.name': this.busName,
          'messaging.batch.message_count': call.length,
        };
        const out = await (tracingRegistered()
          ? traced('send Batch Finished', attributes, put, 'producer', eventLinks(call.map((i) => entries[i]!)))
          : put());
        call.forEach((i, j) => {
          const r = out.Entries?.[j];
          if (r) errors[i] = r.ErrorCode ? `${r.ErrorCode}: ${r.ErrorMessage ?? ''}`.trim() : undefined;
        });
      } catch (e) {
        for (const i of call) errors[i] = `PutEvents failed: ${(e as Error)?.message ?? String(e)}`;
      }
    }
    return errors;
  }
}

/** Links of a send's span to the traces of the batches whose events it sends (OpenTelemetry messaging: one per message). */
function eventLinks(details: readonly BatchFinishedDetail[]): TraceLinks {
  const links: TraceLinks = [];
  for (const d of details) {
    const sc = parseTraceparent(d.traceparent);
    if (sc) links.push({ context: sc, attributes: { 'leasehold.batch.id': d.batchId, 'messaging.message.id': d.id } });
  }
  return links;
}

/** What a sender needs: the store, where to put events, how to sign and send webhooks. */
export interface EventSenderDeps {
  sql: Sql;
  /** The bus; undefined: no bus is configured, and events are marked sent without a put. */
  publisher: EventPublisher | undefined;
  /** The key webhooks are signed with (`LEASEHOLD_WEBHOOK_SECRET`); undefined: webhooks are sent unsigned. */
  webhookSecret: string | undefined;
  /** Outbox delivery's address policy (`LEASEHOLD_OUTBOX_ALLOW`); default a guard of its own. */
  guard?: EndpointGuard;
  /** The prices the events' `usage` is estimated at (docs/design.md, "Usage and cost"). Default `us-east-1`'s. */
  prices?: Prices;
  log: Log;
}

/**
 * The taken events with their batches' `usage` as recorded now (one statement for them all;
 * docs/design.md, "Usage and cost"). Not stored: each send reads it again.
 */
async function withUsage(deps: EventSenderDeps, taken: TakenEvent[]): Promise<TakenEvent[]> {
  if (taken.length === 0) return taken;
  const usage = await getBatchesUsage(deps.sql, [...new Set(taken.map((t) => t.detail.batchId))], deps.prices);
  return taken.map((t) => ({ ...t, detail: { ...t.detail, usage: usage.get(t.detail.batchId) } }));
}

/** What {@link sendEvents} takes; durations in ms. */
export interface SendOptions {
  /** Only this batch's events (the run that ended it). */
  batchId?: string;
  /** Most events put per pass. Default 100. */
  limit?: number;
  /** Starts no put or POST after this long, ms. Default 10,000. */
  budgetMs?: number;
  /** How long a taken row is this sender's before another may take it, ms. Default 30,000. */
  claimMs?: number;
  /** One webhook POST's timeout, ms. Default 5,000. */
  webhookTimeoutMs?: number;
}

/** What one {@link sendEvents} pass did. */
export interface SendResult {
  /** Events PutEvents accepted (or, with no bus, marked sent). */
  sent: number;
  /** Puts that failed (tried again after a backoff). */
  failed: number;
  /** Webhooks delivered (2xx). */
  notified: number;
  /** Webhook deliveries that failed (tried again after a backoff). */
  notifyFailed: number;
}

/** The next try after `attempts` failed ones: 1 s doubling to at most 60 s, plus up to 25 % jitter, ms. */
export function eventRetryMs(attempts: number): number {
  return Math.min(60_000, 1_000 * 2 ** Math.min(Math.max(attempts - 1, 0), 16)) * (1 + 0.25 * Math.random());
}

/**
 * Send the events that are due: puts of up to 10 at a time on the bus, then webhooks one by one
 * (each taken, sent and marked on its own), until none is due, `limit` is reached or the budget
 * is spent. A failed put or POST is recorded on its row and tried again after
 * {@link eventRetryMs}. Never holds a transaction or a row lock across a send.
 * @throws the store's error (the rows taken then are sent again after their claim window).
 */
export async function sendEvents(deps: EventSenderDeps, options: SendOptions = {}): Promise<SendResult> {
  const limit = options.limit ?? 100;
  const claimMs = options.claimMs ?? 30_000;
  const until = Date.now() + (options.budgetMs ?? 10_000);
  const result: SendResult = { sent: 0, failed: 0, notified: 0, notifyFailed: 0 };
  const batch = options.batchId === undefined ? {} : { batchId: options.batchId };
  for (let done = 0; done < limit && Date.now() < until;) {
    const taken = await withUsage(
      deps,
      await takeUnsent(deps.sql, { limit: Math.min(PUT_EVENTS_MAX, limit - done), claimMs, ...batch }),
    );
    if (taken.length === 0) break;
    done += taken.length;
    await put(deps, taken, result);
  }
  const guard = deps.guard ?? defaultGuard();
  for (let done = 0; done < limit && Date.now() < until; done++) {
    const [event] = await withUsage(deps, await takeUnnotified(deps.sql, { limit: 1, claimMs, ...batch }));
    if (!event) break;
    await notify(deps, guard, event, options.webhookTimeoutMs ?? 5_000, result);
  }
  return result;
}

async function put(deps: EventSenderDeps, taken: TakenEvent[], result: SendResult): Promise<void> {
  let errors: (string | undefined)[];
  try {
    errors = deps.publisher ? await deps.publisher.put(taken.map((t) => t.detail)) : taken.map(() => undefined);
  } catch (e) {
    const message = `PutEvents failed: ${(e as Error)?.message ?? String(e)}`;
    errors = taken.map(() => message);
  }
  await markSent(
    deps.sql,
    taken.filter((_, i) => errors[i] === undefined).map((t) => t.id),
  );
  for (const [i, t] of taken.entries()) {
    const error = errors[i];
    if (error === undefined) {
      result.sent++;
      continue;
    }
    result.failed++;
    deps.log('warn', 'Batch Finished event not put; tried again later', { eventId: t.id, batchId: t.detail.batchId, error });
    await markSendFailed(deps.sql, { id: t.id, error, retryInMs: eventRetryMs(t.attempts) });
  }
}

/** The webhook's body: the event as EventBridge delivers it to a rule's target. */
export interface WebhookBody {
  version: '0';
  id: string;
  'detail-type': typeof BATCH_FINISHED;
  source: typeof EVENT_SOURCE;
  time: string;
  detail: BatchFinishedDetail;
}

async function notify(
  deps: EventSenderDeps,
  guard: EndpointGuard,
  event: TakenEvent,
  timeoutMs: number,
  result: SendResult,
): Promise<void> {
  const url = event.notifyUrl!;
  const body: WebhookBody = {
    version: '0',
    id: event.id,
    'detail-type': BATCH_FINISHED,
    source: EVENT_SOURCE,
    time: event.detail.finishedAt,
    // As the bus gets it: within EventBridge's limit whatever its reason holds.
    detail: boundDetail(event.detail),
  };
  const text = JSON.stringify(body);
  const headers: Record<string, string> = { 'idempotency-key': event.id, 'user-agent': 'leasehold-events' };
  // The batch's trace context as W3C Trace Context's header too (docs/design.md, "Traces").
  if (event.detail.traceparent) headers.traceparent = event.detail.traceparent;
  if (deps.webhookSecret) Object.assign(headers, signWebhook(deps.webhookSecret, event.id, Math.floor(Date.now() / 1000), text));
  let error: string | undefined;
  let retryAfterMs: number | undefined;
  try {
    const post = async (h: Record<string, string>) =>
      postWebhookAnswer(await guard.dispatcher(timeoutMs), { url, body: text, headers: h, timeoutMs });
    // A span per delivery when tracing (docs/design.md, "Traces").
    ({ error, retryAfterMs } = await (tracingRegistered() ? tracedNotify(event, url, headers, post) : post(headers)));
  } catch (e) {
    error = (e as Error)?.message ?? String(e);
  }
  if (error === undefined) {
    result.notified++;
    await markNotified(deps.sql, event.id);
    return;
  }
  result.notifyFailed++;
  deps.log('warn', 'Batch Finished webhook not delivered; tried again later', { eventId: event.id, url, error });
  // A 429 or 503 with Retry-After: the next try waits at least that long, cut as the outbox cuts it.
  const retryInMs = Math.max(eventRetryMs(event.attempts), Math.min(retryAfterMs ?? 0, MAX_RETRY_AFTER_MS));
  await markNotifyFailed(deps.sql, { id: event.id, error, retryInMs });
}

/**
 * `post`, one webhook delivery, in a client span `POST Batch Finished webhook` (docs/design.md,
 * "Traces"): a child of the batch's start span (the event's `traceparent`; else of the active
 * span), linked to the active span when both are there; the OpenTelemetry HTTP client
 * attributes (`http.request.method`, `url.full` with its credentials and query values
 * redacted, `server.address`, `server.port`, `http.response.status_code`) and `error.type` and
 * status error when the delivery failed. The request's `traceparent` header names this span.
 */
async function tracedNotify(
  event: TakenEvent,
  url: string,
  headers: Record<string, string>,
  post: (headers: Record<string, string>) => Promise<WebhookAnswer>,
): Promise<WebhookAnswer> {
  const t = await tracing();
  if (!t) return post(headers);
  const parent = parseTraceparent(event.detail.traceparent);
  const active = t.activeSpanContext();
  const u = new URL(url);
  const span = t.start(
    'POST Batch Finished webhook',
    'client',
    {
      'http.request.method': 'POST',
      'url.full': redactedUrl(u),
      'server.address': u.hostname.replace(/^\[(.*)\]$/, '$1'),
      'server.port': u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80,
      'messaging.message.id': event.id,
      'leasehold.batch.id': event.detail.batchId,
      'leasehold.tenant': event.detail.tenant,
    },
    parent,
    parent && active ? [{ context: active, attributes: { 'leasehold.link': 'sender' } }] : undefined,
  );
  try {
    // W3C Trace Context: the receiver continues from this span (the batch's, should it not be valid).
    const own = formatTraceparent(span.spanContext());
    const answer = await t.within(span, () => post(parseTraceparent(own) ? { ...headers, traceparent: own } : headers));
    if (answer.status !== undefined) span.setAttribute('http.response.status_code', answer.status);
    if (answer.error !== undefined) {
      span.setAttribute('error.type', answer.errorType ?? '_OTHER');
      t.failWith(span, answer.error);
    }
    return answer;
  } catch (e) {
    t.fail(span, e);
    throw e;
  } finally {
    span.end();
  }
}

/**
 * A URL as a span may show it (OpenTelemetry's `url.full`): user and password as `REDACTED`,
 * and every query parameter's value too (a webhook's token often rides there); no fragment.
 */
function redactedUrl(u: URL): string {
  const r = new URL(u.href);
  if (r.username) r.username = 'REDACTED';
  if (r.password) r.password = 'REDACTED';
  r.hash = '';
  if (r.search) {
    const keys = [...r.searchParams.keys()];
    r.search = '';
    for (const k of keys) r.searchParams.append(k, 'REDACTED');
  }
  return r.href;
}

let guard: EndpointGuard | undefined;
/** One guard per container: it reads `LEASEHOLD_OUTBOX_ALLOW` when it checks an address. */
function defaultGuard(): EndpointGuard {
  guard ??= new EndpointGuard({});
  return guard;
}
