// The progress stream on AWS (docs/api.md, "Progress stream"; issue 41): `GET
// /batches/{id}/events` served by the `events` function through a Lambda function URL with
// response streaming (IAM-authorised). The frames are the API's (src/api/batch-events.ts), the
// readings a shared poller's (src/batch/watch.ts): one per batch per function instance, so a
// batch is read at most once a second per instance however many streams it serves.
import type { Writable } from 'node:stream';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { BATCH_EVENTS_ROUTE, batchEventFrames } from '../api/batch-events.js';
import { BatchWatcher } from '../batch/index.js';
import type { Sql } from '../store/index.js';
import type { OpenResponse } from './streaming.js';

/** What {@link serveBatchEvents} takes. */
export interface BatchEventsRequest {
  watcher: BatchWatcher;
  /** The function URL's event (payload format 2.0): `rawPath` and the method are read. */
  event: Pick<APIGatewayProxyEventV2, 'rawPath'> & { requestContext?: { http?: { method?: string } } };
  open: OpenResponse;
  /**
   * Time the stream may last, ms: it closes (without an `end` event) this long after it opened, so
   * it ends before the function's timeout; the client reconnects after the stream's `retry:`.
   */
  maxMs: number;
}

/** How the stream ended: the batch finished (`end`), the time ran out, the client left, or an answer that was no stream. */
export type StreamOutcome = 'end' | 'timeout' | 'closed' | 'not_found' | 'no_route' | 'unavailable';

const json = (statusCode: number, code: string, message: string) => ({
  prelude: { statusCode, headers: { 'content-type': 'application/json' } },
  body: JSON.stringify({ error: { code, message } }),
});

/**
 * Serves one progress stream: 200 `text/event-stream` with the batch's frames until the batch
 * finishes (`end`), `maxMs` passes or the response stream closes; 404 JSON for an unknown batch or
 * another route; 503 JSON (`database_unavailable`) when no reading came within `maxMs`. Resolves when the response has ended, with how it ended. Never throws: a failed
 * read is retried by the poller; a write to a closed stream ends it.
 */
export function serveBatchEvents(r: BatchEventsRequest): Promise<StreamOutcome> {
  const method = r.event.requestContext?.http?.method ?? 'GET';
  const m = method === 'GET' ? BATCH_EVENTS_ROUTE.exec(r.event.rawPath) : null;
  if (!m) {
    const { prelude, body } = json(404, 'route_not_found', `no route ${method} ${r.event.rawPath}`);
    return finish(r.open(prelude), body, 'no_route');
  }
  const id = m[1]!.toLowerCase();
  return new Promise<StreamOutcome>((resolve) => {
    const frames = batchEventFrames();
    let out: Writable | undefined;
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const stopWatching = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stop();
    };
    const close = (outcome: StreamOutcome, text = ''): void => {
      stopWatching();
      if (!out) {
        // No reading yet (the database does not answer): say so rather than hold the request.
        const { prelude, body } = json(503, 'database_unavailable', `batch ${id} could not be read`);
        void finish(r.open(prelude), body, 'unavailable').then(resolve);
        return;
      }
      if (out.writableEnded || out.destroyed) return resolve(outcome);
      out.end(text, () => resolve(outcome));
    };
    const stop = r.watcher.watch(id, (reading) => {
      if (done) return;
      if (!out) {
        if (!reading.batch) {
          stopWatching();
          const { prelude, body } = json(404, 'batch_not_found', `no batch ${id}`);
          void finish(r.open(prelude), body, 'not_found').then(resolve);
          return;
        }
        out = r.open({ statusCode: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } });
        out.once('close', () => close('closed'));
        out.once('error', () => close('closed'));
      }
      const { text, end } = frames(reading);
      if (end) close('end', text);
      else out.write(text);
    });
    if (!done) timer = setTimeout(() => close('timeout'), r.maxMs);
  });
}

function finish(out: Writable, body: string, outcome: StreamOutcome): Promise<StreamOutcome> {
  return new Promise((resolve) => {
    out.once('error', () => resolve(outcome));
    out.end(body, () => resolve(outcome));
  });
}

const watchers = new WeakMap<Sql, BatchWatcher>();

/** The function instance's shared watcher over `sql`: one poller per batch, whatever the streams. */
export function sharedWatcher(sql: Sql): BatchWatcher {
  let w = watchers.get(sql);
  if (!w) watchers.set(sql, (w = new BatchWatcher(sql)));
  return w;
}
