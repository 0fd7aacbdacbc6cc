// One run of an outbox delivery unit (outboxDelivery's `run`, docs/design.md, "Outbox"): assign
// the shard's new messages, then POST each endpoint's due deliveries. Imported on a unit's first
// run, so a worker that owns no outbox unit does not load it (nor the outbox's statements).
import { setMaxListeners } from 'node:events';
import type { Dispatcher } from 'undici';
import type { UnitKey } from '../lease/sql/ownership.js';
import type { EndpointGuard } from './endpoint-guard.js';
import type { UnitContext } from './job.js';
import {
  ASSIGN_BATCH,
  idempotencyKey,
  OUTBOX_JOB,
  RETRY_AFTER_JITTER,
  type DeliverySettings as Settings,
  type OutboxDeliveryBody,
} from './outbox-rules.js';
import * as q from './sql/outbox.js';

/** What a run reads of its unit's config (`OutboxConfig`, parsed). */
interface OutboxConfig {
  endpoints: string[];
}
import { postWebhookAnswer, type WebhookAnswer } from './webhook.js';

/**
 * One run of unit `(ctx.tenant, ctx.shard)` with settings `s` (see `outboxDelivery`); `pruned`
 * holds the endpoint list each unit last dropped removed endpoints for, in this process.
 * @throws the first endpoint lane's error (a store error); the other lanes finish first.
 */
export async function deliverDue(
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
