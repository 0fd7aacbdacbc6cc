// `leasehold dashboard --api URL`, the command as a user runs it, against a local stand-in for
// the stage's API Gateway that verifies every request's SigV4 signature and passes the verified
// ones to the real API handler on the test database.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Sha256 } from '@smithy/core/checksum';
import { HttpRequest } from '@smithy/core/protocols';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { LeaseholdError } from '../../src/errors.js';
import { DashboardConfigError, regionOfApiHost, startDashboard } from '../../src/local/dashboard-proxy.js';
import { startHttpServer, type HttpServer } from '../../src/local/http-server.js';
import { apiDeps, InvokeEndpoint } from '../support/api.js';
import { launchBrowser, outputDir, withScreenshot } from '../support/browser.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { CHROMIUM, needs } from '../support/programs.js';
import { startSigV4Gateway, type SigV4Gateway } from '../support/sigv4-gateway.js';
import { sleep } from '../support/time.js';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const OUT = outputDir('dashboard-signing');
const REGION = 'eu-central-1';
/** The test's credentials: what the stand-in knows and the dashboard is given through the environment. */
const CREDENTIALS = {
  accessKeyId: 'AKIDLEASEHOLDTEST01',
  secretAccessKey: 'leasehold/test/secret/key/0123456789',
  sessionToken: 'leasehold-session-token',
};

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let api: HttpServer;
let gateway: SigV4Gateway;
let home: string;
/** A folder of one file for checksum batches (not the whole temp dir, which other tests change). */
let files: string;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  const deps = apiDeps(db.sql, endpoint);
  api = await startHttpServer({ port: 0, handler: (event) => handleApi(event, deps) });
  gateway = await startSigV4Gateway({ credentials: CREDENTIALS, region: REGION, upstream: api.url });
  home = mkdtempSync(join(tmpdir(), 'leasehold-aws-home-'));
  files = mkdtempSync(join(tmpdir(), 'leasehold-signed-files-'));
  writeFileSync(join(files, 'a.txt'), 'alpha');
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await gateway?.close();
  await api?.close();
  await endpoint?.close();
  rmSync(home, { recursive: true, force: true });
  rmSync(files, { recursive: true, force: true });
});

/**
 * The environment of a user whose AWS credentials are exactly `credentials` (or none): every
 * other source of the default chain (files, SSO, instance metadata) is empty or off.
 */
function awsEnv(credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string }): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('AWS_')) env[k] = v;
  Object.assign(env, {
    HOME: home,
    AWS_CONFIG_FILE: join(home, 'no-config'),
    AWS_SHARED_CREDENTIALS_FILE: join(home, 'no-credentials'),
    AWS_EC2_METADATA_DISABLED: 'true',
  });
  if (credentials) {
    env.AWS_ACCESS_KEY_ID = credentials.accessKeyId;
    env.AWS_SECRET_ACCESS_KEY = credentials.secretAccessKey;
    if (credentials.sessionToken) env.AWS_SESSION_TOKEN = credentials.sessionToken;
  }
  return env;
}

/** Run `leasehold dashboard --api <the stand-in> …` and wait until it serves. */
async function dashboard(env: NodeJS.ProcessEnv, args: string[] = ['--region', REGION]) {
  const child = spawn(process.execPath, [BIN, 'dashboard', '--api', gateway.url, '--port', '0', ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => (children.delete(child), r(code))));
  const until = Date.now() + 30_000;
  while (!/Ctrl-C stops/.test(stderr)) {
    if (child.exitCode !== null || Date.now() > until) throw new Error(`leasehold dashboard did not start:\n${stderr}`);
    await sleep(25);
  }
  const url = /dashboard +(http:\/\/127\.0\.0\.1:\d+)\//.exec(stderr)![1];
  return {
    url,
    stderr: () => stderr,
    stop: async () => {
      child.kill('SIGINT');
      return exited;
    },
  };
}

async function json(res: Response) {
  return { status: res.status, body: JSON.parse(await res.text()) };
}

describe('leasehold dashboard --api URL', () => {
  it("signs the page's API calls with the caller's credentials: the stand-in verifies every one and the API answers", async () => {
    const d = await dashboard(awsEnv(CREDENTIALS));
    expect(d.stderr()).toMatch(/credentials +AKID…ST01 \(the default provider chain\)/);
    expect(d.stderr()).toContain(`(requests signed with SigV4 for execute-api in ${REGION})`);
    const seen = gateway.records.length;

    const started = await json(
      await fetch(`${d.url}/batches`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'signed-start' },
        body: JSON.stringify({ tenant: 'signed', datasource: 'ds', job: 'checksum', params: { dir: files } }),
      }),
    );
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    expect(started.body).toMatchObject({ tenant: 'signed', requestKey: 'signed-start', created: true });
    const listed = await json(await fetch(`${d.url}/batches?tenant=signed&status=open&limit=5`));
    expect(listed.status).toBe(200);
    expect(listed.body.batches.map((b: { id: string }) => b.id)).toEqual([started.body.id]);
    const items = await json(
      await fetch(`${d.url}/batches/${started.body.id}/items?limit=2&after=${encodeURIComponent('a b+c')}`),
    );
    expect(items.status).toBe(200);
    const desired = await json(
      await fetch(`${d.url}/concurrency`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: '{"desired":2}',
      }),
    );
    expect(desired).toMatchObject({ status: 200, body: { desired: 2 } });
    const cancelled = await json(await fetch(`${d.url}/batches/${started.body.id}/cancel`, { method: 'POST' }));
    expect(cancelled).toMatchObject({ status: 200, body: { status: 'cancelled' } });
    const notFound = await json(await fetch(`${d.url}/batches/00000000-0000-4000-8000-000000000000`));
    expect(notFound).toMatchObject({ status: 404, body: { error: { code: 'batch_not_found' } } });

    const mine = gateway.records.slice(seen);
    expect(mine.map((r) => `${r.method} ${r.path.split('?')[0]}`)).toEqual([
      'POST /batches',
      'GET /batches',
      `GET /batches/${started.body.id}/items`,
      'PUT /concurrency',
      `POST /batches/${started.body.id}/cancel`,
      'GET /batches/00000000-0000-4000-8000-000000000000',
    ]);
    expect(mine.filter((r) => !r.verified)).toEqual([]);
    // The idempotency key, the body's type and the session token are covered by the signature.
    expect(mine[0].signedHeaders).toEqual(
      expect.arrayContaining([
        'host',
        'content-type',
        'idempotency-key',
        'x-amz-date',
        'x-amz-content-sha256',
        'x-amz-security-token',
      ]),
    );
    // The page itself is served locally: nothing of it reaches the API.
    const page = await fetch(`${d.url}/`);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(await page.text()).toContain('/dashboard/app.js');
    expect(gateway.records.length).toBe(seen + mine.length);
    expect(await d.stop()).toBe(0);
  });

  it('shows the stage in a real browser, which never holds a credential', needs(CHROMIUM), async () => {
    await fetch(`${api.url}/batches`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ tenant: 'browser-signed', datasource: 'ds', job: 'checksum', params: { dir: files } }),
    });
    const d = await dashboard(awsEnv(CREDENTIALS));
    const browser = await launchBrowser();
    try {
      const requests: { url: string; headers: Record<string, string> }[] = [];
      browser.page.on('request', (r) => requests.push({ url: r.url(), headers: r.headers() }));
      await withScreenshot(browser.page, OUT, 'signed dashboard', async () => {
        await browser.page.goto(`${d.url}/#/batches?tenant=browser-signed`);
        await browser.page.locator('table.batches tbody tr').first().waitFor({ timeout: 15_000 });
        expect(await browser.page.locator('table.batches tbody tr td').nth(2).textContent()).toBe('browser-signed / ds');
      });
      // Every request of the page went to the local dashboard, none carried a signature or key.
      expect(requests.length).toBeGreaterThan(2);
      for (const r of requests) {
        expect(r.url.startsWith(`${d.url}/`), r.url).toBe(true);
        expect(Object.keys(r.headers).filter((h) => h === 'authorization' || h.startsWith('x-amz'))).toEqual([]);
      }
      expect(browser.pageErrors).toEqual([]);
    } finally {
      await browser.close();
      await d.stop();
    }
  });

  it('without credentials refuses to forward: 401 naming what to do, and the stand-in sees nothing', async () => {
    const d = await dashboard(awsEnv());
    expect(d.stderr()).toMatch(/credentials +none yet/);
    const seen = gateway.records.length;
    const res = await json(await fetch(`${d.url}/batches`));
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('no_credentials');
    expect(res.body.error.message).toMatch(/AWS_PROFILE/);
    expect(gateway.records.length).toBe(seen);
    expect(await d.stop()).toBe(0);
  });

  it('with credentials the API does not know, the stand-in refuses the signature and the page gets its 403', async () => {
    const d = await dashboard(awsEnv({ ...CREDENTIALS, secretAccessKey: 'not-the-secret' }));
    const res = await json(await fetch(`${d.url}/batches`));
    expect(res).toMatchObject({
      status: 403,
      body: { message: 'The request signature we calculated does not match the signature you provided.' },
    });
    const other = await dashboard(awsEnv({ ...CREDENTIALS, accessKeyId: 'AKIDSOMEONEELSE0000' }));
    expect(await json(await fetch(`${other.url}/batches`))).toMatchObject({
      status: 403,
      body: { message: 'The security token included in the request is invalid.' },
    });
    await Promise.all([d.stop(), other.stop()]);
  });

  it('the stand-in accepts a signed request as it was signed, and refuses it unsigned or changed on the way', async () => {
    expect(await json(await fetch(`${gateway.url}/concurrency`))).toMatchObject({
      status: 403,
      body: { message: 'Missing Authentication Token' },
    });
    const url = new URL(gateway.url);
    const signer = new SignatureV4({ service: 'execute-api', region: REGION, credentials: CREDENTIALS, sha256: Sha256 });
    const body = '{"desired":1}';
    const signed = (await signer.sign(
      new HttpRequest({
        method: 'PUT',
        protocol: 'http:',
        hostname: url.hostname,
        port: Number(url.port),
        path: '/concurrency',
        headers: { host: url.host, 'content-type': 'application/json' },
        body,
      }),
    )) as HttpRequest;
    const { host: _host, ...headers } = signed.headers;
    const send = (path: string, b: string) => fetch(`${gateway.url}${path}`, { method: 'PUT', headers, body: b }).then(json);
    expect(await send('/concurrency', body)).toMatchObject({ status: 200, body: { desired: 1 } });
    for (const [path, b] of [
      ['/concurrency', '{"desired":9}'],
      ['/concurrency?x=1', body],
      ['/units', body],
    ]) {
      expect(await send(path, b), `${path} ${b}`).toMatchObject({
        status: 403,
        body: { message: expect.stringMatching(/signature we calculated does not match/) },
      });
    }
    expect((await json(await fetch(`${api.url}/concurrency`))).body.desired).toBe(1);
  });

  it('refuses requests addressed to another host name or sent by another site, without forwarding them', async () => {
    const d = await dashboard(awsEnv(CREDENTIALS));
    const seen = gateway.records.length;
    const { request } = await import('node:http');
    const raw = (headers: Record<string, string>, method = 'GET') =>
      new Promise<number>((done, fail) => {
        const req = request(`${d.url}/batches`, { method, headers }, (res) => {
          res.resume();
          res.on('end', () => done(res.statusCode ?? 0));
        });
        req.on('error', fail);
        req.end();
      });
    expect(await raw({ host: 'evil.example:80' })).toBe(403);
    expect(await raw({ origin: 'https://evil.example' }, 'POST')).toBe(403);
    expect(await raw({ origin: d.url, 'content-type': 'application/json' }, 'POST')).not.toBe(403);
    expect(gateway.records.length).toBe(seen + 1);
    await d.stop();
  });

  it('takes --events (or LEASEHOLD_EVENTS_URL) and says where progress streams come from; without, that the page polls', async () => {
    const events = 'http://127.0.0.1:9/';
    const given = await dashboard(awsEnv(CREDENTIALS), ['--region', REGION, '--events', events]);
    expect(given.stderr()).toContain(
      `events       http://127.0.0.1:9 (progress streams signed with SigV4 for lambda in ${REGION}, one per batch)`,
    );
    const fromEnv = await dashboard({ ...awsEnv(CREDENTIALS), LEASEHOLD_EVENTS_URL: events });
    expect(fromEnv.stderr()).toContain('events       http://127.0.0.1:9 (progress streams signed');
    const without = await dashboard(awsEnv(CREDENTIALS));
    expect(without.stderr()).toContain('events       none (no --events URL): the batch view polls');
    await Promise.all([given.stop(), fromEnv.stop(), without.stop()]);
  });

  it('finds the region in an execute-api URL, and refuses what cannot work before serving', async () => {
    expect(regionOfApiHost('abc123.execute-api.eu-west-1.amazonaws.com')).toBe('eu-west-1');
    expect(regionOfApiHost('abc123.execute-api.cn-north-1.amazonaws.com.cn')).toBe('cn-north-1');
    expect(regionOfApiHost('api.example.com')).toBeUndefined();
    const run = (args: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((done) => {
        const child = spawn(process.execPath, [BIN, 'dashboard', '--port', '0', ...args], {
          env: awsEnv(CREDENTIALS),
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        child.stderr.on('data', (c) => (stderr += c));
        child.on('exit', (code) => done({ code, stderr }));
      });
    expect(await run(['--api', 'http://api.example.com'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/must be https:\/\//),
    });
    expect(await run(['--api', gateway.url])).toMatchObject({ code: 2, stderr: expect.stringMatching(/give --region/) });
    expect(await run(['--api', gateway.url, '--region', REGION, '--events', 'http://events.example.com/'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--events http:\/\/events\.example\.com\/: must be https:\/\//),
    });
    // A function URL has no path: one given would go before /batches/{id}/events.
    expect(
      await run(['--api', gateway.url, '--region', REGION, '--events', 'https://abc.lambda-url.eu-west-1.on.aws/batches']),
    ).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--events \S+\/batches: give the function URL alone, without a path/),
    });
    expect(await run([])).toMatchObject({ code: 1, stderr: expect.stringMatching(/--api <url>.*not specified/) });
    // In the library, the refusal is a LeaseholdError with its code, as every error leasehold throws on purpose.
    const refused = await startDashboard({ apiUrl: 'http://api.example.com', port: 0 }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DashboardConfigError);
    expect(refused).toBeInstanceOf(LeaseholdError);
    expect(refused).toMatchObject({
      code: 'invalid_dashboard_config',
      name: 'DashboardConfigError',
      message: expect.stringMatching(/must be https:\/\//),
    });
  });
});
