// The span of a batched call (docs/design.md, "Traces" and "Item batching"; issue 41): the
// built-in `lambda-invoke` job with `itemsPerCall`, its invokes through the real
// `@aws-sdk/client-lambda` to the local invoke endpoint (AWS_ENDPOINT_URL_LAMBDA), with the SDK's
// in-memory exporter and a context manager. Each call is a client span `call lambda-invoke`, a
// child of its run's span in the batch's trace, linked to the attempt span of each of its items,
// with the messaging attributes of a process of N messages; a call the function fails has status
// error and `error.type`.
import { context, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBatch, Runner } from '../../src/batch/index.js';
import { defaultJobContext, JobRegistry, lambdaInvoke, type LambdaInvokeCallEvent } from '../../src/jobs/index.js';
import { createInvokeEndpoint, localLambdaEnv, type InvokeEndpoint } from '../../src/local/index.js';
import { LocalContextManager } from '../../src/local/trace-context.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();
const saved = { ...process.env };
let endpoint: InvokeEndpoint;

/** Every call the function got, in order. */
const calls: LambdaInvokeCallEvent[] = [];
const functions = {
  // Fails the first call (a function error of the whole invoke); answers every later one.
  'crash-once': async (event: unknown) => {
    const e = event as LambdaInvokeCallEvent;
    calls.push(e);
    if (calls.length === 1) throw new TypeError('crashed on the first call');
    return e.items.map((i) => ({ key: i.key, output: i.attempt }));
  },
};
const jobs = new JobRegistry([lambdaInvoke as never], defaultJobContext({ invokable: { 'crash-once': 'crash-once' } }));

beforeAll(async () => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(new LocalContextManager());
  endpoint = createInvokeEndpoint({ functions, timeoutMs: 10_000 });
  const { url } = await endpoint.start();
  Object.assign(process.env, localLambdaEnv(url), { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' });
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await endpoint?.stop({ wait: true });
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
});

const BATCH_TRACE = '7d2a3b0c5e914f6a8b1c2d3e4f5a6b7c';
const START_SPAN = '1a2b3c4d5e6f7a8b';

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

describe('the batched call span', () => {
  it('a call of 5 items: a child of the run, linked to each attempt, messaging attributes; a failed call is an error', async () => {
    exporter.reset();
    const keys = ['k0', 'k1', 'k2', 'k3', 'k4'];
    const { batch } = await createBatch(
      db.sql,
      {
        tenant: 'acme',
        datasource: 'functions',
        job: 'lambda-invoke',
        params: { functionName: 'crash-once', itemsPerCall: 5 },
        requestKey: `call-traces-${process.pid}-${Date.now()}`,
        items: keys.map((key, i) => ({ key, input: { i } })),
        traceContext: `00-${BATCH_TRACE}-${START_SPAN}-01`,
      },
      {},
    );
    const runner = new Runner(db.sql, { parallel: 4, beatMs: 50, staleMs: 2_000, backoffMs: 1 });
    try {
      expect(await runner.takeOver(() => jobs.executor(batch)!, batch.id)).toBeTruthy();
      expect(await runner.running(batch.id)).toMatchObject({ outcome: 'succeeded' });
    } finally {
      await runner.close();
    }
    // One full call of the 5 first attempts (failed), then the retries in one call or more.
    expect(calls[0]!.items.map((i) => `${i.key}/${i.attempt}`)).toEqual(keys.map((k) => `${k}/1`));
    expect(
      calls
        .slice(1)
        .flatMap((c) => c.items.map((i) => `${i.key}/${i.attempt}`))
        .sort(),
    ).toEqual(keys.map((k) => `${k}/2`));

    const spans = exporter.getFinishedSpans();
    const runs = spans.filter((s) => s.name === 'run lambda-invoke');
    expect(runs).toHaveLength(1);
    const run = runs[0]!;
    const attempts = spans.filter((s) => s.name === 'process lambda-invoke');
    const attemptOf = (key: string, n: number) =>
      attempts.find((a) => a.attributes['leasehold.item.key'] === key && a.attributes['leasehold.item.attempt'] === n)!;

    const callSpans = spans.filter((s) => s.name === 'call lambda-invoke');
    expect(callSpans).toHaveLength(calls.length);
    for (const c of callSpans) {
      expect(c.kind).toBe(SpanKind.CLIENT);
      // The run's child in the batch's trace, whichever item's work set the call off.
      expect([traceOf(c), c.parentSpanContext?.spanId]).toEqual([BATCH_TRACE, idOf(run)]);
      expect(c.attributes).toMatchObject({
        'messaging.system': 'leasehold',
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'call',
        'messaging.destination.name': 'lambda-invoke',
        'messaging.batch.message_count': c.links.length,
        'leasehold.batch.id': batch.id,
        'leasehold.tenant': 'acme',
        'leasehold.run.id': run.attributes['leasehold.run.id'],
      });
    }
    const [failed, ...later] = callSpans as [ReadableSpan, ...ReadableSpan[]];
    // The failed call: all 5 first attempts, each linked by its span; status error with the function's error.
    expect(failed.attributes['messaging.batch.message_count']).toBe(5);
    expect(
      failed.links.map((l) => [
        l.context.spanId,
        l.attributes?.['messaging.message.id'],
        l.attributes?.['leasehold.item.attempt'],
      ]),
    ).toEqual(keys.map((k) => [idOf(attemptOf(k, 1)), k, 1]));
    expect(failed.status.code).toBe(SpanStatusCode.ERROR);
    expect(failed.status.message).toContain('crashed on the first call');
    expect(failed.attributes['error.type']).toBe('LambdaFunctionError');
    expect(failed.events.map((e) => e.name)).toEqual(['exception']);
    // The retries' calls: linked to the second attempts (each a trace of its own), no error.
    expect(
      later
        .flatMap((c) => c.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['messaging.message.id']]))
        .sort((a, b) => String(a[2]).localeCompare(String(b[2]))),
    ).toEqual(keys.map((k) => [traceOf(attemptOf(k, 2)), idOf(attemptOf(k, 2)), k]));
    for (const c of later) {
      expect(c.status.code).toBe(SpanStatusCode.UNSET);
      expect(c.attributes['error.type']).toBeUndefined();
    }
  });
});
