import { request } from 'node:http';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import { startHttpServer, type HttpApiHandler, type HttpServer, type HttpServerOptions } from '../../src/local/http-server.js';
import { dashboardAssets } from '../../src/local/dashboard-assets.js';
import { LocalPortInUseError } from '../../src/local/http-util.js';
import { sleep } from '../support/time.js';

const servers: HttpServer[] = [];

async function serve(handler: HttpApiHandler, options: Partial<HttpServerOptions> = {}) {
  const server = await startHttpServer({ port: 0, handler, ...options });
  servers.push(server);
  return server;
}

/** A server whose handler records the events it gets and answers 204. */
async function recording() {
  const events: APIGatewayProxyEventV2[] = [];
  const contexts: Context[] = [];
  const server = await serve(async (event, context) => {
    events.push(event);
    contexts.push(context);
    return { statusCode: 204 };
  });
  return { server, events, contexts };
}

/** Raw request, for headers fetch would merge or refuse (repeated headers, several cookies). */
function rawRequest(url: string, path: string, headers: [string, string][]): Promise<number> {
  return new Promise((resolve, reject) => {
    const flat = headers.flat();
    const req = request(`${url}${path}`, { method: 'GET', headers: flat }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe('local API Gateway (HTTP API v2) server', () => {
  it('turns a request into a payload 2.0 event', async () => {
    const { server, events, contexts } = await recording();
    const res = await fetch(`${server.url}/batches/b%201?tenant=acme&state=done&state=failed&q=a%2Cb`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'X-Custom': 'Yes' },
      body: JSON.stringify({ job: 'checksum' }),
    });
    expect(res.status).toBe(204);

    const [event] = events;
    expect(event).toMatchObject({
      version: '2.0',
      routeKey: '$default',
      rawPath: '/batches/b%201',
      rawQueryString: 'tenant=acme&state=done&state=failed&q=a%2Cb',
      queryStringParameters: { tenant: 'acme', state: 'done,failed', q: 'a,b' },
      body: '{"job":"checksum"}',
      isBase64Encoded: false,
    });
    expect(event.headers['content-type']).toBe('application/json');
    expect(event.headers['x-custom']).toBe('Yes');
    expect(event.headers['X-Custom']).toBeUndefined();
    expect(event.cookies).toBeUndefined();
    const rc = event.requestContext;
    expect(rc.http).toMatchObject({ method: 'POST', path: '/batches/b%201', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1' });
    expect(rc.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(rc.stage).toBe('$default');
    expect(Math.abs(rc.timeEpoch - Date.now())).toBeLessThan(5_000);
    expect(rc.time).toMatch(/^\d{2}\/[A-Z][a-z]{2}\/\d{4}:\d{2}:\d{2}:\d{2} \+0000$/);
    expect((rc as { authorizer?: { iam?: { userArn: string } } }).authorizer?.iam?.userArn).toContain(':user/local');
    expect(contexts[0]!.awsRequestId).toBe(rc.requestId);
    expect(contexts[0]!.getRemainingTimeInMillis()).toBeGreaterThan(25_000);
  });

  it('joins repeated headers with commas and moves cookies out of the headers', async () => {
    const { server, events } = await recording();
    const status = await rawRequest(server.url, '/x', [
      ['Host', '127.0.0.1'],
      ['X-Multi', 'one'],
      ['X-Multi', 'two'],
      ['Cookie', 'a=1; b=2'],
    ]);
    expect(status).toBe(204);
    const [event] = events;
    expect(event!.headers['x-multi']).toBe('one,two');
    expect(event!.headers.cookie).toBeUndefined();
    expect(event!.cookies).toEqual(['a=1', 'b=2']);
    expect(event!.queryStringParameters).toBeUndefined();
    expect(event!.rawQueryString).toBe('');
    expect(event!.body).toBeUndefined();
  });

  it('passes binary and non-UTF-8 bodies as base64', async () => {
    const { server, events } = await recording();
    const bytes = Buffer.from([0x00, 0xff, 0xfe, 0x41, 0x80]);
    await fetch(`${server.url}/upload`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: bytes });
    await fetch(`${server.url}/upload`, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: bytes });
    await fetch(`${server.url}/upload`, {
      method: 'PUT',
      headers: { 'content-type': 'text/plain; charset=utf-8' },
      body: 'héllo ✓',
    });

    expect(events.map((e) => e.isBase64Encoded)).toEqual([true, true, false]);
    expect(Buffer.from(events[0]!.body!, 'base64')).toEqual(bytes);
    expect(Buffer.from(events[1]!.body!, 'base64')).toEqual(bytes);
    expect(events[2]!.body).toBe('héllo ✓');
  });

  it('writes the structured result: status, headers, cookies and a base64 body decoded', async () => {
    const server = await serve(async (event): Promise<APIGatewayProxyStructuredResultV2> => {
      if (event.rawPath === '/png') {
        return {
          statusCode: 200,
          headers: { 'content-type': 'image/png' },
          body: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]).toString('base64'),
          isBase64Encoded: true,
        };
      }
      return {
        statusCode: 201,
        headers: { 'Content-Type': 'application/json', 'x-count': 3, 'x-flag': true },
        cookies: ['session=abc; HttpOnly', 'theme=dark'],
        body: JSON.stringify({ id: 'b-1' }),
      };
    });
    const res = await fetch(`${server.url}/batches`, { method: 'POST' });
    expect(res.status).toBe(201);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('x-count')).toBe('3');
    expect(res.headers.get('x-flag')).toBe('true');
    expect(res.headers.getSetCookie()).toEqual(['session=abc; HttpOnly', 'theme=dark']);
    expect(await res.json()).toEqual({ id: 'b-1' });

    const png = await fetch(`${server.url}/png`);
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await png.arrayBuffer())).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff]));
  });

  it('sends a result without statusCode as a 200 JSON body, as API Gateway infers', async () => {
    const server = await serve(async () => ({ hello: 'world' }) as never);
    const res = await fetch(server.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toEqual({ hello: 'world' });
  });

  it("passes bodies up to API Gateway's 10 MB to the handler by default, so the API's own limit answers", async () => {
    const server = await serve(async (event) => ({ statusCode: 200, body: String(event.body?.length) }));
    const res = await fetch(`${server.url}/batches`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `"${'x'.repeat(2 * 1024 * 1024)}"`,
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(String(2 * 1024 * 1024 + 2));
  });

  it('refuses a body above maxBodyBytes with 413 without calling the handler', async () => {
    let calls = 0;
    const server = await serve(
      async () => {
        calls++;
        return { statusCode: 200, body: 'ok' };
      },
      { maxBodyBytes: 1024 },
    );
    const big = await fetch(`${server.url}/batches`, { method: 'POST', body: 'x'.repeat(2 * 1024 * 1024) });
    expect(big.status).toBe(413);
    expect(await big.json()).toEqual({ error: { code: 'payload_too_large', message: expect.stringContaining('1024') } });

    // Streamed without a content-length, the limit still holds.
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 8; i++) controller.enqueue(new Uint8Array(512).fill(120));
        controller.close();
      },
    });
    const chunked = await fetch(`${server.url}/batches`, { method: 'POST', body: stream, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(413);

    const exact = await fetch(`${server.url}/batches`, { method: 'POST', body: 'x'.repeat(1024) });
    expect(exact.status).toBe(200);
    expect(calls).toBe(1);
  });

  it('answers a throwing handler with a 500 JSON error and keeps serving', async () => {
    const errors: unknown[] = [];
    const server = await serve(
      async (event) => {
        if (event.rawPath === '/boom') throw new Error('database unreachable');
        if (event.rawPath === '/bad') return { statusCode: 'nope' } as never;
        return { statusCode: 200, body: 'fine' };
      },
      { onError: (e) => errors.push(e) },
    );
    const boom = await fetch(`${server.url}/boom`);
    expect(boom.status).toBe(500);
    expect(await boom.json()).toEqual({ error: { code: 'internal', message: 'database unreachable' } });
    const bad = await fetch(`${server.url}/bad`);
    expect(bad.status).toBe(500);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('internal');
    const ok = await fetch(`${server.url}/ok`);
    expect(await ok.text()).toBe('fine');
    expect(errors).toHaveLength(2);
  });

  it('answers 503 when the handler runs past timeoutMs', async () => {
    const server = await serve(() => new Promise(() => {}), { timeoutMs: 50 });
    const res = await fetch(`${server.url}/slow`);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('timeout');
  });

  it('reports each exchange and refuses a port already in use', async () => {
    const seen: { method: string; path: string; statusCode: number }[] = [];
    const server = await serve(async () => ({ statusCode: 202 }), {
      onResponse: ({ method, path, statusCode }) => seen.push({ method, path, statusCode }),
    });
    await fetch(`${server.url}/a?b=c`, { method: 'DELETE' });
    expect(seen).toEqual([{ method: 'DELETE', path: '/a', statusCode: 202 }]);
    await expect(startHttpServer({ port: server.port, handler: async () => ({}) })).rejects.toBeInstanceOf(LocalPortInUseError);
  });

  it('close lets a request in progress finish', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const server = await startHttpServer({
      port: 0,
      handler: async () => {
        await gate;
        return { statusCode: 200, body: 'late' };
      },
    });
    const pending = fetch(server.url);
    await sleep(50);
    const closed = server.close();
    release();
    const res = await pending;
    expect(await res.text()).toBe('late');
    await closed;
    await expect(fetch(server.url)).rejects.toThrow();
  });

  it("serves the dashboard's page and assets before the API, whose paths keep answering", async () => {
    const { server, events } = await recording();
    const withAssets = await serve(async (event) => ({ statusCode: 200, body: event.rawPath }), { assets: dashboardAssets() });
    const page = await fetch(`${withAssets.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    expect(await page.text()).toContain('<script type="module" src="/dashboard/app.js"></script>');
    for (const [path, type] of [
      ['/dashboard/app.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/app.css', 'text/css; charset=utf-8'],
    ]) {
      const res = await fetch(`${withAssets.url}${path}`);
      expect([path, res.status, res.headers.get('content-type')]).toEqual([path, 200, type]);
      expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(1000);
    }
    // Everything else is the API's, the same paths as without the dashboard.
    expect(await (await fetch(`${withAssets.url}/batches`)).text()).toBe('/batches');
    expect(await (await fetch(`${withAssets.url}/dashboard/other.js`)).text()).toBe('/dashboard/other.js');
    expect(await (await fetch(`${withAssets.url}/`, { method: 'POST' })).text()).toBe('/');
    await fetch(`${server.url}/`);
    expect(events.map((e) => e.rawPath)).toEqual(['/']);
  });

  it('answers a missing dashboard build with 500 naming npm run build', async () => {
    const server = await serve(async () => ({ statusCode: 204 }), {
      assets: dashboardAssets('/nonexistent/leasehold-dashboard'),
    });
    const res = await fetch(`${server.url}/`);
    expect(res.status).toBe(500);
    expect(await res.text()).toMatch(/the dashboard is not built .*run `npm run build`/);
  });

  it("refuses a change sent by another site's page with 403, without calling the handler", async () => {
    const { server, events } = await recording();
    const post = (origin: string | undefined, method = 'POST') =>
      fetch(`${server.url}/batches/x/cancel`, { method, headers: origin === undefined ? {} : { origin } });
    const refused = await post('https://evil.example');
    expect(refused.status).toBe(403);
    expect(await refused.json()).toEqual({
      error: { code: 'forbidden', message: expect.stringMatching(/^POST from a page of https:\/\/evil\.example is refused/) },
    });
    expect((await post('http://127.0.0.1:1')).status).toBe(403);
    expect(events).toEqual([]);
    // Its own pages, the CLI (no Origin) and reads from anywhere go on.
    expect((await post(server.url)).status).toBe(204);
    expect((await post(undefined)).status).toBe(204);
    expect((await post('https://evil.example', 'GET')).status).toBe(204);
    expect(events).toHaveLength(3);
  });

  it('refuses every request whose Host is not its loopback address and port (DNS rebinding), the dashboard included', async () => {
    const { server, events } = await recording();
    const withAssets = await serve(async () => ({ statusCode: 204 }), { assets: dashboardAssets() });
    const port = (s: HttpServer) => Number(new URL(s.url).port);
    for (const [method, path] of [
      ['GET', '/batches'],
      ['PUT', '/concurrency'],
      ['POST', '/batches'],
    ] as const) {
      const res = await hostRequest(port(server), method, path, {
        host: `evil.example:${port(server)}`,
        origin: `http://evil.example:${port(server)}`,
      });
      expect([method, res.status]).toEqual([method, 403]);
      expect(JSON.parse(res.body).error.code).toBe('forbidden');
    }
    expect((await hostRequest(port(withAssets), 'GET', '/', { host: `evil.example:${port(withAssets)}` })).status).toBe(403);
    expect(events).toEqual([]);
    // Its own names go on.
    for (const host of [`127.0.0.1:${port(server)}`, `localhost:${port(server)}`]) {
      expect((await hostRequest(port(server), 'GET', '/batches', { host })).status).toBe(204);
    }
    expect(events).toHaveLength(2);
  });
});

/** A request with headers fetch would not let a caller set (Host). */
function hostRequest(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
