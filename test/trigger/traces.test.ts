// Traces through EventBridge and chains (docs/design.md, "Traces"; issue 41): with the SDK's
// tracer provider and its in-memory exporter, a start-batch event carrying a W3C traceparent in
// its detail starts a batch in the sender's trace; its runs and first attempts follow, a retry
// is a new trace linked to it; the Batch Finished event carries the batch's traceparent (and
// PutEvents its X-Ray header), and the batch a chain rule starts from that event continues it.
import { trace, SpanKind } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchEvents, getBatch, Runner, type BatchExpander, type ItemWork } from '../../src/batch/index.js';
import { EventBridgePublisher } from '../../src/runtime/events.js';
import { handleTrigger, parseChainRules, startDeferred, type TriggerDeps } from '../../src/trigger/index.js';
import { silentLog } from '../../src/log.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();

beforeAll(() => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
});
afterAll(() => trace.disable());

const pools = usePools(db);

const SENDER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const SENDER_SPAN = 'b7ad6b7169203331';

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

const jobs: BatchExpander = {
  expand: async (job, params) => ({
    items: Array.from({ length: job === 'extract' ? 6 : 3 }, (_, i) => ({ key: `${job}-${i}`, input: i })),
    params,
  }),
};

/** Runs batch `id` to its end in a runner of its own; `extract-2` fails its first attempt. */
async function runToEnd(id: string): Promise<void> {
  const pool = pools();
  const tries = new Map<string, number>();
  const work: ItemWork = async ({ key }) => {
    const n = (tries.get(key) ?? 0) + 1;
    tries.set(key, n);
    if (key === 'extract-2' && n === 1) throw new Error('flaky once');
    return n;
  };
  const runner = new Runner(pool, { beatMs: 50, staleMs: 2_000, parallel: 2, backoffMs: 1 });
  await waitFor('join', async () => (await runner.takeOver(() => ({ work }), id)) && true, { everyMs: 10 });
  expect(await runner.running(id)).toMatchObject({ outcome: 'succeeded' });
  await runner.close();
}

describe('traces through EventBridge and chains', () => {
  it('event traceparent → batch → runs → attempts; Batch Finished carries it; the chained batch continues it', async () => {
    exporter.reset();
    const tenant = `trace-eb-${process.pid}`;
    const rules = parseChainRules([{ name: 'then-load', after: { job: 'extract' }, job: 'load' }]);
    const deps: TriggerDeps = {
      sql: db.sql,
      jobs,
      log: silentLog,
      rules,
      config: {
        maxOpen: 10,
        batchConcurrency: 1,
        maxItems: 1_000,
        maxInputBytes: 65_536,
        maxTotalBytes: 1_000_000,
        itemTimeoutLimitMs: 900_000,
      },
    };
    const started = await handleTrigger(
      {
        id: `ev-${process.pid}`,
        'detail-type': 'leasehold.start-batch',
        source: 'app',
        time: new Date().toISOString(),
        resources: [],
        detail: { tenant, datasource: 'd', job: 'extract', traceparent: `00-${SENDER_TRACE}-${SENDER_SPAN}-01` },
      },
      deps,
    );
    expect(started).toMatchObject({ outcome: 'started' });
    const batchId = (started as { batchId: string }).batchId;
    await runToEnd(batchId);

    const spans = () => exporter.getFinishedSpans();
    const create = spans().find((s) => s.name === 'create extract')!;
    expect(create.kind).toBe(SpanKind.PRODUCER);
    expect(traceOf(create)).toBe(SENDER_TRACE);
    expect(parentOf(create)).toBe(SENDER_SPAN);
    const batch = (await getBatch(db.sql, batchId))!;
    const batchTraceparent = `00-${SENDER_TRACE}-${idOf(create)}-01`;
    expect(batch.traceContext).toBe(batchTraceparent);
    const runs = spans().filter((s) => s.name === 'run extract');
    expect(runs.length).toBeGreaterThanOrEqual(1);
    for (const r of runs) expect([traceOf(r), parentOf(r)]).toEqual([SENDER_TRACE, idOf(create)]);
    const runIds = new Set(runs.map(idOf));
    const attempts = spans().filter((s) => s.name === 'process extract');
    const first = attempts.filter((s) => s.attributes['leasehold.item.attempt'] === 1);
    expect(first).toHaveLength(6);
    for (const a of first) {
      expect(traceOf(a)).toBe(SENDER_TRACE);
      expect(runIds.has(parentOf(a)!)).toBe(true);
    }
    // The retry: a trace of its own, linked to the sender's trace (the batch's span) and its run.
    const retry = attempts.find((s) => s.attributes['leasehold.item.attempt'] === 2)!;
    expect(retry.attributes['leasehold.item.key']).toBe('extract-2');
    expect(retry.parentSpanContext).toBeUndefined();
    expect(traceOf(retry)).not.toBe(SENDER_TRACE);
    expect(retry.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([
      [SENDER_TRACE, idOf(create)],
      [SENDER_TRACE, expect.toSatisfy((id: string) => runIds.has(id))],
    ]);

    // The Batch Finished event carries the batch's traceparent, and its PutEvents entry the X-Ray header of it.
    const [row] = await batchEvents(db.sql, batchId);
    expect(row!.detail.traceparent).toBe(batchTraceparent);
    const puts: { Entries?: { TraceHeader?: string }[] }[] = [];
    const client = {
      send: async (cmd: { input: (typeof puts)[number] }) => {
        puts.push(cmd.input);
        return { Entries: cmd.input.Entries!.map(() => ({ EventId: 'e' })) };
      },
    } as unknown as EventBridgeClient;
    expect(await new EventBridgePublisher('bus', client).put([row!.detail])).toEqual([undefined]);
    expect(puts[0]!.Entries![0]!.TraceHeader).toBe(
      `Root=1-${SENDER_TRACE.slice(0, 8)}-${SENDER_TRACE.slice(8)};Parent=${idOf(create)};Sampled=1`,
    );
    const send = spans().find((s) => s.name === 'send Batch Finished')!;
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(send.attributes).toMatchObject({ 'messaging.system': 'aws_eventbridge', 'messaging.destination.name': 'bus' });
    expect(send.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['leasehold.batch.id']])).toEqual([
      [SENDER_TRACE, idOf(create), batchId],
    ]);

    // The event, as the bus delivers it to the trigger: the chained batch continues the trace.
    const chained = await handleTrigger(
      {
        id: 'bus-delivery',
        'detail-type': 'Batch Finished',
        source: 'leasehold',
        time: row!.detail.finishedAt,
        detail: row!.detail,
      },
      deps,
    );
    expect(chained).toMatchObject({ outcome: 'chained', starts: [{ rule: 'then-load', outcome: 'started' }] });
    const childId = (chained as { starts: { batchId: string }[] }).starts[0]!.batchId;
    await runToEnd(childId);
    const childCreate = spans().find((s) => s.name === 'create load')!;
    expect([traceOf(childCreate), parentOf(childCreate)]).toEqual([SENDER_TRACE, idOf(create)]);
    expect(childCreate.attributes['leasehold.batch.id']).toBe(childId);
    expect((await getBatch(db.sql, childId))!.traceContext).toBe(`00-${SENDER_TRACE}-${idOf(childCreate)}-01`);
    const childRuns = spans().filter((s) => s.name === 'run load');
    expect(childRuns.length).toBeGreaterThanOrEqual(1);
    for (const r of childRuns) expect([traceOf(r), parentOf(r)]).toEqual([SENDER_TRACE, idOf(childCreate)]);
    const childRunIds = new Set(childRuns.map(idOf));
    const childAttempts = spans().filter((s) => s.name === 'process load');
    expect(childAttempts).toHaveLength(3);
    for (const a of childAttempts) expect(childRunIds.has(parentOf(a)!)).toBe(true);
    // And the chained batch's own event carries its own context, for the next link of the chain.
    const [childEvent] = await batchEvents(db.sql, childId);
    expect(childEvent!.detail.traceparent).toBe(`00-${SENDER_TRACE}-${idOf(childCreate)}-01`);
  });

  it('an event without a traceparent, or with one that does not parse, starts a batch of a new trace', async () => {
    exporter.reset();
    const tenant = `trace-eb2-${process.pid}`;
    const deps: TriggerDeps = {
      sql: db.sql,
      jobs,
      log: silentLog,
      config: {
        maxOpen: 10,
        batchConcurrency: 1,
        maxItems: 1_000,
        maxInputBytes: 65_536,
        maxTotalBytes: 1_000_000,
        itemTimeoutLimitMs: 900_000,
      },
    };
    for (const [i, traceparent] of [undefined, 'not-a-traceparent'].entries()) {
      const detail = { tenant, datasource: 'd', job: 'load', ...(traceparent === undefined ? {} : { traceparent }) };
      const out = await handleTrigger({ id: `ev2-${process.pid}-${i}`, source: 'app', 'detail-type': 'x', detail }, deps);
      expect(out).toMatchObject({ outcome: 'started' });
      const create = exporter.getFinishedSpans().filter((s) => s.name === 'create load')[i]!;
      expect(create.parentSpanContext).toBeUndefined();
      expect((await getBatch(db.sql, (out as { batchId: string }).batchId))!.traceContext).toBe(
        `00-${traceOf(create)}-${idOf(create)}-01`,
      );
    }
  });

  it('a firing deferred at maxOpen starts later in the trace of its sender', async () => {
    exporter.reset();
    const tenant = `trace-defer-${process.pid}`;
    const deps: TriggerDeps = {
      sql: db.sql,
      jobs,
      log: silentLog,
      config: {
        maxOpen: 1,
        batchConcurrency: 1,
        maxItems: 1_000,
        maxInputBytes: 65_536,
        maxTotalBytes: 1_000_000,
        itemTimeoutLimitMs: 900_000,
      },
    };
    const event = (i: number, traceparent?: string) => ({
      id: `ev3-${process.pid}-${i}`,
      source: 'app',
      'detail-type': 'leasehold.start-batch',
      detail: { tenant, datasource: 'd', job: 'load', ...(traceparent ? { traceparent } : {}) },
    });
    const first = await handleTrigger(event(0), deps);
    expect(first, JSON.stringify(first)).toMatchObject({ outcome: 'started' });
    const deferred = await handleTrigger(event(1, `00-${SENDER_TRACE}-${SENDER_SPAN}-01`), deps);
    expect(deferred).toMatchObject({ outcome: 'deferred' });
    expect(await startDeferred(deps)).toMatchObject({ started: [] });
    await runToEnd((first as { batchId: string }).batchId);
    const { started } = await startDeferred(deps);
    expect(started).toHaveLength(1);
    const create = exporter
      .getFinishedSpans()
      .filter((s) => s.name === 'create load')
      .at(-1)!;
    expect([traceOf(create), parentOf(create)]).toEqual([SENDER_TRACE, SENDER_SPAN]);
    expect((await getBatch(db.sql, started[0]!))!.traceContext).toBe(`00-${SENDER_TRACE}-${idOf(create)}-01`);
  });
});
