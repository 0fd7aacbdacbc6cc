// `leasehold dashboard --api URL --events URL` (issue 41): the page's progress streams relayed
// from the stage's events function URL, signed for `lambda`, one upstream stream per batch. The
// function URL is a local stand-in (test/support/function-url.ts) that verifies every signature
// and serves the events function's own code on the test database; the API is the stand-in
// gateway of test/support/sigv4-gateway.ts in front of the real API handler.
import { Sha256 } from '@smithy/core/checksum';
import { HttpRequest } from '@smithy/core/protocols';
import { SignatureV4 } from '@smithy/signature-v4';
import { PassThrough } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { BatchWatcher, cancelBatch, createBatch } from '../../src/batch/index.js';
import { ApiClient } from '../../src/client/index.js';
import { regionOfFunctionUrlHost, startDashboard, type DashboardServer } from '../../src/local/dashboard-proxy.js';
import { startHttpServer, type HttpServer } from '../../src/local/http-server.js';
import type { Sql } from '../../src/store/index.js';
import { followBatch, Terminal } from '../../src/terminal/index.js';
import { apiDeps, InvokeEndpoint } from '../support/api.js';
import { launchBrowser } from '../support/browser.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { startFunctionUrl, type FunctionUrl } from '../support/function-url.js';
import { CHROMIUM, needs } from '../support/programs.js';
import { startSigV4Gateway, type SigV4Gateway } from '../support/sigv4-gateway.js';
import { sleep } from '../support/time.js';

const REGION = 'eu-central-1';
/** What the stand-ins know and the dashboard signs with. */
const CREDENTIALS = {
  accessKeyId: 'AKIDLEASEHOLDTEST02',
  secretAccessKey: 'leasehold/test/secret/key/9876543210',
  sessionToken: 'leasehold-session-token-2',
};

const db = useTestDatabase();
let watchPool: Sql;
let fn: FunctionUrl;
let endpoint: InvokeEndpoint;
let api: HttpServer;
let gateway: SigV4Gateway;
const dashboards: DashboardServer[] = [];
const listeners: Listener[] = [];

beforeAll(async () => {
  // The function's own pool and poller (one function instance), reading every 200 ms.
  watchPool = db.connect({ max: 2 });
  fn = await startFunctionUrl({
    credentials: CREDENTIALS,
    region: REGION,
    watcher: new BatchWatcher(watchPool, { intervalMs: 200 }),
  });
  endpoint = await InvokeEndpoint.start();
  const deps = apiDeps(db.sql, endpoint);
  api = await startHttpServer({ port: 0, handler: (event) => handleApi(event, deps) });
  gateway = await startSigV4Gateway({ credentials: CREDENTIALS, region: REGION, upstream: api.url });
});
afterEach(async () => {
  for (const l of listeners.splice(0)) l.close();
  await Promise.all(dashboards.splice(0).map((d) => d.close()));
  fn.maxMs = 60_000;
  fn.down = false;
});
afterAll(async () => {
  await fn?.close();
  await gateway?.close();
  await api?.close();
  await endpoint?.close();
  await watchPool?.end({ timeout: 5 });
});

/** A dashboard on the stand-ins, signing with `credentials` (default the ones they know). */
async function dashboard(options: { events?: boolean; credentials?: typeof CREDENTIALS } = {}): Promise<DashboardServer> {
  const credentials = options.credentials ?? CREDENTIALS;
  const d = await startDashboard({
    apiUrl: gateway.url,
    ...(options.events === false ? {} : { eventsUrl: fn.url }),
    port: 0,
    region: REGION,
    credentials: async () => credentials,
  });
  dashboards.push(d);
  return d;
}

/** An open batch nobody works: its stream goes on until the test cancels it. */
async function openBatch(name: string): Promise<string> {
  const { batch } = await createBatch(db.sql, {
    tenant: `relay-${name}`,
    datasource: 'ds',
    job: 'test',
    params: {},
    requestKey: `relay-${name}-${process.pid}-${Date.now()}`,
    items: [{ key: 'a' }, { key: 'b' }],
  });
  return batch.id;
}

/** Wait until `check` holds, reading it every 20 ms, for at most 15 s. */
async function until(what: string, check: () => boolean): Promise<void> {
  const end = Date.now() + 15_000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
}

/** One page-side client of the dashboard's stream: its events as they arrive. */
class Listener {
  status = 0;
  contentType = '';
  body = '';
  events: [string, unknown][] = [];
  ended = false;
  private readonly abort = new AbortController();
  private constructor() {}

  static async open(url: string): Promise<Listener> {
    const l = new Listener();
    listeners.push(l);
    const res = await fetch(url, { headers: { accept: 'text/event-stream' }, signal: l.abort.signal });
    l.status = res.status;
    l.contentType = res.headers.get('content-type') ?? '';
    void (async () => {
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          l.body += Buffer.from(chunk).toString('utf8');
          let cut: number;
          while ((cut = l.body.indexOf('\n\n')) >= 0) {
            const block = l.body.slice(0, cut);
            l.body = l.body.slice(cut + 2);
            const event = /^event: (.*)$/m.exec(block)?.[1];
            const data = /^data: (.*)$/m.exec(block)?.[1];
            if (event && data) l.events.push([event, JSON.parse(data)]);
          }
        }
      } catch {
        // closed by the test
      }
      l.ended = true;
    })();
    return l;
  }

  named(name: string): unknown[] {
    return this.events.filter(([e]) => e === name).map(([, d]) => d);
  }

  close(): void {
    this.abort.abort();
  }
}

const streamUrl = (d: DashboardServer, id: string) => `${d.url}/batches/${id}/events`;

describe('leasehold dashboard --events URL', () => {
  it("streams a batch's events to the page as the function sends them, signed for lambda, not buffered", async () => {
    const d = await dashboard();
    const id = await openBatch('streamed');
    const seen = fn.records.length;
    const l = await Listener.open(streamUrl(d, id));
    expect(l.status).toBe(200);
    expect(l.contentType).toBe('text/event-stream');
    await until('the first progress event arrives', () => l.named('progress').length > 0);
    // The function's stream is still open (the batch is): the event came through as it was sent.
    expect(fn.open()).toBe(1);
    expect(l.ended).toBe(false);
    expect(l.events[0]).toEqual(['state', { status: 'open', paused: false }]);
    expect(l.named('progress')[0]).toMatchObject({ id, status: 'open', counts: { pending: 2 } });

    await cancelBatch(db.sql, id);
    await until('the stream ends', () => l.ended);
    expect(l.events.at(-1)).toEqual(['end', { status: 'cancelled' }]);
    await until('the function sees its stream end', () => fn.outcomes.length > 0 && fn.open() === 0);
    expect(fn.outcomes.at(-1)).toBe('end');
    const mine = fn.records.slice(seen);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ method: 'GET', path: `/batches/${id}/events`, verified: true });
    expect(mine[0].signedHeaders).toEqual(expect.arrayContaining(['host', 'accept', 'x-amz-date', 'x-amz-security-token']));
    // Nothing of the stream went to the HTTP API.
    expect(gateway.records.filter((r) => r.path.includes('/events'))).toEqual([]);
  });

  it('20 listeners of one batch share one upstream stream; one leaving ends no other; the last closes it', async () => {
    const d = await dashboard();
    const id = await openBatch('shared');
    const seen = fn.records.length;
    const outcomes = fn.outcomes.length;
    const many: Listener[] = [];
    for (let i = 0; i < 20; i++) many.push(await Listener.open(streamUrl(d, id)));
    await until('every listener has a progress event', () => many.every((l) => l.named('progress').length > 0));
    expect(fn.records.length - seen).toBe(1);
    expect(fn.open()).toBe(1);
    for (const l of many) {
      expect(l.status).toBe(200);
      // A listener that joined a stream under way got the state and the latest progress at once.
      expect(l.events[0]).toEqual(['state', { status: 'open', paused: false }]);
    }

    const [gone, ...rest] = many;
    gone.close();
    const had = rest.map((l) => l.named('progress').length);
    await until('the others get the next progress', () => rest.every((l, i) => l.named('progress').length > had[i]));
    expect(rest.every((l) => !l.ended)).toBe(true);
    expect(fn.open()).toBe(1);
    expect(fn.outcomes.length).toBe(outcomes);
    expect(fn.records.length - seen).toBe(1);

    for (const l of rest) l.close();
    // The client's disconnect reached the function: its stream closed, as a listener leaving.
    await until('the function sees its stream closed', () => fn.open() === 0 && fn.outcomes.length > outcomes);
    expect(fn.outcomes.at(-1)).toBe('closed');
    // A new listener opens a new upstream stream.
    const again = await Listener.open(streamUrl(d, id));
    await until('it gets progress', () => again.named('progress').length > 0);
    expect(fn.records.length - seen).toBe(2);
    await cancelBatch(db.sql, id);
  });

  it("a stream cut by the function's time limit is opened again unseen; one that cannot be opened again ends", async () => {
    const d = await dashboard();
    const id = await openBatch('cut');
    const seen = fn.records.length;
    fn.maxMs = 700;
    const l = await Listener.open(streamUrl(d, id));
    await until('the first stream is open', () => fn.records.length - seen === 1);
    fn.maxMs = 60_000;
    await until('the relay opened a second stream', () => fn.records.length - seen === 2);
    expect(fn.outcomes.at(-1)).toBe('timeout');
    const before = l.named('progress').length;
    await until('progress goes on', () => l.named('progress').length > before);
    expect(l.ended).toBe(false);
    // The second stream's opening state is the same as the first's: not sent again.
    expect(l.named('state')).toEqual([{ status: 'open', paused: false }]);
    await cancelBatch(db.sql, id);
    await until('the stream ends', () => l.ended);
    expect(l.events.at(-1)).toEqual(['end', { status: 'cancelled' }]);

    const id2 = await openBatch('cut-down');
    const seen2 = fn.records.length;
    fn.maxMs = 700;
    const l2 = await Listener.open(streamUrl(d, id2));
    await until('the first stream is open', () => fn.records.length - seen2 === 1);
    fn.down = true;
    await until('the listener is ended', () => l2.ended);
    expect(fn.records.length - seen2).toBe(2);
    expect(l2.named('progress').length).toBeGreaterThan(0);
    expect(l2.named('end')).toEqual([]);
    // The page's client then learns there is no stream, and polls.
    expect(await new ApiClient(d.url).batchEvents(id2)).toBeUndefined();
    fn.down = false;
    await cancelBatch(db.sql, id2);
  });

  it('the function URL refuses unsigned and mis-signed requests, and the page gets its 403 and polls', async () => {
    const id = await openBatch('refused');
    const path = `/batches/${id}/events`;
    const url = new URL(fn.url);
    const signed = async (service: string, secretAccessKey = CREDENTIALS.secretAccessKey) => {
      const signer = new SignatureV4({
        service,
        region: REGION,
        credentials: { ...CREDENTIALS, secretAccessKey },
        sha256: Sha256,
      });
      const r = (await signer.sign(
        new HttpRequest({
          method: 'GET',
          protocol: 'http:',
          hostname: url.hostname,
          port: Number(url.port),
          path,
          headers: { host: url.host },
        }),
      )) as HttpRequest;
      const { host: _host, ...headers } = r.headers;
      return headers;
    };
    const status = async (headers: Record<string, string>) => {
      const controller = new AbortController();
      const res = await fetch(`${url.origin}${path}`, { headers, signal: controller.signal });
      controller.abort();
      return res.status;
    };
    expect(await status({})).toBe(403);
    expect(await status(await signed('execute-api'))).toBe(403);
    expect(await status(await signed('lambda', 'not-the-secret'))).toBe(403);
    expect(await status(await signed('lambda'))).toBe(200);
    expect(fn.records.slice(-4).map((r) => r.verified)).toEqual([false, false, false, true]);

    const d = await dashboard({ credentials: { ...CREDENTIALS, secretAccessKey: 'not-the-secret' } });
    const l = await Listener.open(streamUrl(d, id));
    await until('the answer is read', () => l.ended);
    expect(l.status).toBe(403);
    expect(JSON.parse(l.body)).toMatchObject({ Message: 'Forbidden' });
    expect(fn.records.at(-1)).toMatchObject({ verified: false, reason: expect.stringMatching(/signature we calculated/) });
    expect(await new ApiClient(d.url).batchEvents(id)).toBeUndefined();
    await cancelBatch(db.sql, id);
  });

  it('without --events the stream route answers 204, no stream, and nothing is forwarded', async () => {
    const d = await dashboard({ events: false });
    const id = await openBatch('none');
    const seen = gateway.records.length;
    const fnSeen = fn.records.length;
    const res = await fetch(streamUrl(d, id));
    // SSE's "no stream here, do not reconnect": the browser logs no failed request for it.
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
    expect(await new ApiClient(d.url).batchEvents(id)).toBeUndefined();
    expect(gateway.records.length).toBe(seen);
    expect(fn.records.length).toBe(fnSeen);
    // The rest of the page still works through the API.
    expect((await new ApiClient(d.url).getBatch(id)).status).toBe('open');
    await cancelBatch(db.sql, id);
  });

  it('`batch show --follow` through the dashboard follows on the stream, and closing ends open streams', async () => {
    const d = await dashboard();
    const id = await openBatch('follow');
    const seen = fn.records.length;
    const client = new ApiClient(d.url);
    const out = new PassThrough();
    let text = '';
    out.on('data', (c) => (text += c));
    const followed = followBatch(client, id, {
      intervalMs: 60_000,
      terminal: new Terminal(out as unknown as NodeJS.WriteStream),
    });
    await until('the stream is open', () => fn.records.length - seen === 1 && fn.open() === 1);
    await cancelBatch(db.sql, id);
    // With polling every 60 s it would still wait: the stream's end told it.
    expect((await followed).status).toBe('cancelled');
    expect(text).toMatch(/cancelled/);

    const id2 = await openBatch('closing');
    const l = await Listener.open(streamUrl(d, id2));
    await until('it streams', () => l.named('progress').length > 0);
    await d.close();
    await until('the listener is ended', () => l.ended);
    await until('the function sees its stream closed', () => fn.open() === 0);
    await cancelBatch(db.sql, id2);
  });

  it("a batch's page in a real browser streams through the relay, and without --events it polls", needs(CHROMIUM), async () => {
    const d = await dashboard();
    const plain = await dashboard({ events: false });
    const id = await openBatch('browser');
    const browser = await launchBrowser();
    try {
      await browser.page.goto(`${d.url}/#/batches/${id}`);
      await browser.page.locator('section[data-live="stream"]').waitFor({ timeout: 15_000 });
      await browser.page.goto(`${plain.url}/#/batches/${id}`);
      await browser.page.locator('section[data-live="poll"] .facts').waitFor({ timeout: 15_000 });
      expect(browser.pageErrors).toEqual([]);
    } finally {
      await browser.close();
    }
    await cancelBatch(db.sql, id);
  });

  it('finds the region in a function URL', async () => {
    expect(regionOfFunctionUrlHost('abc123def.lambda-url.eu-west-1.on.aws')).toBe('eu-west-1');
    expect(regionOfFunctionUrlHost('abc123def.lambda-url.ap-southeast-2.on.aws')).toBe('ap-southeast-2');
    expect(regionOfFunctionUrlHost('api.example.com')).toBeUndefined();
    const refused = await startDashboard({
      apiUrl: gateway.url,
      eventsUrl: 'http://events.example.com/',
      port: 0,
      region: REGION,
    }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'invalid_dashboard_config', message: expect.stringMatching(/--events .*https:\/\//) });
  });
});
