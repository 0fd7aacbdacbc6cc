// Each function bundled with esbuild the way SST v3+ builds a Node function for deploy, then
// loaded by a plain `node` process the way the Lambda runtime loads it, and invoked against the
// real test PostgreSQL. Prints each bundle's size.
//
// SST's build (pkg/runtime/node/build.go): platform node, format esm, bundle, `mainFields`
// module then main, keepNames, minify (SST's default `nodejs.minify`), no source map, the
// createRequire/__dirname banner, target esnext, one `<handler file>.mjs` per function at the
// bundle's root. Only `sharp` and `pg-native` are external: the AWS SDK v3 is bundled too
// (SST does not rely on the runtime's copy, so the deployed SDK is the locked one).
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrationFiles } from '../../src/store/index.js';
import { apiEvent, InvokeEndpoint } from '../api/helpers.js';
import { testDatabase, type TestDatabase } from '../support/db.js';

const FUNCTIONS = ['worker', 'scheduler', 'api', 'trigger', 'migrate'] as const;
/** Bigger than this is absurd for these functions (Lambda's own limit is 50 MB zipped). */
const MAX_BYTES = 10 * 1024 * 1024;
const ROOT = resolve(import.meta.dirname, '../..');

const run = promisify(execFile);
let out: string;
let endpoint: InvokeEndpoint;
const sizes: Record<string, number> = {};

beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), 'leasehold-bundle-'));
  endpoint = await InvokeEndpoint.start();
  await Promise.all(
    FUNCTIONS.map(async (name) => {
      const result = await build({
        entryPoints: [join(ROOT, 'functions', `${name}.ts`)],
        outfile: join(out, name, `${name}.mjs`),
        platform: 'node',
        format: 'esm',
        target: 'esnext',
        bundle: true,
        minify: true,
        keepNames: true,
        mainFields: ['module', 'main'],
        external: ['sharp', 'pg-native'],
        sourcemap: false,
        metafile: true,
        logLevel: 'silent',
        banner: {
          js: [
            `import { createRequire as topLevelCreateRequire } from 'module';`,
            `const require = topLevelCreateRequire(import.meta.url);`,
            `import { fileURLToPath as topLevelFileUrlToPath, URL as topLevelURL } from "url"`,
            `const __filename = topLevelFileUrlToPath(import.meta.url)`,
            `const __dirname = topLevelFileUrlToPath(new topLevelURL(".", import.meta.url))`,
          ].join('\n'),
        },
      });
      expect(result.errors).toEqual([]);
      sizes[name] = statSync(join(out, name, `${name}.mjs`)).size;
    }),
  );
  // The deploy copies the migration files next to the migrate function's bundle (copyFiles).
  cpSync(join(ROOT, 'src', 'store', 'migrations'), join(out, 'migrate', 'migrations'), { recursive: true });
  writeFileSync(
    join(out, 'invoke.mjs'),
    // What the Lambda runtime does: import the handler module, call it with the event and a context.
    `import { pathToFileURL } from 'node:url';
const [bundle, event, timeoutMs] = process.argv.slice(2);
const { handler } = await import(pathToFileURL(bundle).href);
const start = Date.now();
const context = {
  functionName: 'leasehold-bundle-test', functionVersion: '$LATEST', awsRequestId: 'req-' + process.pid,
  invokedFunctionArn: 'arn:aws:lambda:eu-west-1:123456789012:function:leasehold-bundle-test', memoryLimitInMB: '1024',
  logGroupName: '/aws/lambda/leasehold-bundle-test', logStreamName: 'x', callbackWaitsForEmptyEventLoop: true,
  getRemainingTimeInMillis: () => Number(timeoutMs) - (Date.now() - start),
};
const result = await handler(JSON.parse(event), context);
process.stdout.write('RESULT ' + JSON.stringify(result) + '\\n');
process.exit(0);
`,
  );
}, 120_000);

afterAll(async () => {
  await endpoint.close();
  rmSync(out, { recursive: true, force: true });
  const rows = FUNCTIONS.map((n) => `  ${`functions/${n}.handler`.padEnd(28)} ${(sizes[n] / 1024).toFixed(0).padStart(6)} KiB  (${sizes[n]} bytes)`);
  console.log(['[leasehold bundles] esbuild as SST deploys them (esm, minified, AWS SDK included):', ...rows].join('\n'));
});

/** Invoke a bundle in a fresh `node` process; its JSON log lines and its result. */
async function invoke(name: string, event: unknown, env: Record<string, string>, timeoutMs = 20_000): Promise<{ result: any; logs: any[] }> {
  const { stdout } = await run(process.execPath, [join(out, 'invoke.mjs'), join(out, name, `${name}.mjs`), JSON.stringify(event), String(timeoutMs)], {
    env: {
      PATH: process.env.PATH ?? '',
      AWS_REGION: 'eu-west-1',
      AWS_ACCESS_KEY_ID: 'AKIDTEST',
      AWS_SECRET_ACCESS_KEY: 'test',
      AWS_ENDPOINT_URL_LAMBDA: endpoint.url,
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      LEASEHOLD_WORKER_IDLE_MS: '200',
      LEASEHOLD_DEADLINE_MARGIN_MS: '3000',
      LEASEHOLD_DRAIN_MS: '1000',
      // Run from elsewhere than the project: the bundle must not need its files.
      LAMBDA_TASK_ROOT: join(out, name),
      ...env,
    },
    cwd: join(out, name),
    timeout: 60_000,
  });
  const lines = stdout.split('\n').filter(Boolean);
  const result = lines.find((l) => l.startsWith('RESULT '));
  expect(result, stdout).toBeDefined();
  return { result: JSON.parse(result!.slice('RESULT '.length)), logs: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)) };
}

describe('function bundles', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await testDatabase({ migrate: false });
  });
  afterAll(() => db.close());

  it('every function bundles, with a size that is not absurd', () => {
    for (const name of FUNCTIONS) {
      expect(sizes[name], name).toBeGreaterThan(10_000);
      expect(sizes[name], name).toBeLessThan(MAX_BYTES);
    }
  });

  it('the migrate bundle migrates a fresh database from the migration files copied next to it', async () => {
    const { result, logs } = await invoke('migrate', { stage: 'test' }, { DATABASE_URL: db.schemaUrl });
    expect(result.applied.map((m: { name: string }) => m.name)).toEqual((await migrationFiles()).map((m) => m.name));
    expect(logs.find((l) => l.message === 'migrated')).toMatchObject({ service: 'migrate', function_request_id: expect.stringMatching(/^req-/) });
  });

  it('the api bundle answers a signed request from the database', async () => {
    const { result } = await invoke('api', apiEvent('PUT', '/concurrency', { body: { desired: 2 } }), { DATABASE_URL: db.schemaUrl });
    expect(result.statusCode).toBe(200);
    expect(JSON.parse(result.body)).toMatchObject({ desired: 2, live: 0 });
    const [{ value }] = await db.sql<{ value: unknown }[]>`select value from leasehold_settings where key = 'desired'`;
    expect(value).toBe(2);
  });

  it('the trigger bundle starts a batch from an EventBridge event and drops an invalid one', async () => {
    const event = {
      version: '0',
      id: 'bundle-event-1',
      'detail-type': 'leasehold.start-batch',
      source: 'test',
      account: '123456789012',
      time: '2025-01-01T00:00:00Z',
      region: 'eu-west-1',
      resources: [],
      detail: { job: 'checksum', tenant: 'bundle', datasource: 'code', params: { dir: join(out, 'migrate', 'migrations') } },
    };
    const env = { DATABASE_URL: db.schemaUrl, LEASEHOLD_ALLOWED_ROOTS: out };
    const started = await invoke('trigger', event, env);
    expect(started.result).toMatchObject({ outcome: 'started', requestKey: 'event:bundle-event-1' });
    const dropped = await invoke('trigger', { ...event, id: 'bundle-event-2', detail: { job: 'nope', tenant: 'bundle', datasource: 'code' } }, env);
    expect(dropped.result).toMatchObject({ outcome: 'dropped', code: 'unknown_job' });
    expect(dropped.logs.some((l) => l.message === 'trigger event dropped' && l.level === 'WARN')).toBe(true);
    expect(dropped.logs.some((l) => l._aws?.CloudWatchMetrics?.[0]?.Namespace === 'leasehold' && l.TriggersDropped === 1)).toBe(true);
  });

  it('the worker bundle runs that batch; the scheduler bundle then finds nothing open', async () => {
    const env = { DATABASE_URL: db.schemaUrl, LEASEHOLD_ALLOWED_ROOTS: out };
    const { result } = await invoke('worker', {}, env);
    expect(result.reason).toBe('idle');
    expect(result.runs).toEqual([expect.objectContaining({ outcome: 'succeeded' })]);
    const sched = await invoke('scheduler', {}, env);
    expect(sched.result).toMatchObject({ dispatched: [], failed: [] });
  });
});
