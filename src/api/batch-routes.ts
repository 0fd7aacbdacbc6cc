// Routes of one batch beyond start, show and cancel: redrive, and items finished over time.
// Each is a route handler as the route table of handler.ts takes it.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { dispatchBatch, finishedSeries, parseInput, redriveBatch, requestKeySchema } from '../batch/index.js';
import { batchView } from './batch-view.js';
import type { ApiDeps } from './deps.js';
import { header, query, seriesSchema } from './request.js';
import { iso, json, type Result } from './respond.js';

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
      await dispatchBatch(deps.sql, deps.dispatcher, batch.id);
    } catch (error) {
      // The scheduler dispatches open batches nobody runs; this only makes the redrive sooner.
      deps.log('warn', 'dispatch of a redriven batch failed', { batchId: batch.id, error: String(error) });
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
