// `GET /batches/{id}/events` in `leasehold dev` (docs/api.md, "Progress stream"): the API's
// Server-Sent Events of a batch's progress, written straight to the response (the local API
// Gateway stand-in buffers whole results, so the stream is served beside it). Every listener of a
// batch shares one poller (src/batch/watch.ts): at most one read of the batch a second.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { BATCH_EVENTS_ROUTE, batchEventFrames } from '../api/batch-events.js';
import type { BatchWatcher } from '../batch/index.js';

/**
 * A handler for the local server's `assets` hook: answers `GET /batches/{id}/events` (404 JSON
 * for an unknown batch) and resolves to true; anything else resolves to false untouched.
 */
export function batchEventsRoute(watcher: BatchWatcher): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  return async (req, res) => {
    const m = req.method === 'GET' ? BATCH_EVENTS_ROUTE.exec((req.url ?? '/').split('?')[0]!) : null;
    if (!m) return false;
    const frames = batchEventFrames();
    let started = false;
    const stop = watcher.watch(m[1]!.toLowerCase(), (r) => {
      if (!started) {
        started = true;
        if (!r.batch) {
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { code: 'batch_not_found', message: `no batch ${m[1]}` } }));
          stop();
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
      }
      const { text, end } = frames(r);
      res.write(text);
      if (end) {
        stop();
        res.end();
      }
    });
    req.on('close', stop);
    return true;
  };
}
