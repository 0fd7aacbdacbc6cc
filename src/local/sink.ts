// A local webhook receiver for outbox delivery: what tenants' endpoints are in `leasehold dev`.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { closeServer, listen, readBody } from './http-util.js';
import { InvalidSettingError } from '../errors.js';

/** One POST the sink received. */
export interface SinkDelivery {
  /** Request path, without the query string (e.g. `/acme/orders`). */
  path: string;
  /** The `Idempotency-Key` header, or undefined when absent. */
  idempotencyKey: string | undefined;
  /** The body parsed as JSON, or the raw text when it is not JSON. */
  body: unknown;
  /** Status the sink answered: 200 accepted, else the failure status. */
  status: number;
  /** Receive time, ms since the epoch (application clock; only for display). */
  at: number;
}

/** Counts of one path. */
export interface SinkPathStats {
  /** POSTs received. */
  received: number;
  /** POSTs answered 200. */
  accepted: number;
  /** POSTs answered with a failure status. */
  failed: number;
  /** Distinct idempotency keys among accepted POSTs. */
  distinctKeys: number;
  /** Whether the path is set to fail now. */
  failing: boolean;
  /** Extra delay before answering, ms (0: none). */
  delayMs: number;
}

/** What `GET /_stats` and {@link Sink.stats} answer. */
export interface SinkStats {
  /** POSTs received on every path. */
  received: number;
  /** POSTs answered 200. */
  accepted: number;
  /** POSTs answered with a failure status. */
  failed: number;
  /** Distinct idempotency keys among accepted POSTs, over every path. */
  distinctKeys: number;
  /** Accepted POSTs per second over the last {@link SINK_RATE_WINDOW_MS} ms. */
  perSecond: number;
  /** Per path. */
  paths: Record<string, SinkPathStats>;
}

/** Window of {@link SinkStats.perSecond}, ms. */
export const SINK_RATE_WINDOW_MS = 5_000;

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

interface PathState {
  received: number;
  accepted: number;
  failed: number;
  keys: Set<string>;
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
  const failStatus = options.failStatus ?? 503;
  const keepRecent = options.keepRecent ?? 10_000;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const failing = new Set((options.failing ?? []).map(normalPath));
  const delays = new Map<string, number>();
  let paths = new Map<string, PathState>();
  let recent: SinkDelivery[] = [];
  // Accepted deliveries per whole second, for the rate over the window.
  let buckets = new Map<number, number>();
  const inFlight = new Set<Promise<void>>();

  const state = (path: string): PathState => {
    let s = paths.get(path);
    if (!s) paths.set(path, (s = { received: 0, accepted: 0, failed: 0, keys: new Set() }));
    return s;
  };

  const record = (d: SinkDelivery) => {
    const s = state(d.path);
    s.received++;
    if (d.status === 200) {
      s.accepted++;
      if (d.idempotencyKey !== undefined) s.keys.add(d.idempotencyKey);
      const sec = Math.floor(d.at / 1000);
      buckets.set(sec, (buckets.get(sec) ?? 0) + 1);
      for (const k of buckets.keys()) if (k < sec - 60) buckets.delete(k);
    } else s.failed++;
    recent.push(d);
    if (recent.length > keepRecent) recent = recent.slice(recent.length - keepRecent);
  };

  const stats = (): SinkStats => {
    const now = Date.now();
    let received = 0;
    let accepted = 0;
    let failed = 0;
    const all = new Set<string>();
    const byPath: Record<string, SinkPathStats> = {};
    for (const [path, s] of paths) {
      received += s.received;
      accepted += s.accepted;
      failed += s.failed;
      for (const k of s.keys) all.add(k);
      byPath[path] = {
        received: s.received,
        accepted: s.accepted,
        failed: s.failed,
        distinctKeys: s.keys.size,
        failing: failing.has(path),
        delayMs: delays.get(path) ?? 0,
      };
    }
    for (const path of new Set([...failing, ...delays.keys()])) {
      byPath[path] ??= {
        received: 0,
        accepted: 0,
        failed: 0,
        distinctKeys: 0,
        failing: failing.has(path),
        delayMs: delays.get(path) ?? 0,
      };
    }
    // Whole seconds within the window, the current (partial) one counted by its elapsed part.
    const windowS = SINK_RATE_WINDOW_MS / 1000;
    const nowS = Math.floor(now / 1000);
    let inWindow = 0;
    for (const [sec, n] of buckets) if (sec > nowS - windowS) inWindow += n;
    const span = windowS - 1 + (now % 1000) / 1000;
    return {
      received,
      accepted,
      failed,
      distinctKeys: all.size,
      perSecond: Math.round((inWindow / Math.max(span, 1)) * 10) / 10,
      paths: byPath,
    };
  };

  const fail = (path: string, on?: boolean): boolean => {
    const p = normalPath(path);
    const next = on ?? !failing.has(p);
    if (next) failing.add(p);
    else failing.delete(p);
    return next;
  };

  const delay = (path: string, ms: number): void => {
    if (!Number.isFinite(ms) || ms < 0) throw new InvalidSettingError('delay', `must be 0 or more ms, got ${ms}`);
    if (ms === 0) delays.delete(normalPath(path));
    else delays.set(normalPath(path), ms);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://sink.local');
    const path = normalPath(url.pathname);
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET' && path === '/_stats') return send(200, stats());
    if (req.method === 'POST' && path.startsWith('/_fail/')) {
      await readBody(req, 1024);
      const target = path.slice('/_fail'.length);
      const on = url.searchParams.get('on');
      return send(200, { path: target, failing: fail(target, on === null ? undefined : on === 'true') });
    }
    if (req.method === 'POST' && path.startsWith('/_delay/')) {
      await readBody(req, 1024);
      const target = path.slice('/_delay'.length);
      const ms = Number(url.searchParams.get('ms') ?? '0');
      if (!Number.isFinite(ms) || ms < 0 || ms > 600_000)
        return send(400, { error: { code: 'invalid_request', message: 'ms: must be 0 to 600000' } });
      delay(target, ms);
      return send(200, { path: target, delayMs: ms });
    }
    if (req.method === 'POST' && path === '/_reset') {
      await readBody(req, 1024);
      reset();
      return send(200, { ok: true });
    }
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return send(405, {
        error: { code: 'method_not_allowed', message: `${req.method} is not allowed; POST deliveries, GET /_stats` },
      });
    }
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
    const wait = delays.get(path);
    if (wait) await new Promise((r) => setTimeout(r, wait));
    const fails = failing.has(path) || (options.failWhen?.({ path, idempotencyKey, body }) ?? false);
    const status = fails ? failStatus : 200;
    record({ path, idempotencyKey, body, status, at: Date.now() });
    if (fails) return send(status, { error: { code: 'failing', message: `${path} is set to fail` } });
    send(200, { ok: true });
  };

  const reset = () => {
    paths = new Map();
    recent = [];
    buckets = new Map();
  };

  const server = createServer((req, res) => {
    const p = handle(req, res).catch(() => {
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
    stats,
    keys: (path?: string) => {
      if (path !== undefined) return new Set(paths.get(normalPath(path))?.keys ?? []);
      const all = new Set<string>();
      for (const s of paths.values()) for (const k of s.keys) all.add(k);
      return all;
    },
    recent: () => [...recent],
    fail,
    delay,
    reset,
    close: () =>
      (closing ??= closeServer(
        server,
        Promise.allSettled([...inFlight]).then(() => undefined),
      )),
  };
}

/** `/a/b` from `a/b`, `/a/b/` or `/a//b`. */
function normalPath(path: string): string {
  const parts = path.split('/').filter((p) => p !== '');
  return '/' + parts.join('/');
}
