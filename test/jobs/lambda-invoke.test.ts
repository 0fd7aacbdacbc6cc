// The built-in `lambda-invoke` job end to end, as `leasehold dev --app` runs it: an app's handlers
// (createHandlers) on the real test PostgreSQL, the API starting batches, and the worker and the
// app's own functions behind the local invoke endpoint that the real `@aws-sdk/client-lambda`
// reaches through AWS_ENDPOINT_URL_LAMBDA.
import { setTimeout as sleep } from 'node:timers/promises';
import type { APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  defineJob,
  lambdaInvoke,
  LambdaPayloadTooLargeError,
  MAX_SYNC_PAYLOAD_BYTES,
  type LambdaInvokeCallEvent,
  type LambdaInvokeCallResult,
  type LambdaInvokeEvent,
} from '../../src/jobs/index.js';
import { createHandlers, type Handlers } from '../../src/lambda.js';
import { createInvokeEndpoint, createLambdaContext, localLambdaEnv, type InvokeEndpoint } from '../../src/local/index.js';
import { ConfigError, parseInvokable, resetRuntimeDeps, setLogSink } from '../../src/runtime/index.js';
import { apiEvent } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { jobItem } from '../support/job-item.js';

/** A job whose items other batches take (`from`): keys `0..n−1`, input `{ i }`. */
const range = defineJob<{ n: number }, number>({
  name: 'range',
  description: 'items 0..n-1',
  params: z.object({ n: z.number().int().min(1).max(100) }),
  async expand(params) {
    return { items: Array.from({ length: params.n }, (_, i) => ({ key: String(i), input: { i } })) };
  },
  async run(item) {
    return (item.input as { i: number }).i;
  },
});

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let handlers: Handlers;
const saved = { ...process.env };
/** What each local function received, by function name. */
const received: Record<string, LambdaInvokeEvent[]> = {};
/** Reserved concurrency of the local functions; tests change it while batches run. */
const reserved: Record<string, number> = { narrow: 0, gate: 0 };
let flakyCalls = 0;

const record = (name: string, event: unknown) => (received[name] ??= []).push(event as LambdaInvokeEvent);
const functions = {
  echo: async (event: unknown) => {
    record('echo', event);
    const e = event as LambdaInvokeEvent;
    return { key: e.key, doubled: (e.input as { i: number }).i * 2 };
  },
  broken: async (event: unknown) => {
    record('broken', event);
    throw new TypeError('boom');
  },
  flaky: async (event: unknown) => {
    record('flaky', event);
    if (++flakyCalls === 1) throw new Error('first call fails');
    return 'ok';
  },
  narrow: async (event: unknown) => {
    record('narrow', event);
    return 'never runs';
  },
  gate: async (event: unknown) => {
    record('gate', event);
    return 'through';
  },
  huge: async (event: unknown) => {
    record('huge', event);
    return 'x'.repeat(MAX_SYNC_PAYLOAD_BYTES + 10);
  },
  empty: async () => undefined,
  // Batched invokes (itemsPerCall): one event per call, `{ items: [{ key, input, attempt }], batch }`.
  many: async (event: unknown) => {
    const e = event as LambdaInvokeCallEvent;
    (calls.many ??= []).push(e);
    return e.items.map((item): LambdaInvokeCallResult => {
      const input = item.input as { i: number; fails?: number };
      return item.attempt <= (input.fails ?? 0)
        ? { key: item.key, error: { errorType: 'Refused', errorMessage: `attempt ${item.attempt} of ${item.key}` } }
        : { key: item.key, output: { doubled: input.i * 2, attempt: item.attempt } };
    });
  },
  // Throws on the first call of each batch: a function error of the whole invoke.
  'many-crash': async (event: unknown) => {
    const e = event as LambdaInvokeCallEvent;
    const mine = ((calls['many-crash'] ??= []).push(e), calls['many-crash'].filter((c) => c.batch.id === e.batch.id));
    if (mine.length === 1) throw new Error('crashed on the first call');
    return e.items.map((item) => ({ key: item.key, output: item.attempt }));
  },
  // Answers wrongly: leaves "missing" out, "twice" twice, "neither" with no output or error, and a key not asked for.
  'many-bad': async (event: unknown) => {
    const e = event as LambdaInvokeCallEvent;
    return [
      ...e.items.flatMap((i) =>
        i.key === 'missing'
          ? []
          : i.key === 'twice'
            ? [
                { key: i.key, output: 1 },
                { key: i.key, output: 2 },
              ]
            : i.key === 'neither'
              ? [{ key: i.key }]
              : i.key === 'gone'
                ? [{ key: i.key, error: 'no such record', permanent: true }]
                : [{ key: i.key, output: 'fine' }],
      ),
      { key: 'stranger', output: 3 },
    ];
  },
  // Answers the one-item shape (an object) to a batched invoke.
  'many-object': async () => ({ ok: true }),
  // With params `callback`: an item whose input says `wait` (on its first attempt) answers
  // "waiting" with its token, handed out here (`tokens`); the others answer at once.
  approve: async (event: unknown) => {
    const e = event as LambdaInvokeEvent;
    record('approve', event);
    if ((e.input as { wait?: boolean }).wait && e.attempt === 1) {
      tokens.set(e.key, e.callback!.token);
      return { waiting: e.callback!.token };
    }
    return { plain: e.key, attempt: e.attempt };
  },
  'approve-many': async (event: unknown) => {
    const e = event as LambdaInvokeCallEvent;
    (calls['approve-many'] ??= []).push(e);
    return e.items.map((i): LambdaInvokeCallResult => {
      if ((i.input as { wait?: boolean }).wait && i.attempt === 1) {
        tokens.set(i.key, i.callback!.token);
        return { key: i.key, waiting: i.callback!.token };
      }
      return { key: i.key, output: { plain: i.key, attempt: i.attempt } };
    });
  },
};
/** Callback tokens the `approve` functions handed out, by item key. */
const tokens = new Map<string, string>();
/** Every batched event each function received, by function name. */
const calls: Record<string, LambdaInvokeCallEvent[]> = {};
/** Invocations the local endpoint began, by function name. */
const invocations: Record<string, number> = {};

beforeAll(async () => {
  handlers = createHandlers({ jobs: [lambdaInvoke, range] });
  endpoint = createInvokeEndpoint({
    functions: { ...functions, 'leasehold-worker': handlers.worker },
    reservedConcurrency: reserved,
    timeoutMs: 20_000,
    onInvoke: (info) => (invocations[info.functionName] = (invocations[info.functionName] ?? 0) + 1),
  });
  const { url } = await endpoint.start();
  Object.assign(process.env, localLambdaEnv(url), {
    DATABASE_URL: db.schemaUrl,
    LEASEHOLD_WORKER_FUNCTION: 'leasehold-worker',
    LEASEHOLD_INVOKABLE: Object.keys(functions).join(','),
    LEASEHOLD_BACKOFF_MS: '50',
    LEASEHOLD_ATTEMPTS: '3',
    // Throttles are Retry-After waits: two that use no attempt, then each counts.
    LEASEHOLD_MAX_RETRY_AFTER: '2',
    LEASEHOLD_DEADLINE_MARGIN_MS: '3000',
    LEASEHOLD_DRAIN_MS: '1000',
    LEASEHOLD_WORKER_IDLE_MS: '300',
    LEASEHOLD_WORKER_POLL_MS: '50',
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
  });
  setLogSink(() => {});
});

afterAll(async () => {
  await endpoint.stop({ wait: true });
  setLogSink(undefined);
  await resetRuntimeDeps();
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
});

const context = (fn: string): Context => createLambdaContext({ functionName: fn, timeoutMs: 20_000 });

async function api(method: string, path: string, body?: unknown) {
  const raw = (await handlers.api(
    apiEvent(method, path, body === undefined ? {} : { body }),
    context('api'),
  )) as APIGatewayProxyStructuredResultV2;
  return { status: raw.statusCode ?? 200, body: JSON.parse(raw.body ?? 'null') };
}

/** Start a batch through the API (it is sent to a local worker at once) and wait for it to finish. */
async function run(params: unknown, extra: Record<string, unknown> = {}) {
  const started = await api('POST', '/batches', {
    tenant: 'acme',
    datasource: 'functions',
    job: 'lambda-invoke',
    params,
    ...extra,
  });
  expect(started.status, JSON.stringify(started.body)).toBe(201);
  const id = started.body.id as string;
  return { id, ...(await finished(id)) };
}

async function finished(id: string) {
  const until = Date.now() + 20_000;
  for (;;) {
    const [b] = await db.sql<{ status: string }[]>`select status from leasehold_batches where id = ${id}`;
    if (b!.status !== 'open') break;
    if (Date.now() > until) throw new Error(`batch ${id} still open`);
    await sleep(50);
  }
  const items = await db.sql<{ key: string; state: string; attempts: number; output: unknown; error: string | null }[]>`
    select key, state, attempts, output, error from leasehold_items where batch_id = ${id} order by key`;
  const [batch] = await db.sql<
    { status: string; params: unknown }[]
  >`select status, params from leasehold_batches where id = ${id}`;
  return { status: batch!.status, params: batch!.params, items };
}

describe('lambda-invoke', () => {
  it('invokes the function once per item with { key, input, batch, attempt } and stores its parsed response', async () => {
    const r = await run({
      functionName: 'echo',
      items: [
        { key: 'a', input: { i: 1 } },
        { key: 'b', input: { i: 21 } },
      ],
    });
    expect(r.status).toBe('succeeded');
    expect(r.items).toEqual([
      { key: 'a', state: 'done', attempts: 1, output: { key: 'a', doubled: 2 }, error: null },
      { key: 'b', state: 'done', attempts: 1, output: { key: 'b', doubled: 42 }, error: null },
    ]);
    const events = received.echo!.filter((e) => e.batch.id === r.id).sort((x, y) => x.key.localeCompare(y.key));
    expect(events).toEqual([
      { key: 'a', input: { i: 1 }, batch: { id: r.id, tenant: 'acme' }, attempt: 1 },
      { key: 'b', input: { i: 21 }, batch: { id: r.id, tenant: 'acme' }, attempt: 1 },
    ]);
    // The items live as items: the stored params only name the function.
    expect(r.params).toEqual({ functionName: 'echo' });
  });

  it("takes its items from another job's expansion", async () => {
    const r = await run({ functionName: 'echo', from: { job: 'range', params: { n: 3 } } });
    expect(r.status).toBe('succeeded');
    expect(r.items.map((i) => [i.key, i.output])).toEqual([
      ['0', { key: '0', doubled: 0 }],
      ['1', { key: '1', doubled: 2 }],
      ['2', { key: '2', doubled: 4 }],
    ]);
    expect(r.params).toEqual({ functionName: 'echo', from: { job: 'range', params: { n: 3 } } });
  });

  it('a function with no response gives the output null', async () => {
    const r = await run({ functionName: 'empty', items: [{ key: 'x' }] });
    expect(r.items).toEqual([{ key: 'x', state: 'done', attempts: 1, output: null, error: null }]);
  });

  it('a function error fails the attempt, is retried per attempts, then the item is failed', async () => {
    const r = await run({ functionName: 'broken', items: [{ key: 'only', input: 1 }] });
    expect(r.status).toBe('failed');
    expect(r.items).toEqual([
      {
        key: 'only',
        state: 'failed',
        attempts: 3,
        output: null,
        error: expect.stringContaining('function broken failed: TypeError: boom'),
      },
    ]);
    expect(received.broken!.filter((e) => e.batch.id === r.id).map((e) => e.attempt)).toEqual([1, 2, 3]);
  });

  it('a function error followed by a success ends done on the second attempt', async () => {
    const r = await run({ functionName: 'flaky', items: [{ key: 'k' }] });
    expect(r.items).toEqual([{ key: 'k', state: 'done', attempts: 2, output: 'ok', error: null }]);
  });

  it('a throttle is a wait that uses no attempt, up to maxRetryAfter waits: throttled every time, the item is failed after its attempts without the function ever running', async () => {
    const r = await run({ functionName: 'narrow', items: [{ key: 'n' }] });
    // Two waits (1 s each, Lambda naming no retryAfterSeconds) used no attempt; the next three
    // throttles were its three attempts.
    const [stored] = await db.sql<{ waits: number }[]>`select waits from leasehold_items where batch_id = ${r.id}`;
    expect(stored!.waits).toBe(2);
    expect(r.items).toEqual([
      {
        key: 'n',
        state: 'failed',
        attempts: 3,
        output: null,
        error: expect.stringMatching(/function narrow was throttled \(.*Rate Exceeded/),
      },
    ]);
    expect(received.narrow ?? []).toEqual([]);
  });

  it('a throttle is retried: once the function has concurrency again, the item is done', async () => {
    endpoint.setReservedConcurrency('gate', 0);
    const started = await api('POST', '/batches', {
      tenant: 'acme',
      datasource: 'gate',
      job: 'lambda-invoke',
      params: { functionName: 'gate', items: [{ key: 'g' }] },
    });
    expect(started.status).toBe(201);
    const until = Date.now() + 10_000;
    for (;;) {
      const [item] = await db.sql<{ attempts: number; error: string | null }[]>`
        select attempts, error from leasehold_items where batch_id = ${started.body.id}`;
      if (item!.error?.includes('throttled')) break;
      if (Date.now() > until) throw new Error('no throttled attempt seen');
      await sleep(5);
    }
    endpoint.setReservedConcurrency('gate', 5);
    const r = await finished(started.body.id);
    expect(r.items).toEqual([{ key: 'g', state: 'done', attempts: expect.any(Number), output: 'through', error: null }]);
    // The throttled tries were waits (no attempt) or, past two waits, attempts.
    const [stored] = await db.sql<{ waits: number }[]>`select waits from leasehold_items where batch_id = ${started.body.id}`;
    expect(stored!.waits + r.items[0]!.attempts).toBeGreaterThanOrEqual(2);
    expect(received.gate).toHaveLength(1);
  });

  it('a response over 6 MB fails the item at once with an error that says so', async () => {
    const r = await run({ functionName: 'huge', items: [{ key: 'big' }] });
    expect(r.items).toEqual([
      {
        key: 'big',
        state: 'failed',
        attempts: 1,
        output: null,
        error: expect.stringMatching(
          /function huge answered item "big" with more than Lambda's 6291456 bytes \(6 MB\).*return a reference/,
        ),
      },
    ]);
  });

  it('a request payload over 6 MB fails at once, before anything is sent', async () => {
    const before = endpoint.completed + endpoint.failed;
    const attempt = lambdaInvoke.run(
      jobItem(
        'big',
        { functionName: 'echo' },
        { input: 'x'.repeat(MAX_SYNC_PAYLOAD_BYTES), tenant: 'acme', batchId: '00000000-0000-0000-0000-000000000000' },
      ),
      { allowedRoots: [], maxItems: 10, invokable: { echo: 'echo' } },
    );
    await expect(attempt).rejects.toBeInstanceOf(LambdaPayloadTooLargeError);
    await expect(attempt).rejects.toMatchObject({
      permanent: true,
      message: expect.stringMatching(/item "big" is \d+ bytes; Lambda takes at most 6291456 bytes \(6 MB\)/),
    });
    expect(endpoint.completed + endpoint.failed).toBe(before);
  });

  it('a function not in the invokable list is refused at start with 400, and nothing is started', async () => {
    const refused = await api('POST', '/batches', {
      tenant: 'acme',
      datasource: 'refused',
      job: 'lambda-invoke',
      params: { functionName: 'delete-everything', items: [{ key: 'a' }] },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('invalid_params');
    expect(refused.body.error.message).toMatch(
      /params\.functionName: "delete-everything" is not an invokable function; invokable here: echo, broken/,
    );
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches where datasource = 'refused'`;
    expect(n).toBe(0);
  });

  it('refuses params that name no items, both kinds of items, or another job that cannot expand', async () => {
    const start = (params: unknown) =>
      api('POST', '/batches', { tenant: 'acme', datasource: 'bad', job: 'lambda-invoke', params });
    const cases: [unknown, RegExp][] = [
      [{ functionName: 'echo' }, /^params: give either "items" or "from"/],
      [{ functionName: 'echo', items: [{ key: 'a' }], from: { job: 'range', params: { n: 1 } } }, /^params: give either/],
      [{ functionName: 'echo', items: [{ key: 'a' }, { key: 'a' }] }, /^params\.items\.1\.key: "a" is given twice/],
      [{ functionName: 'echo', from: { job: 'nope' } }, /^params\.from\.job: unknown job "nope"/],
      [{ functionName: 'echo', from: { job: 'range', params: { n: 0 } } }, /^params\.from\.params\.n: /],
    ];
    for (const [params, message] of cases) {
      const r = await start(params);
      expect(r.status, JSON.stringify(params)).toBe(400);
      expect(r.body.error.message, JSON.stringify(params)).toMatch(message);
    }
  });
});

describe('lambda-invoke with itemsPerCall', () => {
  const items = (n: number, input: (i: number) => object = (i) => ({ i })) =>
    Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(4, '0')}`, input: input(i) }));

  it('1,000 items with itemsPerCall 100 make 10 invocations, each of 100 items, with every result stored per item', async () => {
    const before = invocations.many ?? 0;
    // One run (the default maxConcurrency): its claims come in whole calls' worth, so every call is full.
    const r = await run({ functionName: 'many', itemsPerCall: 100, items: items(1_000) }, { maxConcurrency: 1 });
    expect(r.status).toBe('succeeded');
    expect((invocations.many ?? 0) - before).toBe(10);
    const mine = calls.many!.filter((c) => c.batch.id === r.id);
    expect(mine.map((c) => c.items.length)).toEqual(Array(10).fill(100));
    expect(mine[0]!.batch).toEqual({ id: r.id, tenant: 'acme' });
    expect(mine[0]!.items[0]).toEqual({
      key: expect.stringMatching(/^k\d{4}$/),
      input: { i: expect.any(Number) },
      attempt: expect.any(Number),
    });
    expect(new Set(mine.flatMap((c) => c.items.map((i) => i.key))).size).toBe(1_000);
    expect(r.items).toHaveLength(1_000);
    // Each item was invoked once (10 invocations of 100 distinct keys), at the attempt it stored:
    // 1, unless a claim's answer was lost under load (its items are claimed again at attempt 2,
    // never having been invoked; seen once on PostgreSQL 15 in CI).
    for (const [i, item] of r.items.entries()) {
      expect(item).toEqual({
        key: item.key,
        state: 'done',
        attempts: item.attempts,
        output: { doubled: i * 2, attempt: item.attempts },
        error: null,
      });
      expect(item.attempts).toBeLessThanOrEqual(2);
    }
    expect(r.params).toEqual({ functionName: 'many', itemsPerCall: 100 });
  });

  it('an item the function fails in its answer is retried alone, on its own attempts; the others of its call are done once', async () => {
    const r = await run({
      functionName: 'many',
      itemsPerCall: 10,
      items: items(10, (i) => ({ i, ...(i === 3 ? { fails: 1 } : i === 7 ? { fails: 5 } : {}) })),
    });
    expect(r.status).toBe('failed');
    const mine = calls.many!.filter((c) => c.batch.id === r.id);
    expect(mine[0]!.items).toHaveLength(10);
    expect(
      mine
        .slice(1)
        .flatMap((c) => c.items.map((i) => `${i.key}/${i.attempt}`))
        .sort(),
    ).toEqual(['k0003/2', 'k0007/2', 'k0007/3']);
    const byKey = Object.fromEntries(r.items.map((i) => [i.key, i]));
    expect(byKey.k0003).toMatchObject({ state: 'done', attempts: 2, output: { doubled: 6, attempt: 2 } });
    expect(byKey.k0007).toMatchObject({
      state: 'failed',
      attempts: 3,
      error: 'function many failed item "k0007": Refused: attempt 3 of k0007',
    });
    expect(r.items.filter((i) => i.attempts === 1 && i.state === 'done')).toHaveLength(8);
  });

  it('a function error of the whole invoke is a failed attempt of each of its items', async () => {
    const r = await run({ functionName: 'many-crash', itemsPerCall: 5, items: items(5) });
    expect(r.status).toBe('succeeded');
    expect(r.items.map((i) => [i.key, i.state, i.attempts, i.output])).toEqual(items(5).map((i) => [i.key, 'done', 2, 2]));
    // The second attempts come back at their own jittered times, in one call or more.
    const [first, ...later] = calls['many-crash']!.filter((c) => c.batch.id === r.id);
    expect(first!.items.map((i) => i.attempt)).toEqual([1, 1, 1, 1, 1]);
    expect(later.flatMap((c) => c.items.map((i) => `${i.key}/${i.attempt}`)).sort()).toEqual(items(5).map((i) => `${i.key}/2`));
  });

  it('bad answers fail the items they get wrong, saying how', async () => {
    const r = await run({
      functionName: 'many-bad',
      itemsPerCall: 10,
      items: ['ok', 'missing', 'twice', 'neither', 'gone'].map((key) => ({ key })),
    });
    const byKey = Object.fromEntries(r.items.map((i) => [i.key, i]));
    expect(byKey.ok).toMatchObject({ state: 'done', attempts: 1, output: 'fine' });
    // Malformed entries and a permanent error fail at once; a left-out item is retried per attempts.
    expect(byKey.neither).toMatchObject({
      state: 'failed',
      attempts: 1,
      error: 'function many-bad answered item "neither" with neither "output" nor "error"',
    });
    expect(byKey.gone).toMatchObject({
      state: 'failed',
      attempts: 1,
      error: 'function many-bad failed item "gone": no such record',
    });
    expect(byKey.twice).toMatchObject({
      state: 'failed',
      attempts: 3,
      error: expect.stringMatching(/answered item "twice" more than once$/),
    });
    expect(byKey.missing).toMatchObject({
      state: 'failed',
      attempts: 3,
      error: expect.stringMatching(/answered no result for item "missing"; its results held 1 not in the call \("stranger"\)$/),
    });
  });

  it('an answer that is not an array fails every item of the invoke at once, naming the shape it wants', async () => {
    const r = await run({ functionName: 'many-object', itemsPerCall: 10, items: items(3) });
    expect(r.status).toBe('failed');
    for (const i of r.items) {
      expect(i).toMatchObject({
        state: 'failed',
        attempts: 1,
        error:
          'function many-object answered a call of 3 items with {"ok":true}, not an array of { key, output } or { key, error } (docs/jobs.md, "lambda-invoke")',
      });
    }
  });

  it('refuses itemsPerCall and bytesPerCall out of range, and bytesPerCall without itemsPerCall', async () => {
    const start = (params: object) =>
      api('POST', '/batches', {
        tenant: 'acme',
        datasource: 'bad',
        job: 'lambda-invoke',
        params: { functionName: 'many', items: [{ key: 'a' }], ...params },
      });
    for (const [params, message] of [
      [{ itemsPerCall: 0 }, /^params\.itemsPerCall: /],
      [{ itemsPerCall: 1_001 }, /^params\.itemsPerCall: /],
      [{ itemsPerCall: 10, bytesPerCall: 5_242_881 }, /^params\.bytesPerCall: /],
      [{ bytesPerCall: 1_000 }, /^params\.bytesPerCall: applies only with "itemsPerCall"/],
    ] as [object, RegExp][]) {
      const r = await start(params);
      expect(r.status, JSON.stringify(params)).toBe(400);
      expect(r.body.error.message, JSON.stringify(params)).toMatch(message);
    }
  });
});

/** Start a batch through the API and wait until only waiting items are left (the batch parked). */
async function startParked(params: unknown, waiting: number) {
  const started = await api('POST', '/batches', { tenant: 'acme', datasource: 'functions', job: 'lambda-invoke', params });
  expect(started.status, JSON.stringify(started.body)).toBe(201);
  const id = started.body.id as string;
  const until = Date.now() + 20_000;
  for (;;) {
    const [b] = await db.sql<{ target: number; live_runs: number; waiting: number; left: number }[]>`
      select b.target, b.live_runs,
        (select count(*) from leasehold_items where batch_id = b.id and state = 'waiting')::int as waiting,
        (select count(*) from leasehold_items where batch_id = b.id and state in ('pending', 'running'))::int as left
      from leasehold_batches b where b.id = ${id}`;
    if (b!.target === 0 && b!.live_runs === 0 && b!.waiting === waiting && b!.left === 0) return id;
    if (Date.now() > until) throw new Error(`batch ${id} did not park: ${JSON.stringify(b)}`);
    await sleep(50);
  }
}

describe('lambda-invoke with callback', () => {
  it('a function that answers waiting parks its item until its callback is completed; the result is its output', async () => {
    const id = await startParked(
      {
        functionName: 'approve',
        callback: { timeoutMs: 60_000 },
        items: [
          { key: 'a', input: { wait: true } },
          { key: 'b', input: {} },
        ],
      },
      1,
    );
    // The item that answered at once withdrew its callback: only a's wait is left.
    const waits = await db.sql<{ key: string }[]>`select key from leasehold_waits where batch_id = ${id}`;
    expect(waits.map((w) => w.key)).toEqual(['a']);
    const events = received.approve!.filter((e) => e.batch.id === id);
    expect(events.every((e) => typeof e.callback?.token === 'string')).toBe(true);
    // A result no JSON column stores is the caller's to fix: 400, nothing stored (never a 500).
    for (const result of [{ x: 'a\u0000b' }, '\ud800']) {
      const refused = await api('POST', `/callbacks/${tokens.get('a')}/succeed`, { result });
      expect(refused.status, JSON.stringify(refused.body)).toBe(400);
      expect(refused.body.error).toMatchObject({
        code: 'invalid_request',
        message: expect.stringMatching(/^result: cannot be stored: it contains a (NUL character|lone surrogate)/),
      });
    }
    const done = await api('POST', `/callbacks/${tokens.get('a')}/succeed`, { result: { approved: true } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    const r = await finished(id);
    expect(r.status).toBe('succeeded');
    expect(r.items.map((i) => [i.key, i.state, i.attempts, i.output])).toEqual([
      ['a', 'done', 1, { approved: true }],
      ['b', 'done', 1, { plain: 'b', attempt: 1 }],
    ]);
    // The function ran once per item: the completion's result ended a, not a second invoke.
    expect(events).toHaveLength(2);
    expect(r.params).toEqual({ functionName: 'approve', callback: { timeoutMs: 60_000 } });
  });

  it('batched: items answered { key, waiting } park; a failed callback fails the attempt and the retry runs', async () => {
    const id = await startParked(
      {
        functionName: 'approve-many',
        itemsPerCall: 10,
        callback: { timeoutMs: 60_000 },
        items: [
          { key: 'x', input: { wait: true } },
          { key: 'y', input: {} },
          { key: 'z', input: { wait: true } },
        ],
      },
      2,
    );
    const waits = await db.sql<{ key: string }[]>`select key from leasehold_waits where batch_id = ${id} order by key`;
    expect(waits.map((w) => w.key)).toEqual(['x', 'z']);
    expect((await api('POST', `/callbacks/${tokens.get('x')}/succeed`, { result: 'yes' })).status).toBe(200);
    expect((await api('POST', `/callbacks/${tokens.get('z')}/fail`, { error: 'refused' })).status).toBe(200);
    const r = await finished(id);
    expect(r.status).toBe('succeeded');
    expect(r.items.map((i) => [i.key, i.state, i.attempts, i.output])).toEqual([
      ['x', 'done', 1, 'yes'],
      ['y', 'done', 1, { plain: 'y', attempt: 1 }],
      // Its callback failed attempt 1; attempt 2 invoked the function again, which answered.
      ['z', 'done', 2, { plain: 'z', attempt: 2 }],
    ]);
    const mine = calls['approve-many']!.filter((c) => c.batch.id === id);
    expect(mine.flatMap((c) => c.items.map((i) => `${i.key}@${i.attempt}`)).sort()).toEqual(['x@1', 'y@1', 'z@1', 'z@2']);
  });

  it('refuses a callback timeout out of range, and a heartbeat timeout above it', async () => {
    for (const callback of [{ timeoutMs: 0 }, { timeoutMs: 1_000, heartbeatTimeoutMs: 2_000 }, { timeoutMs: 1_000, other: 1 }]) {
      const r = await api('POST', '/batches', {
        tenant: 'acme',
        datasource: 'functions',
        job: 'lambda-invoke',
        params: { functionName: 'approve', callback, items: [{ key: 'a' }] },
      });
      expect(r.status, JSON.stringify(callback)).toBe(400);
    }
  });
});

describe('LEASEHOLD_INVOKABLE', () => {
  it('reads names, ARNs and name=target entries', () => {
    expect(
      parseInvokable(
        ' score=arn:aws:lambda:eu-west-1:123456789012:function:app-prod-Score-x1 , legacy-report,arn:aws:lambda:us-east-1:123456789012:function:resize:live',
      ),
    ).toEqual({
      score: 'arn:aws:lambda:eu-west-1:123456789012:function:app-prod-Score-x1',
      'legacy-report': 'legacy-report',
      resize: 'arn:aws:lambda:us-east-1:123456789012:function:resize:live',
    });
    expect(parseInvokable('')).toEqual({});
  });

  it('refuses what is not a function, and a name given twice', () => {
    expect(() => parseInvokable('a=*')).toThrow(ConfigError);
    expect(() => parseInvokable('arn:aws:lambda:us-east-1:123456789012:function:*')).toThrow(/not a Lambda function name or ARN/);
    expect(() => parseInvokable('a=x,a=y')).toThrow(/"a" is listed twice/);
    expect(() => parseInvokable('bad name=x')).toThrow(/not a function name/);
  });
});
