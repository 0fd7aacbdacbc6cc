// A local stand-in for the events function's Lambda function URL (IAM auth, response streaming):
// it checks every request's SigV4 signature for the service `lambda` by computing it again with
// the maintained signer (test/support/sigv4-gateway.ts), refuses what does not match as a function
// URL does (403), and serves what does with the events function's own code (serveBatchEvents,
// src/runtime/stream.ts) on the test database, its response streamed as Lambda streams it.
import { createServer, type Server } from 'node:http';
import type { BatchWatcher } from '../../src/batch/index.js';
import { serveBatchEvents, type StreamOutcome } from '../../src/runtime/stream.js';
import { readAll, sigV4Refusal, type GatewayCredentials, type GatewayRecord } from './sigv4-gateway.js';

/** A running stand-in. */
export interface FunctionUrl {
  /** `http://127.0.0.1:<port>/`: with its final `/`, as the `events` output is. */
  url: string;
  /** Every request, as judged. */
  records: GatewayRecord[];
  /** How the streams it served ended, in the order they did. */
  outcomes: StreamOutcome[];
  /** Streams open now. */
  open(): number;
  /** How long the next streams may last, ms (the function's timeout less its margin). */
  maxMs: number;
  /** Answer every next request 503, as Lambda does when the function cannot run. */
  down: boolean;
  close(): Promise<void>;
}

/**
 * Start the stand-in on 127.0.0.1, serving streams from `watcher`: one for all (one function
 * instance), or a function making one per stream (as Lambda gives each concurrent stream its own
 * instance).
 */
export async function startFunctionUrl(options: {
  credentials: GatewayCredentials;
  region: string;
  watcher: BatchWatcher | (() => BatchWatcher);
  maxMs?: number;
}): Promise<FunctionUrl> {
  let open = 0;
  const stand: Omit<FunctionUrl, 'url' | 'close'> = {
    records: [],
    outcomes: [],
    open: () => open,
    maxMs: options.maxMs ?? 60_000,
    down: false,
  };
  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = await readAll(req);
      const reason = await sigV4Refusal(req, body, options.credentials, options.region, 'lambda');
      const signedHeaders = /SignedHeaders=([^,]+)/.exec(req.headers.authorization ?? '')?.[1].split(';') ?? [];
      stand.records.push({ method: req.method ?? 'GET', path: req.url ?? '/', verified: !reason, reason, signedHeaders });
      if (reason) {
        res
          .writeHead(403, { 'content-type': 'application/json', 'x-amzn-errortype': 'AccessDeniedException' })
          .end(JSON.stringify({ Message: 'Forbidden', reason }));
        return;
      }
      if (stand.down) {
        res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ Message: 'Service Unavailable' }));
        return;
      }
      open++;
      const outcome = await serveBatchEvents({
        watcher: typeof options.watcher === 'function' ? options.watcher() : options.watcher,
        event: { rawPath: new URL(req.url ?? '/', 'http://x').pathname, requestContext: { http: { method: req.method } } },
        // As Lambda's HttpResponseStream.from: the prelude goes out at once, the body as written.
        open: (prelude) => {
          res.writeHead(prelude.statusCode, prelude.headers);
          res.flushHeaders();
          return res;
        },
        maxMs: stand.maxMs,
      });
      open--;
      stand.outcomes.push(outcome);
    })().catch((e: unknown) => {
      if (!res.headersSent)
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ Message: String(e) }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return Object.assign(stand, {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}
