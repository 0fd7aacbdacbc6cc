// Traces (docs/design.md, "Traces"; issue 41): with a tracer provider registered (the SDK's, with
// its in-memory exporter), a start under a caller's traceparent, a batch fanned out over two runs
// and items with a retry make the spans the design names, parented and linked as it says.
import { trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner, getBatch, startBatch, type ItemWork } from '../../src/batch/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { deferred, waitFor } from '../support/waits.js';
import { runOf } from './helpers.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();

beforeAll(() => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
});
afterAll(() => trace.disable());

const pool = usePools(db, 2);

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

describe('traces of a start, a fanned-out batch and its items', () => {
  it('start → batch → runs → attempts: one trace from the caller, and a retry a new trace linked to the first', async () => {
    exporter.reset();
    const N = 200;
    const items = Array.from({ length: N }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` }));
    const started = await startBatch(
      { sql: db.sql, config: { maxOpen: 10 }, jobs: { expand: async (_job, params) => ({ items, params }) } },
      {
        tenant: `traces-${process.pid}`,
        datasource: 'files',
        job: 'checksum',
        params: {},
        maxConcurrency: 2,
        traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`,
      },
    );
    expect(started.created).toBe(true);
    expect(started.batch.target).toBe(2);

    // Both runs join before any item runs, so each works some; k007 fails its first attempt.
    const joined = deferred();
    const tries = new Map<string, number>();
    const work: ItemWork = async ({ key }) => {
      await joined.promise;
      const n = (tries.get(key) ?? 0) + 1;
      tries.set(key, n);
      if (key === 'k007' && n === 1) throw new Error('flaky once');
      return n;
    };
    const runners = [0, 1].map(() => new Runner(pool(), { beatMs: 50, staleMs: 2_000, parallel: 4, backoffMs: 1 }));
    await Promise.all(
      runners.map((r) =>
        waitFor('join', async () => (await r.takeOver(() => ({ work }), started.batch.id)) && true, { everyMs: 10 }),
      ),
    );
    joined.resolve();
    const results = await Promise.all(runners.map((r) => runOf(r, started.batch.id)));
    expect(results.filter((r) => r.outcome === 'succeeded')).toHaveLength(1);
    expect(await getBatch(db.sql, started.batch.id)).toMatchObject({ status: 'succeeded' });

    const spans = exporter.getFinishedSpans();
    // The start: a producer's create, a child of the caller's span, in the caller's trace.
    const creates = spans.filter((s) => s.name === 'create checksum');
    expect(creates).toHaveLength(1);
    const create = creates[0]!;
    expect(create.kind).toBe(SpanKind.PRODUCER);
    expect(traceOf(create)).toBe(CALLER_TRACE);
    expect(parentOf(create)).toBe(CALLER_SPAN);
    expect(create.attributes).toMatchObject({
      'messaging.operation.type': 'create',
      'leasehold.batch.id': started.batch.id,
      'messaging.batch.message_count': N,
    });
    // The batch row keeps the create span's context.
    expect((await getBatch(db.sql, started.batch.id))!.traceContext).toBe(`00-${CALLER_TRACE}-${idOf(create)}-01`);

    // Two runs, each a consumer child of the create span.
    const runs = spans.filter((s) => s.name === 'run checksum');
    expect(runs).toHaveLength(2);
    for (const r of runs) {
      expect(r.kind).toBe(SpanKind.CONSUMER);
      expect(traceOf(r)).toBe(CALLER_TRACE);
      expect(parentOf(r)).toBe(idOf(create));
    }
    expect(new Set(runs.map((r) => r.attributes['leasehold.run.id'])).size).toBe(2);
    const runIds = new Set(runs.map(idOf));

    // One attempt span per attempt: N first attempts, each a child of one of the runs, in the caller's trace.
    const attempts = spans.filter((s) => s.name === 'process checksum');
    expect(attempts).toHaveLength(N + 1);
    const first = attempts.filter((s) => s.attributes['leasehold.item.attempt'] === 1);
    expect(first).toHaveLength(N);
    for (const a of first) {
      expect(traceOf(a)).toBe(CALLER_TRACE);
      expect(runIds.has(parentOf(a)!)).toBe(true);
    }
    // Both runs worked items.
    expect(new Set(first.map(parentOf)).size).toBe(2);
    const failedFirst = first.find((s) => s.attributes['leasehold.item.key'] === 'k007')!;
    expect(failedFirst.status.code).toBe(SpanStatusCode.ERROR);
    expect(failedFirst.attributes['leasehold.item.outcome']).toBe('retry');
    // Every attribute the design names for an attempt, whether given at the start or set after it.
    const runOfFirst = runs.find((r) => idOf(r) === parentOf(failedFirst))!;
    const attemptAttributes = (attempt: number, outcome: string, run: ReadableSpan) => ({
      'messaging.system': 'leasehold',
      'messaging.destination.name': 'checksum',
      'messaging.operation.type': 'process',
      'messaging.message.id': 'k007',
      'leasehold.batch.id': started.batch.id,
      'leasehold.tenant': `traces-${process.pid}`,
      'leasehold.run.id': run.attributes['leasehold.run.id'],
      'leasehold.item.key': 'k007',
      'leasehold.item.attempt': attempt,
      'leasehold.item.outcome': outcome,
    });
    expect(failedFirst.attributes).toEqual(attemptAttributes(1, 'retry', runOfFirst));

    // The retry: a new trace (no parent), linked to the batch's trace and to its run.
    const retries = attempts.filter((s) => s.attributes['leasehold.item.attempt'] === 2);
    expect(retries).toHaveLength(1);
    const retry = retries[0]!;
    expect(retry.attributes['leasehold.item.key']).toBe('k007');
    expect(retry.parentSpanContext).toBeUndefined();
    expect(traceOf(retry)).not.toBe(CALLER_TRACE);
    expect(retry.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['leasehold.link']])).toEqual([
      [CALLER_TRACE, idOf(create), 'first attempt'],
      [CALLER_TRACE, expect.toSatisfy((id: string) => runIds.has(id)), 'run'],
    ]);
    expect(retry.status.code).toBe(SpanStatusCode.UNSET);
    expect(retry.attributes['leasehold.item.outcome']).toBe('done');
    const runOfRetry = runs.find((r) => idOf(r) === retry.links[1]!.context.spanId)!;
    expect(retry.attributes).toEqual(attemptAttributes(2, 'done', runOfRetry));
  });
});
