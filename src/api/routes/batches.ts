// Routes of batches: start, list, show, cancel, pause, resume, items (and the tenant-scoped twins of each, see
// router.ts), redrive, and items finished over time.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import {
  getBatchUsage,
  checkNotify,
  finishedSeries,
  setMaxConcurrency,
  setRateLimit,
  parseInput,
  pauseBatch,
  redriveBatch,
  resumeBatch,
  setBatchDeadline,
  requestKeySchema,
  RETENTION_DEFAULTS,
} from '../../batch/index.js';
import { batchView } from '../views.js';
import type { ApiDeps } from '../deps.js';
import { header, query, seriesSchema } from '../request.js';
import { iso, json, type Result } from '../respond.js';
import {
  cancelBatch,
  checkStorableJson,
  getBatch,
  getTenant,
  itemsPage,
  listBatches,
  startBatch,
  typeName,
} from '../../batch/index.js';
import { InvalidRequestError } from '../../errors.js';
import { EndpointGuard } from '../../units/index.js';
import { itemsPageSchema, listSchema, patchBatchSchema, readJsonBody, startSchema } from '../request.js';
import { usageView, withActivity } from '../views.js';
import { errorFields } from '../../log.js';

/**
 * `POST /batches/{id}/redrive` (header `Idempotency-Key` optional) → 200 `{ ...batch, redrive:
 * { number, items, idempotencyKey, at }, redriven }`: the batch's failed items are pending again
 * with fresh attempts, the batch is open and sent to a worker at once. A repeat with the same
 * key answers the first redrive (`redriven: false`) and does nothing. 404 `batch_not_found`,
 * 409 `batch_open` / `nothing_to_redrive`, 400 `batch_cancelled`, 429 `too_many_batches`.
 */
export async function redriveRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const given = header(event, 'idempotency-key');
  const idempotencyKey = given === undefined ? undefined : parseInput(requestKeySchema, given, 'Idempotency-Key');
  const { batch, redrive, redriven } = await redriveBatch(deps.sql, id, { maxOpen: deps.config.maxOpen, idempotencyKey });
  if (redriven) {
    try {
      await deps.workers.send(batch.id, batch.target);
    } catch (error) {
      // The scheduler dispatches open batches nobody runs; this only makes the redrive sooner.
      deps.log('warn', 'dispatch of a redriven batch failed', { batchId: batch.id, error: errorFields(error) });
    }
  }
  return json(200, { ...batchView(batch), redrive: { ...redrive, at: iso(redrive.at) }, redriven });
}

/**
 * `GET /batches/{id}/finished?buckets=` → 200 `{ from, bucketMs, buckets: [{ at, done, failed }] }`:
 * the items that last finished in each bucket of the batch's life (at most `buckets`, 1..500,
 * default 60, of a round length; `at` is the bucket's start), by the database clock.
 */
export async function finishedRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const { buckets } = parseInput(seriesSchema, query(event), 'query');
  const series = await finishedSeries(deps.sql, id, { buckets });
  const from = series.from.getTime();
  return json(200, {
    from: iso(series.from),
    bucketMs: series.bucketMs,
    buckets: series.buckets.map((b, i) => ({ at: iso(new Date(from + i * series.bucketMs)), ...b })),
  });
}

/** The address policy a start's `notify.url` is checked against (it reads `LEASEHOLD_OUTBOX_ALLOW` when used). */
let notifyGuard: EndpointGuard | undefined;

/** `POST /batches` (and `POST /tenants/{tenant}/batches`, `scope` the path's tenant): start a batch through `startBatch`; 201 new, 200 repeated (see `handleApi`). */
export async function startBatchRoute(
  event: APIGatewayProxyEventV2,
  deps: ApiDeps,
  _params: string[],
  scope?: string,
): Promise<Result> {
  const raw = readJsonBody(event, deps.config.maxBodyBytes);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InvalidRequestError(`body: must be a JSON object, got ${typeName(raw)}`);
  }
  // On /tenants/{tenant}/batches the body's tenant is the path's: it may be left out.
  const given = raw as Record<string, unknown>;
  if (scope !== undefined && given.tenant !== undefined && given.tenant !== scope) {
    throw new InvalidRequestError(
      `tenant: differs from the path's tenant ${JSON.stringify(scope)}; leave it out or make them equal`,
    );
  }
  const body = parseInput(startSchema, scope === undefined ? raw : { ...given, tenant: scope });
  checkStorableJson(body.params, 'params');

  const headerValue = header(event, 'idempotency-key');
  const headerKey = headerValue === undefined ? undefined : parseInput(requestKeySchema, headerValue, 'Idempotency-Key');
  if (body.requestKey !== undefined && headerKey !== undefined && body.requestKey !== headerKey) {
    throw new InvalidRequestError('requestKey: differs from the Idempotency-Key header; send one or make them equal');
  }
  const givenKey = body.requestKey ?? headerKey;
  if (body.notify !== undefined && deps.config.events !== undefined && !deps.config.events.webhookSecret) {
    throw new InvalidRequestError('notify: webhooks are signed, and LEASEHOLD_WEBHOOK_SECRET is not set on this deployment');
  }
  if (body.notify !== undefined) {
    // Outbox delivery's address policy, as a unit's endpoints get it at registration (and at
    // every delivery, where it is checked again).
    checkNotify(body.notify);
    const refused = await (notifyGuard ??= new EndpointGuard({})).refusal(body.notify.url);
    if (refused !== undefined) throw new InvalidRequestError(`notify.url: ${refused}`);
  }

  const { batch, created, dispatchError } = await startBatch(
    { ...deps, dispatcher: deps.workers.dispatcher, reserve: deps.workers.reserve },
    {
      ...body,
      requestKey: givenKey,
      toleratedFailures: body.toleratedFailures ?? null,
      // W3C trace context: the start's span (and so the batch's runs) join the caller's trace.
      traceparent: header(event, 'traceparent'),
    },
  );
  if (!created) return json(200, { ...batchView(batch), created: false });
  if (dispatchError !== undefined) {
    // The scheduler dispatches never-started batches; this only made the start sooner.
    deps.log('warn', 'dispatch of a new batch failed', { batchId: batch.id, error: String(dispatchError) });
  }
  const location = scope === undefined ? `/batches/${batch.id}` : `/tenants/${encodeURIComponent(scope)}/batches/${batch.id}`;
  // A batch read from a source answers at once, while its runs read it: accepted, not complete.
  return json(body.source ? 202 : 201, { ...batchView(batch), created: true }, { location });
}

/**
 * `PATCH /batches/{id}` (and its tenant-scoped twin) `{ maxConcurrency?, rateLimit?: { perSecond },
 * deadline?, deadlineMs? }` (at least one) → 200 the batch, changed while it runs. `deadline` (an
 * ISO 8601 instant, null to clear) or `deadlineMs` (ms from its start): not finished by then, it
 * ends `failed` with reason `deadline` (docs/design.md, "Pause, deadline and startBy"). `maxConcurrency`: how many runs it may
 * have at once (docs/design.md, "Fan-out"). Raised, the runs it now lacks are sent workers at once
 * (within the worker limit; the scheduler and fleet processes add the rest); lowered, the newest
 * runs beyond it hand off at their next beat, with no attempt used. `rateLimit.perSecond`: its
 * fleet-wide rate (docs/design.md, "Rate limits"), taken up by every run at its next token take or
 * beat. 404 `batch_not_found`, 409 `batch_finished`, 400 `invalid_request`.
 */
export async function patchBatchRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const raw = readJsonBody(event, deps.config.maxBodyBytes);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InvalidRequestError(`body: must be a JSON object, got ${typeName(raw)}`);
  }
  const body = parseInput(patchBatchSchema, raw);
  if (body.deadline !== undefined || body.deadlineMs !== undefined) {
    const d =
      body.deadlineMs !== undefined ? { deadlineMs: body.deadlineMs } : body.deadline ? { deadline: body.deadline } : null;
    const dated = await setBatchDeadline(deps.sql, id, d);
    if (body.maxConcurrency === undefined && !body.rateLimit) return json(200, (await withActivity(deps.sql, [dated]))[0]);
  }
  const rated = body.rateLimit && (await setRateLimit(deps.sql, id, body.rateLimit.perSecond));
  if (body.maxConcurrency === undefined) {
    const [view] = await withActivity(deps.sql, [rated ?? (await getBatch(deps.sql, id))]);
    return json(200, view);
  }
  const batch = await setMaxConcurrency(deps.sql, id, body.maxConcurrency);
  try {
    await deps.workers.send(batch.id, batch.target - batch.liveRuns);
  } catch (error) {
    deps.log('warn', 'dispatch after a raised maxConcurrency failed', { batchId: batch.id, error: errorFields(error) });
  }
  const [view] = await withActivity(deps.sql, [batch]);
  return json(200, view);
}

/** `GET /batches?tenant=&status=&limit=` (and its tenant-scoped twin): batches newest first, with their activity. */
export async function listBatchesRoute(
  event: APIGatewayProxyEventV2,
  deps: ApiDeps,
  _params: string[],
  scope?: string,
): Promise<Result> {
  const q = Object.fromEntries(Object.entries(query(event)).filter(([, v]) => v !== ''));
  if (scope !== undefined && q.tenant !== undefined && q.tenant !== scope) {
    throw new InvalidRequestError(
      `tenant: differs from the path's tenant ${JSON.stringify(scope)}; leave it out or make them equal`,
    );
  }
  const filter = parseInput(listSchema, scope === undefined ? q : { ...q, tenant: scope }, 'query');
  const batches = await listBatches(deps.sql, filter);
  // How long finished batches are kept: they disappear from this list after that (retention).
  const retentionDays = deps.config.retention?.retentionDays ?? RETENTION_DEFAULTS.retentionDays;
  return json(200, { batches: await withActivity(deps.sql, batches), retentionDays });
}

/** `GET /batches/{id}`: one batch with its `ageMs`, `itemsPerSecond` and `usage` (docs/design.md, "Usage and cost"). */
export async function showBatch(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const [[view], usage] = await Promise.all([
    getBatch(deps.sql, id).then((b) => withActivity(deps.sql, [b])),
    getBatchUsage(deps.sql, id, deps.config.prices),
  ]);
  return json(200, { ...view, usage: usageView(usage) });
}

/** `POST /batches/{id}/cancel`: cancel for good; the tenant's next waiting batches go to workers. */
export async function cancelBatchRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const cancelled = await cancelBatch(deps.sql, id);
  // Its Batch Finished event at once; the scheduler sends it should this fail.
  await deps.sendEvents?.(id).catch((error: unknown) =>
    deps.log('warn', 'sending the Batch Finished event failed; the scheduler sends it', {
      batchId: id,
      error: errorFields(error),
    }),
  );
  // Its slot is free at once: the tenant's next waiting batch goes to a worker now.
  await dispatchWaiting(deps, cancelled.tenant);
  return json(200, batchView(cancelled));
}

/**
 * `POST /batches/{id}/pause` (and its tenant-scoped twin) → 200 the batch, `paused: true`: it
 * keeps its items, no run joins it, and its runs hand off at their next beat with no attempt
 * used (docs/design.md, "Pause, deadline and startBy"). Pausing a paused batch changes nothing.
 * 404 `batch_not_found`, 409 `batch_finished`.
 */
export async function pauseBatchRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const [view] = await withActivity(deps.sql, [await pauseBatch(deps.sql, id)]);
  return json(200, view);
}

/**
 * `POST /batches/{id}/resume` (and its tenant-scoped twin) → 200 the batch, `paused: false`, its
 * target back; the runs it lacks are sent workers at once (within the worker limit; the
 * scheduler sends the rest). Resuming a batch that is not paused changes nothing.
 * 404 `batch_not_found`, 409 `batch_finished`.
 */
export async function resumeBatchRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const batch = await resumeBatch(deps.sql, id);
  try {
    if (batch.target > batch.liveRuns) await deps.workers.send(batch.id, batch.target - batch.liveRuns);
  } catch (error) {
    // The scheduler dispatches batches below their target; this only makes the resume sooner.
    deps.log('warn', 'dispatch of a resumed batch failed', { batchId: batch.id, error: errorFields(error) });
  }
  const [view] = await withActivity(deps.sql, [batch]);
  return json(200, view);
}

/**
 * Sends workers to the tenant's first batches below their target (at most 10), as many runs as
 * its limit leaves room for; a failed send is logged (the scheduler dispatches them too).
 */
export async function dispatchWaiting(deps: ApiDeps, tenant: string): Promise<void> {
  try {
    const t = await getTenant(deps.sql, tenant, { defaultMaxRunning: deps.config.runner?.maxRunning, limit: 10 });
    let room = Math.max(0, (t.effectiveMaxRunning ?? Infinity) - t.running);
    for (const b of t.waitingBatches) {
      if (room <= 0) break;
      const n = Math.min(b.target - b.liveRuns, room);
      await deps.workers.send(b.id, n);
      room -= n;
    }
  } catch (error) {
    deps.log('warn', 'dispatch of waiting batches failed', { tenant, error: errorFields(error) });
  }
}

/** `GET /batches/{id}/items?after=&limit=&state=`: one page of items in key order. */
export async function listItemsRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [id]: string[]): Promise<Result> {
  const page = parseInput(itemsPageSchema, query(event), 'query');
  return json(200, await itemsPage(deps.sql, id, page));
}
