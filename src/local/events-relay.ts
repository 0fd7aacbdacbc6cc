// The progress stream half of `leasehold dashboard --api URL --events URL` (docs/deploy.md,
// "Follow a batch's progress"; issue 41): the page's `GET /batches/{id}/events` relayed from the
// stage's events function URL, signed with SigV4 for `lambda`. Every local listener of one batch
// shares one upstream stream, so however many listen, the stage serves one stream (one
// invocation, one read of the batch a second). Frames are passed on as they arrive, whole.
import type { ServerResponse } from 'node:http';
import { HttpRequest } from '@smithy/core/protocols';
import type { SignatureV4 } from '@smithy/signature-v4';
import { STREAM_RETRY_MS } from '../api/batch-events.js';
import { systemClock } from '../clock.js';
import { sendJsonError } from './dashboard-forward.js';

/** Where and how an {@link EventsRelay} opens upstream streams. */
export interface EventsRelayOptions {
  /** The events function URL (no query). */
  base: URL;
  /** `base`'s path without a trailing slash; `/batches/{id}/events` is appended to it. */
  basePath: string;
  /** Signs for `lambda` in the function's region. */
  signer: SignatureV4;
  /** How long the function URL may take to answer a stream's head, ms (the stream itself has no limit). */
  timeoutMs: number;
}

/** The headers of a relayed stream to the page. */
const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-store' };

/** How one upstream connection ended: the batch's `end`, cut after some frames, or no stream at all. */
type Outcome = 'end' | 'cut' | 'failed';

/**
 * Relays progress streams from the events function URL to local listeners, one upstream stream
 * per batch however many listen (docs/api.md, "Progress stream").
 */
export class EventsRelay {
  private readonly upstreams = new Map<string, Upstream>();
  private closed = false;

  constructor(readonly options: EventsRelayOptions) {}

  /**
   * Add `res` as a listener of batch `id` (lowercase). A listener that joins a stream already
   * under way gets `retry:`, the last `state` and the last `progress` at once, then every frame
   * as it arrives; the first listeners wait for the function URL's answer, and an answer that is
   * no stream (403 signature, 404 `batch_not_found`, 503) is passed back to them as it came, or
   * 401 `no_credentials`, 502 `events_unreachable`, 504 `events_timeout`. The stream ends after
   * the batch's `end`; one cut after it carried frames (the function's time ran out) is opened
   * again, unseen by the listeners (at once, or `retry:` ms after the previous opening if that
   * was sooner, so a server that cuts every stream early is not hammered); one that carried
   * nothing, or cannot be opened again,
   * ends every listener (the page then polls). The last listener leaving closes the upstream.
   * After {@link close}: 503 `events_closed`. Resolves when `res` has ended. Never throws.
   */
  listen(id: string, res: ServerResponse): Promise<void> {
    if (this.closed) return Promise.resolve(sendJsonError(res, 503, 'events_closed', 'the dashboard is closing'));
    let up = this.upstreams.get(id);
    if (!up) {
      up = new Upstream(this, id, () => this.upstreams.delete(id));
      this.upstreams.set(id, up);
      up.start();
    }
    return up.add(res);
  }

  /** End every stream and open no more (the dashboard is closing): listeners' responses end, upstreams close. */
  close(): void {
    this.closed = true;
    for (const up of [...this.upstreams.values()]) up.finish();
  }
}

/** One batch's upstream stream and its local listeners. */
class Upstream {
  /** Listeners and what resolves their {@link EventsRelay.listen}. */
  private readonly listeners = new Map<ServerResponse, () => void>();
  /** Whether a stream is under way (listeners get SSE heads), since the first upstream's 200. */
  private streaming = false;
  private retry = `retry: ${STREAM_RETRY_MS}\n\n`;
  private lastState = '';
  private lastProgress = '';
  private readonly abort = new AbortController();

  constructor(
    private readonly relay: EventsRelay,
    private readonly id: string,
    private readonly drop: () => void,
  ) {}

  start(): void {
    void this.run();
  }

  add(res: ServerResponse): Promise<void> {
    return new Promise((resolve) => {
      this.listeners.set(res, resolve);
      res.once('close', () => this.leave(res));
      if (this.streaming) this.open(res);
    });
  }

  /** Stop: no more upstream, every listener's response ended (a waiting one with `status`). */
  finish(status = 503, code = 'events_closed', message = 'the dashboard is closing'): void {
    if (this.abort.signal.aborted) return;
    this.abort.abort();
    this.drop();
    const listeners = [...this.listeners];
    this.listeners.clear();
    for (const [res, resolve] of listeners) {
      if (res.headersSent) res.end();
      else sendJsonError(res, status, code, message);
      resolve();
    }
  }

  private leave(res: ServerResponse): void {
    const resolve = this.listeners.get(res);
    if (!resolve) return;
    this.listeners.delete(res);
    resolve();
    // Nobody listens: the upstream request is aborted, so the function's stream closes too.
    if (this.listeners.size === 0) this.finish();
  }

  /** A listener's head and what it missed: the retry, the last state and progress. */
  private open(res: ServerResponse): void {
    res.writeHead(200, SSE_HEADERS);
    res.write(this.retry + this.lastState + this.lastProgress);
  }

  private send(text: string): void {
    for (const res of this.listeners.keys()) if (res.headersSent && !res.writableEnded) res.write(text);
  }

  private async run(): Promise<void> {
    let outcome: Outcome = 'cut';
    let openedAt = -Infinity;
    while (outcome === 'cut' && !this.abort.signal.aborted) {
      const retryMs = Number(/^retry: ?(\d+)/m.exec(this.retry)?.[1] ?? STREAM_RETRY_MS);
      await systemClock.sleep(openedAt + retryMs - Date.now(), this.abort.signal);
      openedAt = Date.now();
      if (!this.abort.signal.aborted) outcome = await this.connect();
    }
    this.finish(502, 'events_ended', `the progress stream of batch ${this.id} ended`);
  }

  /** One upstream connection, relayed until it ends. */
  private async connect(): Promise<Outcome> {
    const { base, basePath, timeoutMs } = this.relay.options;
    const path = `${basePath}/batches/${this.id}/events`;
    let signed: HttpRequest;
    try {
      signed = await this.sign(path);
    } catch (e) {
      this.finish(
        401,
        'no_credentials',
        `no AWS credentials to sign the progress stream with: ${(e as Error).message}. Set AWS_PROFILE (after \`aws sso login\`), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`,
      );
      return 'failed';
    }
    const { host: _host, ...headers } = signed.headers;
    // This connection's own signal: aborted when the relay stops, or when no head came in time.
    const conn = new AbortController();
    const stop = () => conn.abort();
    this.abort.signal.addEventListener('abort', stop, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      conn.abort();
    }, timeoutMs);
    try {
      let answer: Response;
      try {
        answer = await fetch(`${base.protocol}//${base.host}${path}`, { headers, redirect: 'manual', signal: conn.signal });
      } catch (e) {
        const err = e as Error;
        if (timedOut) this.finish(504, 'events_timeout', `the events function URL did not answer within ${timeoutMs} ms`);
        else {
          const why = (err.cause as Error)?.message ?? err.message;
          this.finish(502, 'events_unreachable', `the events function URL at ${base.origin} does not answer: ${why}`);
        }
        return 'failed';
      } finally {
        clearTimeout(timer);
      }
      if (!answer.ok || !answer.body || !(answer.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
        await this.passBack(answer);
        return 'failed';
      }
      if (!this.streaming) {
        this.streaming = true;
        for (const res of this.listeners.keys()) this.open(res);
      }
      return await this.relayBody(answer.body);
    } finally {
      this.abort.signal.removeEventListener('abort', stop);
    }
  }

  /** The frames of one upstream body to every listener, each as soon as it is whole. */
  private async relayBody(body: ReadableStream<Uint8Array>): Promise<Outcome> {
    const decoder = new TextDecoder();
    let text = '';
    let frames = 0;
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        text = (text + decoder.decode(chunk, { stream: true })).replace(/\r\n/g, '\n');
        let cut: number;
        while ((cut = text.indexOf('\n\n')) >= 0) {
          const block = text.slice(0, cut + 2);
          text = text.slice(cut + 2);
          const event = this.frame(block);
          if (event === 'end') return 'end';
          if (event) frames++;
        }
      }
    } catch {
      // The relay stopped (the last listener left), or the connection was lost: judged below.
    }
    if (this.abort.signal.aborted) return 'failed';
    return frames > 0 ? 'cut' : 'failed';
  }

  /**
   * Remember and send one whole frame; answers its event name. `retry:` is each listener's own
   * (sent when it joins), and a stream opened again repeats its `state`, sent only if it changed.
   */
  private frame(block: string): string | undefined {
    const event = /^event: ?(.*)$/m.exec(block)?.[1];
    if (event === undefined && /^retry:/m.test(block)) {
      this.retry = block;
      return undefined;
    }
    if (event === 'state') {
      if (block === this.lastState) return event;
      this.lastState = block;
    } else if (event === 'progress') this.lastProgress = block;
    this.send(block);
    return event;
  }

  /** An upstream answer that is no stream: to the listeners still waiting, as it came. */
  private async passBack(answer: Response): Promise<void> {
    const body = Buffer.from(await answer.arrayBuffer().catch(() => new ArrayBuffer(0)));
    const type = answer.headers.get('content-type') ?? 'application/json';
    const listeners = [...this.listeners];
    this.listeners.clear();
    this.finish();
    for (const [res, resolve] of listeners) {
      if (res.headersSent) res.end();
      else
        res
          .writeHead(answer.status, { 'content-type': type, 'content-length': String(body.length), 'cache-control': 'no-store' })
          .end(body);
      resolve();
    }
  }

  /** The upstream request: `accept: text/event-stream`, signed. Throws without credentials. */
  private async sign(path: string): Promise<HttpRequest> {
    const { base, signer } = this.relay.options;
    return (await signer.sign(
      new HttpRequest({
        method: 'GET',
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port ? Number(base.port) : undefined,
        path,
        headers: { host: base.host, accept: 'text/event-stream' },
      }),
    )) as HttpRequest;
  }
}
