// The Lambda entry points (functions/leasehold.ts, made by createHandlers) with their middy chains, driven with real-shaped events
// — API Gateway HTTP API v2 with the IAM authorizer's context, EventBridge bus events, EventBridge
// Scheduler firings — against the real test PostgreSQL (DATABASE_URL is a test schema). Worker
// invokes go to a local Lambda endpoint that records them; logs and EMF metrics to a sink here.
import { randomBytes, randomUUID } from 'node:crypto';
import type { APIGatewayProxyEventV2WithIAMAuthorizer, Context } from 'aws-lambda';
import middy from '@middy/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  api as apiHandler,
  migrate as migrateHandler,
  scheduler as schedulerHandler,
  trigger as triggerHandler,
  worker as workerHandler,
} from '../../functions/leasehold.js';
import { builtinJobs } from '../../src/jobs/index.js';
import { builtinUnitJobs } from '../../src/units/index.js';
import { getBatch, findBatchByKey } from '../../src/batch/index.js';
import { createLambdaContext } from '../../src/local/context.js';
import {
  ConfigError,
  httpErrorBoundary,
  invocation,
  createRuntime,
  resetRuntimeDeps,
  setLogSink,
  type SchedulerResult,
  type WorkerResult,
} from '../../src/runtime/index.js';
import { handleTrigger, type TriggerResult } from '../../src/trigger/index.js';
import { migrationFiles } from '../../src/store/index.js';
import { apiEvent, InvokeEndpoint, removeTree, tempTree, type EventOptions } from '../support/api.js';
import { testDatabase } from '../support/db.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let dir: string;
const lines: string[] = [];
const savedEnv = { ...process.env };

const ENV = {
  LEASEHOLD_WORKER_FUNCTION: 'leasehold-test-worker',
  LEASEHOLD_MAX_OPEN: '2',
  LEASEHOLD_DEADLINE_MARGIN_MS: '2000',
  LEASEHOLD_DRAIN_MS: '500',
  LEASEHOLD_WORKER_IDLE_MS: '300',
  LEASEHOLD_WORKER_POLL_MS: '50',
  LEASEHOLD_BEAT_MS: '500',
  LEASEHOLD_STALE_MS: '5000',
  LEASEHOLD_HEARTBEAT_MS: '300',
  LEASEHOLD_REBALANCE_MS: '300',
  LEASEHOLD_TTL_MS: '3000',
  LEASEHOLD_SWEEP_CUTOFF_MS: '3000',
  AWS_REGION: 'eu-west-1',
  AWS_ACCESS_KEY_ID: 'AKIDTEST',
  AWS_SECRET_ACCESS_KEY: 'test-secret',
};

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  dir = await tempTree({ 'a.txt': 'alpha', 'b.txt': 'beta', 'sub/c.txt': 'gamma' });
  Object.assign(process.env, ENV, {
    DATABASE_URL: db.schemaUrl,
    LEASEHOLD_ALLOWED_ROOTS: dir,
    AWS_ENDPOINT_URL_LAMBDA: endpoint.url,
  });
  delete process.env.LEASEHOLD_LOG;
  setLogSink((line) => lines.push(line));
});
afterAll(async () => {
  setLogSink(undefined);
  await resetRuntimeDeps();
  for (const k of Object.keys(process.env)) if (!(k in savedEnv)) delete process.env[k];
  Object.assign(process.env, savedEnv);
  await endpoint.close();
  await removeTree(dir);
});

const context = (fn: string, timeoutMs = 30_000): Context =>
  createLambdaContext({ functionName: `leasehold-test-${fn}`, timeoutMs });

/** JSON lines written since `from` (an index into `lines`). */
const logged = (from = 0) => lines.slice(from).map((l) => JSON.parse(l) as Record<string, any>);
/** EMF metric lines of `service` since `from`, merged: metric name → summed values. */
function metrics(service: string, from = 0): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of logged(from)) {
    if (!l._aws || l.service !== service) continue;
    expect(l._aws.CloudWatchMetrics[0].Namespace).toBe('leasehold');
    const dims = l._aws.CloudWatchMetrics[0].Dimensions;
    const names = (l._aws.CloudWatchMetrics[0].Metrics as { Name: string }[]).map((m) => m.Name);
    // Per-tenant metrics (QueueWaitMs) carry the tenant too; every other metric only the service.
    if (names.includes('QueueWaitMs')) {
      expect(dims).toEqual([['service', 'tenant']]);
      expect(typeof l.tenant).toBe('string');
      expect(names).toEqual(['QueueWaitMs']);
    } else expect(dims).toEqual([['service']]);
    for (const name of names) {
      const v = l[name];
      out[name] = (out[name] ?? 0) + (Array.isArray(v) ? v.reduce((a: number, b: number) => a + b, 0) : v);
    }
  }
  return out;
}

/** An HTTP API v2 request as API Gateway sends it with IAM auth: the caller's identity in the authorizer context. */
function signed(method: string, path: string, options: EventOptions = {}): APIGatewayProxyEventV2WithIAMAuthorizer {
  const e = apiEvent(method, path, options);
  e.headers = {
    ...e.headers,
    authorization:
      'AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20250101/eu-west-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc',
    'x-amz-date': '20250101T000000Z',
  };
  return {
    ...e,
    requestContext: {
      ...e.requestContext,
      authorizer: {
        iam: {
          accessKey: 'ASIAEXAMPLE',
          accountId: '123456789012',
          callerId: 'AROAEXAMPLE:alice',
          cognitoIdentity: null,
          principalOrgId: 'o-example',
          userArn: 'arn:aws:sts::123456789012:assumed-role/ops/alice',
          userId: 'AROAEXAMPLE:alice',
        },
      },
    },
  };
}

const api = async (method: string, path: string, options?: EventOptions) => {
  const r = (await apiHandler(signed(method, path, options), context('api'))) as {
    statusCode: number;
    body: string;
    headers: Record<string, string>;
  };
  return { status: r.statusCode, body: JSON.parse(r.body), headers: r.headers };
};

/** An EventBridge bus event as a rule delivers it. */
function busEvent(detail: unknown, id = randomUUID()) {
  return {
    version: '0',
    id,
    'detail-type': 'leasehold.start-batch',
    source: 'acme.billing',
    account: '123456789012',
    time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    region: 'eu-west-1',
    resources: [],
    detail,
  };
}

/** What EventBridge Scheduler delivers for a schedule declared in infra (placeholders replaced). */
function scheduledEvent(detail: unknown, scheduledTime: string, executionId = randomBytes(8).toString('hex')) {
  return {
    version: '0',
    // One firing's retries share the scheduled time and schedule ARN; an id made from the
    // execution id would differ per attempt.
    id: `schedule:nightly:${executionId}`,
    'detail-type': 'leasehold.start-batch',
    source: 'leasehold.schedule',
    time: scheduledTime,
    resources: ['arn:aws:scheduler:eu-west-1:123456789012:schedule/default/leasehold-prod-ScheduleNightly'],
    detail,
  };
}

const trigger = (event: unknown) => triggerHandler(event, context('trigger')) as Promise<TriggerResult>;

describe('api (API Gateway HTTP API v2, IAM auth)', () => {
  it('starts a batch, sends it to a worker at once, and records BatchesStarted', async () => {
    const from = lines.length;
    const r = await api('POST', '/batches', { body: { tenant: 'acme', datasource: 'files', job: 'checksum', params: { dir } } });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ created: true, total: 3, status: 'open' });
    expect(endpoint.invokes.at(-1)).toMatchObject({
      functionName: 'leasehold-test-worker',
      invocationType: 'Event',
      payload: { batchId: r.body.id },
    });
    expect(metrics('api', from)).toMatchObject({ BatchesStarted: 1 });
    const shown = await api('GET', `/batches/${r.body.id}`);
    expect(shown.status).toBe(200);
    expect(shown.body.id).toBe(r.body.id);
    // The tenant's own route shows it too; another tenant's does not.
    expect((await api('GET', `/tenants/acme/batches/${r.body.id}`)).body.id).toBe(r.body.id);
    expect((await api('GET', `/tenants/globex/batches/${r.body.id}`)).status).toBe(404);
  });

  it('answers its own errors as before (parsing and validation stay in the API handler)', async () => {
    const r = await api('POST', '/batches', { body: '{"tenant": ' });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_json');
    expect((await api('GET', '/nope')).status).toBe(404);
  });
});

describe('trigger (EventBridge)', () => {
  it('a bus event starts a batch keyed by its id; the redelivered event starts nothing new', async () => {
    const event = busEvent({ job: 'checksum', tenant: 'acme', datasource: 'bus', params: { dir } });
    const invokes = endpoint.invokes.length;
    const first = await trigger(event);
    expect(first).toMatchObject({ outcome: 'started', requestKey: `event:${event.id}`, tenant: 'acme' });
    const again = await trigger(structuredClone(event));
    expect(again).toEqual({ ...first, outcome: 'repeated' });
    const rows = await db.sql`select id from leasehold_batches where request_key = ${`event:${event.id}`}`;
    expect(rows).toHaveLength(1);
    // Dispatched to a worker once, like the API does.
    expect(endpoint.invokes.slice(invokes).map((i) => (i.payload as { batchId?: string }).batchId)).toEqual([
      (first as { batchId: string }).batchId,
    ]);
  });

  it('a schedule firing is keyed by schedule and scheduled time: a retried delivery starts nothing new, the next firing does', async () => {
    const detail = { job: 'checksum', tenant: 'ops', datasource: 'nightly', params: JSON.stringify({ dir }) };
    const firing = await trigger(scheduledEvent(detail, '2025-01-01T03:00:00Z'));
    expect(firing).toMatchObject({
      outcome: 'started',
      requestKey: 'schedule:default/leasehold-prod-ScheduleNightly@2025-01-01T03:00:00.000Z',
    });
    const retried = await trigger(scheduledEvent(detail, '2025-01-01T03:00:00Z'));
    expect(retried).toMatchObject({ outcome: 'repeated', batchId: (firing as { batchId: string }).batchId });
    const next = await trigger(scheduledEvent(detail, '2025-01-02T03:00:00Z'));
    expect(next).toMatchObject({ outcome: 'started' });
    expect((next as { batchId: string }).batchId).not.toBe((firing as { batchId: string }).batchId);
    // params given as JSON text (CronV2 event values are strings) are stored as the object.
    const b = await getBatch(db.sql, (firing as { batchId: string }).batchId);
    expect(b.params).toMatchObject({ dir });
  });

  it('a classic EventBridge scheduled rule event is keyed by rule and time', async () => {
    const r = await trigger({
      ...busEvent({ job: 'checksum', tenant: 'ops', datasource: 'rule', params: { dir } }),
      'detail-type': 'Scheduled Event',
      source: 'aws.events',
      time: '2025-03-01T00:00:00Z',
      resources: ['arn:aws:events:eu-west-1:123456789012:rule/leasehold-hourly'],
    });
    expect(r).toMatchObject({ outcome: 'started', requestKey: 'schedule:leasehold-hourly@2025-03-01T00:00:00.000Z' });
  });

  it.each([
    ['not an event', null, 'invalid_event'],
    ['no detail', { ...busEvent(undefined), detail: undefined }, 'invalid_event'],
    ['detail without tenant', busEvent({ job: 'checksum', datasource: 'd', params: {} }), 'invalid_request'],
    ['an unknown field', busEvent({ job: 'checksum', tenant: 't', datasource: 'd', param: {} }), 'invalid_request'],
    ['an unknown job', busEvent({ job: 'no-such-job', tenant: 't', datasource: 'd' }), 'unknown_job'],
    [
      'a tolerance out of range',
      busEvent({ job: 'checksum', tenant: 't', datasource: 'd', params: { dir }, toleratedFailures: { percent: 150 } }),
      'invalid_request',
    ],
    [
      'params the job refuses',
      busEvent({ job: 'checksum', tenant: 't', datasource: 'd', params: { dir: '/etc' } }),
      'invalid_params',
    ],
    [
      'params text that is not an object',
      busEvent({ job: 'checksum', tenant: 't', datasource: 'd', params: '[1]' }),
      'invalid_event',
    ],
    [
      'an unreplaced scheduler placeholder',
      {
        ...busEvent({ job: 'checksum', tenant: 't', datasource: 'd', params: { dir } }),
        id: 'schedule:x:<aws.scheduler.scheduled-time>',
      },
      'invalid_event',
    ],
  ])('%s is logged and dropped, never thrown', async (_name, event, code) => {
    const from = lines.length;
    const before = await db.sql`select count(*)::int as n from leasehold_batches`;
    const r = await trigger(event);
    expect(r).toMatchObject({ outcome: 'dropped', code });
    const after = await db.sql`select count(*)::int as n from leasehold_batches`;
    expect(after[0].n).toBe(before[0].n);
    const warning = logged(from).find((l) => l.message === 'trigger event dropped');
    expect(warning).toMatchObject({ level: 'WARN', service: 'trigger', code, function_name: 'leasehold-test-trigger' });
    expect(warning?.function_request_id).toBeTruthy();
    expect(metrics('trigger', from)).toMatchObject({ TriggersDropped: 1 });
  });

  it('a firing refused because its datasource has maxOpen open batches is deferred, never lost, and starts once when a batch of the datasource finishes', async () => {
    const detail = { job: 'checksum', tenant: 'busy', datasource: 'full', params: { dir }, toleratedFailures: { count: 1 } };
    const first = await trigger(busEvent(detail));
    expect(first.outcome).toBe('started');
    expect((await trigger(busEvent(detail))).outcome).toBe('started');
    const from = lines.length;
    const third = scheduledEvent(detail, '2025-06-01T03:00:00Z');
    const refused = await trigger(third);
    expect(refused).toMatchObject({ outcome: 'deferred', tenant: 'busy' });
    const key = (refused as { requestKey: string }).requestKey;
    expect(await findBatchByKey(db.sql, 'busy', key)).toBeUndefined();
    expect(logged(from).find((l) => l.message.startsWith('trigger event deferred'))).toMatchObject({ level: 'WARN' });
    // A redelivery while the datasource is still full is deferred again, kept once.
    expect(await trigger(structuredClone(third))).toMatchObject({ outcome: 'deferred' });
    expect((await db.sql`select count(*)::int as n from leasehold_deferred_starts where request_key = ${key}`)[0].n).toBe(1);
    // Still full: a scheduler run leaves it waiting.
    const waiting = (await schedulerHandler({}, context('scheduler'))) as SchedulerResult;
    expect(waiting.deferred).toMatchObject({ started: [], waiting: 1 });
    expect(await findBatchByKey(db.sql, 'busy', key)).toBeUndefined();
    // A batch of the datasource finishes: the next scheduler run starts the firing, once.
    await db.sql`update leasehold_batches set status = 'succeeded', finished_at = now() where id = ${(first as { batchId: string }).batchId}`;
    const run = (await schedulerHandler({}, context('scheduler'))) as SchedulerResult;
    const batch = await findBatchByKey(db.sql, 'busy', key);
    // With the tolerance the event asked for, kept while it waited.
    expect(batch).toMatchObject({
      status: 'open',
      datasource: 'full',
      job: 'checksum',
      toleratedFailures: { count: 1 },
      allowedFailures: 1,
    });
    expect(run.deferred).toEqual({ started: [batch!.id], waiting: 0, late: 0 });
    expect(((await schedulerHandler({}, context('scheduler'))) as SchedulerResult).deferred).toEqual({
      started: [],
      waiting: 0,
      late: 0,
    });
    expect(await trigger(structuredClone(third))).toMatchObject({ outcome: 'repeated', batchId: batch!.id });
    expect(
      (await db.sql`select count(*)::int as n from leasehold_batches where tenant = 'busy' and request_key = ${key}`)[0].n,
    ).toBe(1);
  });

  it('a start over a limit drops the event (413 in the API), storing nothing', async () => {
    const deps = createRuntime({ jobs: builtinJobs, unitJobs: builtinUnitJobs }).deps();
    const event = busEvent({ job: 'checksum', tenant: 'big', datasource: 'd', params: { dir } });
    const r = await handleTrigger(event, { log: silentLog, ...deps, config: { ...deps.config, maxItems: 2 } });
    expect(r).toMatchObject({ outcome: 'dropped', code: 'batch_too_large', reason: expect.stringMatching(/^item count: /) });
    expect(await findBatchByKey(db.sql, 'big', `event:${event.id}`)).toBeUndefined();
  });

  it('a store error is thrown, so EventBridge retries the event', async () => {
    const dead = db.connect({ max: 1 });
    await dead.end();
    const deps = createRuntime({ jobs: builtinJobs, unitJobs: builtinUnitJobs }).deps();
    await expect(
      handleTrigger(busEvent({ job: 'checksum', tenant: 't', datasource: 'd', params: { dir } }), {
        log: silentLog,
        ...deps,
        sql: dead,
      }),
    ).rejects.toMatchObject({
      code: 'CONNECTION_ENDED',
    });
  });
});

describe('worker and scheduler', () => {
  it('a worker invocation runs the open batches to the end, logs with its process id and records metrics', async () => {
    const from = lines.length;
    const r = (await workerHandler({}, context('worker', 25_000))) as WorkerResult;
    expect(r.reason).toBe('idle');
    expect(r.runs.length).toBeGreaterThan(0);
    const open = await db.sql`select count(*)::int as n from leasehold_batches where status = 'open'`;
    expect(open[0].n).toBe(0);
    const m = metrics('worker', from);
    const items = await db.sql`select count(*)::int as n from leasehold_items where state = 'done'`;
    expect(m.ItemsDone).toBe(items[0].n);
    expect(m.RunsStarted + (m.RunsTakenOver ?? 0)).toBe(r.runs.length);
    expect(m.BatchesSucceeded).toBe(r.runs.filter((x) => x.outcome === 'succeeded').length);
    expect(m.RebalanceMs).toBeGreaterThanOrEqual(0);
    // Each batch's first run records how long it waited since its start.
    expect(m.QueueWaitMs).toBeGreaterThanOrEqual(0);
    const returning = logged(from).find((l) => l.message === 'worker returning');
    expect(returning).toMatchObject({ service: 'worker', processId: r.processId, function_name: 'leasehold-test-worker' });
    const started = logged(from).filter((l) => l.message === 'batch started' || l.message === 'batch taken over');
    expect(started.every((l) => l.processId === r.processId && typeof l.batchId === 'string')).toBe(true);
  });

  it('a scheduler run sweeps, dispatches, and records its fleet', async () => {
    const from = lines.length;
    const r = (await schedulerHandler({}, context('scheduler'))) as { fleet: { desired: number } };
    expect(r.fleet.desired).toBeGreaterThanOrEqual(0);
    expect(logged(from).some((l) => l.message === 'scheduler run' && l.service === 'scheduler')).toBe(true);
    expect(metrics('scheduler', from)).toHaveProperty('DesiredProcesses', r.fleet.desired);
  });
});

describe('migrate', () => {
  it('applies every migration on a fresh database and provisions the IAM user; a second deploy applies nothing', async () => {
    const fresh = await testDatabase({ migrate: false });
    const user = `lh_iam_${randomBytes(4).toString('hex')}`;
    const saved = process.env.DATABASE_URL;
    process.env.DATABASE_URL = fresh.schemaUrl;
    process.env.LEASEHOLD_DB_IAM_USER = user;
    try {
      const first = (await migrateHandler({ stage: 'test' }, context('migrate'))) as {
        applied: { name: string }[];
        runtimeRole: unknown;
      };
      expect(first.applied.map((m) => m.name)).toEqual((await migrationFiles()).map((m) => m.name));
      expect(first.runtimeRole).toMatchObject({ name: user, created: true, iam: false, self: false });
      const second = (await migrateHandler({ stage: 'test' }, context('migrate'))) as {
        applied: unknown[];
        runtimeRole: unknown;
      };
      expect(second.applied).toEqual([]);
      expect(second.runtimeRole).toMatchObject({ name: user, created: false });
    } finally {
      process.env.DATABASE_URL = saved;
      delete process.env.LEASEHOLD_DB_IAM_USER;
      await fresh.sql`drop owned by ${fresh.sql(user)}`.catch(() => {});
      await fresh.close();
      await db.sql`drop role if exists ${db.sql(user)}`;
    }
  });
});

describe('middlewares', () => {
  it('anything escaping the API handler is a 500 JSON answer, logged; a bad setting stops the function naming the variable', async () => {
    const boom = middy<unknown, unknown, Error, Context>()
      .use(invocation({ service: 'api' }))
      .use(httpErrorBoundary())
      .handler(async () => {
        throw new Error('boom');
      });
    const from = lines.length;
    expect(await boom({}, context('api'))).toEqual({
      statusCode: 500,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error: { code: 'internal', message: 'internal error' } }),
    });
    expect(
      logged(from).some((l) => l.level === 'ERROR' && l.message === 'request failed' && String(l.error).includes('boom')),
    ).toBe(true);

    await resetRuntimeDeps();
    process.env.LEASEHOLD_DB_PORT = 'not-a-port';
    try {
      const from2 = lines.length;
      const error = await apiHandler(signed('GET', '/jobs'), context('api')).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(/^LEASEHOLD_DB_PORT: /);
      expect(logged(from2).find((l) => l.message === 'configuration invalid')).toMatchObject({
        level: 'ERROR',
        variable: 'LEASEHOLD_DB_PORT',
      });
      await expect(workerHandler({}, context('worker'))).rejects.toThrow(/^LEASEHOLD_DB_PORT: /);
    } finally {
      delete process.env.LEASEHOLD_DB_PORT;
      await resetRuntimeDeps();
    }
  });

  it('the deadline signal aborts at remaining time − margin', async () => {
    let aborted = 0;
    const started = Date.now();
    const h = middy<unknown, unknown, Error, Context>()
      .use(invocation({ service: 'worker', marginMs: () => 900 }))
      .handler(async (_e, ctx) => {
        const { deadline } = (ctx as Context & { leasehold: { deadline: AbortSignal } }).leasehold;
        await new Promise<void>((r) => deadline.addEventListener('abort', () => r(), { once: true }));
        aborted = Date.now() - started;
      });
    await h({}, context('worker', 1_200));
    expect(aborted).toBeGreaterThanOrEqual(250);
    expect(aborted).toBeLessThan(900);
  });
});
