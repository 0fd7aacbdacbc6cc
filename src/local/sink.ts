// A local webhook receiver for outbox delivery: what tenants' endpoints are in `leasehold dev`.
// This file owns the sink's HTTP interface; what it remembers is src/local/sink-ledger.ts.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { closeServer, listen, readBody } from './http-util.js';
import { normalPath, SinkLedger, type SinkDelivery, type SinkStats } from './sink-ledger.js';

export { SINK_RATE_WINDOW_MS, type SinkDelivery, type SinkPathStats, type SinkStats } from './sink-ledger.js';

/** Options of {@link startSink}. */
export interface SinkOptions {
  /** Port on 127.0.0.1; 0 (default) takes any free port. */
  port?: number;
  /** Paths that fail from the start (answered {@link SinkOptions.failStatus}). */
  failing?: string[];
  /** Status of a failing answer. Default 503. */
  failStatus?: number;
  /**
   * Fail a delivery when this returns true (for tests and demos: fail one message, one key),
   * on top of failing paths. Default: none.
   */
  failWhen?: (d: Omit<SinkDelivery, 'status' | 'at'>) => boolean;
  /** Most recent deliveries kept for {@link Sink.recent}. Default 10,000. */
  keepRecent?: number;
  /** Largest accepted body, bytes (413 above). Default 1 MiB. */
  maxBodyBytes?: number;
}

/** A running sink, from {@link startSink}. */
export interface Sink {
  /** Base URL, `http://127.0.0.1:<port>`: POST to any path under it. */
  readonly url: string;
  /** Counts, per path and in total, and the recent delivery rate. */
  stats(): SinkStats;
  /** Distinct idempotency keys of accepted POSTs, of one path or of all. */
  keys(path?: string): Set<string>;
  /** The most recent deliveries (accepted and failed), oldest first, at most `keepRecent`. */
  recent(): SinkDelivery[];
  /** Make `path` fail (`true`), accept again (`false`), or toggle (omitted); returns the new state. */
  fail(path: string, on?: boolean): boolean;
  /** Delay answers on `path` by `ms` (0: none), to stand for a slow endpoint. */
  delay(path: string, ms: number): void;
  /** Forget every count, key and delivery (failing paths and delays stay). */
  reset(): void;
  /** Stop listening; answers in progress finish first (at most ~1 s). Idempotent. */
  close(): Promise<void>;
}

/**
 * Start a webhook sink on 127.0.0.1 (docs/design.md, "Local mode"; `leasehold dev` starts one for
 * the outbox delivery demo).
 *
 * HTTP interface:
 * - `POST /<any path>`: a delivery. Answers 200 `{ ok: true }`, or `failStatus` (503) while the
 *   path fails, or 413 over `maxBodyBytes`. Records the path, the `Idempotency-Key` header and
 *   the JSON body.
 * - `GET /_stats`: {@link SinkStats} as JSON.
 * - `POST /_fail/<path>`: toggle failing of `/<path>`; `?on=true|false` sets it. Answers `{ path, failing }`.
 * - `POST /_delay/<path>?ms=N`: delay answers on `/<path>` by N ms. Answers `{ path, delayMs }`.
 * - `POST /_reset`: forget counts and deliveries.
 *
 * @throws {LocalPortInUseError} the port is taken.
 */
export async function startSink(options: SinkOptions = {}): Promise<Sink> {
  const ledger = new SinkLedger(options.keepRecent ?? 10_000, options.failing ?? []);
  const inFlight = new Set<Promise<void>>();
  const server = createServer((req, res) => {
    const p = handleSinkRequest(req, res, ledger, options).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  });
  const { url } = await listen(server, options.port ?? 0, '127.0.0.1');
  let closing: Promise<void> | undefined;
  return {
    url,
    stats: () => ledger.stats(),
    keys: (path?: string) => ledger.keys(path),
    recent: () => ledger.recent(),
    fail: (path, on) => ledger.fail(path, on),
    delay: (path, ms) => ledger.delay(path, ms),
    reset: () => ledger.reset(),
    close: () =>
      (closing ??= closeServer(
        server,
        Promise.allSettled([...inFlight]).then(() => undefined),
      )),
  };
}

type Send = (status: number, body: unknown) => void;

/** One request: a control route (`/_stats`, `/_fail/…`, `/_delay/…`, `/_reset`) or a delivery. */
async function handleSinkRequest(
  req: IncomingMessage,
  res: ServerResponse,
  ledger: SinkLedger,
  options: SinkOptions,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://sink.local');
  const path = normalPath(url.pathname);
  const send: Send = (status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'GET' && path === '/_stats') return send(200, ledger.stats());
  if (req.method === 'POST' && path.startsWith('/_fail/')) {
    await readBody(req, 1024);
    const target = path.slice('/_fail'.length);
    const on = url.searchParams.get('on');
    return send(200, { path: target, failing: ledger.fail(target, on === null ? undefined : on === 'true') });
  }
  if (req.method === 'POST' && path.startsWith('/_delay/')) {
    await readBody(req, 1024);
    const target = path.slice('/_delay'.length);
    const ms = Number(url.searchParams.get('ms') ?? '0');
    if (!Number.isFinite(ms) || ms < 0 || ms > 600_000)
      return send(400, { error: { code: 'invalid_request', message: 'ms: must be 0 to 600000' } });
    ledger.delay(target, ms);
    return send(200, { path: target, delayMs: ms });
  }
  if (req.method === 'POST' && path === '/_reset') {
    await readBody(req, 1024);
    ledger.reset();
    return send(200, { ok: true });
  }
  if (req.method !== 'POST') {
    res.setHeader('allow', 'POST');
    return send(405, {
      error: { code: 'method_not_allowed', message: `${req.method} is not allowed; POST deliveries, GET /_stats` },
    });
  }
  return receiveDelivery(req, path, send, ledger, options);
}

/** A delivery to `path`: read, delayed and failed as the path is set, recorded, answered. */
async function receiveDelivery(
  req: IncomingMessage,
  path: string,
  send: Send,
  ledger: SinkLedger,
  options: SinkOptions,
): Promise<void> {
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const bytes = await readBody(req, maxBodyBytes);
  if (bytes === undefined) return send(413, { error: { code: 'body_too_large', message: `body over ${maxBodyBytes} bytes` } });
  const text = bytes.toString('utf8');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: kept as text.
  }
  const header = req.headers['idempotency-key'];
  const idempotencyKey = Array.isArray(header) ? header[0] : header;
  const wait = ledger.delayOf(path);
  if (wait) await new Promise((r) => setTimeout(r, wait));
  const fails = ledger.isFailing(path) || (options.failWhen?.({ path, idempotencyKey, body }) ?? false);
  const status = fails ? (options.failStatus ?? 503) : 200;
  ledger.record({ path, idempotencyKey, body, status, at: Date.now() });
  if (fails) return send(status, { error: { code: 'failing', message: `${path} is set to fail` } });
  send(200, { ok: true });
}
