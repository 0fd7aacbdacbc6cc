// What the command says where a new user trips: the built `leasehold` command against the real
// API over HTTP on a real PostgreSQL. An unknown unit job names the app's unit jobs (and the line
// that adds outboxDelivery()), an outbox without units names the `units put` that registers them,
// `batch start --notify` sends the API's `notify`, `processes` says each fleet figure once and
// `batch show` of a finished batch wants no runs.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { handleApi } from '../../src/api/index.js';
import { startHttpServer, type HttpServer } from '../../src/local/index.js';
import { defineUnitJob, UnitJobRegistry } from '../../src/units/index.js';
import { apiDeps, InvokeEndpoint } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const run = promisify(execFile);

/** The one unit job of the app under test, as docs/app.md's app has (no outboxDelivery()). */
const uptimeCheck = defineUnitJob<Record<string, never>>({
  name: 'uptime-check',
  description: 'check a URL',
  config: z.object({}).strict(),
  intervalMs: 60_000,
  async run() {},
});

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let server: HttpServer;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-hints-'));
  writeFileSync(join(dir, 'a.txt'), 'a\n');
  endpoint = await InvokeEndpoint.start();
  const deps = { ...apiDeps(db.sql, endpoint, { allowedRoots: [dir] }), unitJobs: new UnitJobRegistry([uptimeCheck as never]) };
  server = await startHttpServer({ port: 0, handler: (event) => handleApi(event, deps) });
});
afterAll(async () => {
  await server.close();
  await endpoint.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Run the command against the test API: its exit code and output, a failure included. */
async function leasehold(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [BIN, ...args, '--api', server.url], { env: { ...process.env } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const f = e as { code: number; stdout: string; stderr: string };
    return { code: f.code, stdout: f.stdout, stderr: f.stderr };
  }
}

it('units put of outbox-delivery in an app without it names its unit jobs and the line to add', async () => {
  const r = await leasehold([
    'units',
    'put',
    'shop',
    '--job',
    'outbox-delivery',
    '--shards',
    '2',
    '--endpoint',
    'http://93.184.215.14:9/hook',
  ]);
  expect(r.code).toBe(1);
  expect(r.stderr.trim()).toBe(
    `leasehold: job: unknown unit job "outbox-delivery" (this app's unit jobs: uptime-check); ` +
      "add outboxDelivery() (from 'leasehold') to createHandlers' unitJobs to deliver outboxes (HTTP 404)",
  );
});

it('outbox show and send of a tenant without units print the units put command, not the API request', async () => {
  const hint =
    'leasehold: tenant "nobody" has no outbox-delivery units of weight > 0 (nothing would deliver): register them first with ' +
    'leasehold units put nobody --job outbox-delivery --shards N --endpoint URL (HTTP 404)';
  const shown = await leasehold(['outbox', 'show', 'nobody']);
  expect(shown.code).toBe(1);
  expect(shown.stderr.trim()).toBe(hint);
  const sent = await leasehold(['outbox', 'send', 'nobody', '--key', 'k', '--payload', '{}']);
  expect(sent.code).toBe(1);
  expect(sent.stderr.trim()).toBe(hint);
});

it('batch start --notify URL sends notify; a finished batch shows no wanted runs', async () => {
  const bad = await leasehold(['batch', 'start', 'checksum', '--param', `dir=${dir}`, '--notify', 'hooks.example.com/done']);
  expect(bad.code).toBe(1);
  expect(bad.stderr).toMatch(/--notify takes an absolute http\(s\) URL, got "hooks\.example\.com\/done"/);

  const url = 'http://93.184.215.14:9/done';
  const started = await leasehold(['batch', 'start', 'checksum', '--param', `dir=${dir}`, '--notify', url, '--json']);
  expect(started.code, started.stderr).toBe(0);
  const batch = JSON.parse(started.stdout);
  expect(batch.notify).toEqual({ url });

  const open = await leasehold(['batch', 'show', batch.id]);
  expect(open.stdout).toMatch(/^runs +0 live of 1 wanted \(maxConcurrency 1\); 0 in all/m);
  expect((await leasehold(['batch', 'cancel', batch.id])).stdout.trim()).toBe(`batch ${batch.id} cancelled`);
  const finished = await leasehold(['batch', 'show', batch.id]);
  expect(finished.stdout).toMatch(/^runs +none \(finished\); 0 in all \(every run it ever had/m);
  expect(finished.stdout).not.toMatch(/wanted/);
});

it('processes and concurrency say live against desired once, and invocations on their way apart', async () => {
  // The batch started above reserved a worker invocation: it counts as on its way too.
  await db.sql`delete from leasehold_invocations`;
  // No unit has weight yet: it says why no fleet process comes.
  const none = 'no units have weight, so no fleet process is invoked (`leasehold units put` registers some)';
  expect((await leasehold(['concurrency', '3'])).stdout.trim()).toBe(`live 0 of 3 desired; ${none}`);
  expect((await leasehold(['processes'])).stdout.split('\n')[0]).toBe(`live 0 of 3 desired; ${none}`);
  const put = await leasehold(['units', 'put', 'hint-tenant', '--job', 'uptime-check', '--shards', '1']);
  expect(put.code, put.stderr).toBe(0);
  expect((await leasehold(['concurrency'])).stdout.trim()).toBe('live 0 of 3 desired');
  // Two workers invoked and not live yet (their first heartbeat not seen).
  await db.sql`insert into leasehold_invocations (id, confirm_by)
    select gen_random_uuid(), now() + interval '30 seconds' from generate_series(1, 2)`;
  const r = await leasehold(['processes']);
  expect(r.stdout.split('\n')[0]).toBe('live 0 of 3 desired; 2 invocations on their way (invoked, not live yet)');
  await db.sql`delete from leasehold_invocations`;
  await leasehold(['concurrency', '0']);
});
