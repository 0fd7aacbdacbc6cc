// The span of a Batch Finished webhook delivery (docs/design.md, "Traces"; issue 41): with the
// SDK's in-memory exporter and a context manager, each POST to a batch's notify URL (a real
// local HTTP server) is a client span in the batch's trace, a child of its start span and linked
// to the sender's span, with the OpenTelemetry HTTP client attributes; a failed delivery has
// status error and `error.type`; the `traceparent` header the receiver gets names the span.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchEvents, Runner, type NewBatch } from '../../src/batch/index.js';
import { LocalContextManager } from '../../src/local/trace-context.js';
import { sendEvents, type EventSenderDeps } from '../../src/runtime/events.js';
import { EndpointGuard } from '../../src/units/index.js';
import { silentLog } from '../../src/log.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new LocalContextManager());
});
afterAll(() => {
  trace.disable();
  context.disable();
});

/** The batch's trace: the span that started it (a stand-in for its `create` span). */
const BATCH_TRACE = '5b8efff798038103d269b633813fc60c';
const START_SPAN = 'eee19b7ec3c1b174';

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

let seq = 0;
function batchOf(notify: string, o: Partial<NewBatch> = {}): NewBatch {
  seq++;
  return {
    tenant: `hook-${seq}`,
    datasource: 'files',
    job: 'extract',
    params: {},
    requestKey: `hook-${seq}-${Math.random().toString(36).slice(2, 8)}`,
    items: [{ key: 'a' }, { key: 'b' }],
    notify: { url: notify },
    traceContext: `00-${BATCH_TRACE}-${START_SPAN}-01`,
    ...o,
  };
}

/** A finished batch with a webhook to send (its run's own spans are left out of the exporter). */
async function finishedBatch(b: NewBatch): Promise<string> {
  const runner = new Runner(db.sql, { parallel: 2 });
  const { batch } = await runner.start(b, {}, async ({ key }) => key);
  await runner.running(batch.id);
  await runner.close();
  exporter.reset();
  return batch.id;
}

const deps = (): EventSenderDeps => ({
  sql: db.sql,
  publisher: undefined,
  webhookSecret: undefined,
  guard: new EndpointGuard({ allow: ['127.0.0.1'] }),
  log: silentLog,
});

/** `sendEvents` for one batch inside a span of the sender's own (as the scheduler's service span). */
async function send(batchId: string) {
  const tracer = trace.getTracer('test');
  return tracer.startActiveSpan('sender', async (sender) => {
    try {
      return { result: await sendEvents(deps(), { batchId }), sender: sender.spanContext() };
    } finally {
      sender.end();
    }
  });
}

const webhookSpans = () => exporter.getFinishedSpans().filter((s) => s.name === 'POST Batch Finished webhook');

describe('the webhook delivery span', () => {
  it('is a client span of the batch trace with the HTTP attributes; its traceparent header names it; a 500 is an error', async () => {
    const got: IncomingHttpHeaders[] = [];
    const receiver = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        got.push(req.headers);
        res.writeHead(got.length === 1 ? 500 : 204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const port = (receiver.address() as AddressInfo).port;
    try {
      const id = await finishedBatch(batchOf(`http://127.0.0.1:${port}/hook?token=secret-token`));
      const [event] = await batchEvents(db.sql, id);

      // First delivery: the receiver answers 500.
      const first = await send(id);
      expect(first.result).toMatchObject({ notified: 0, notifyFailed: 1 });
      await db.sql`update leasehold_batch_events set notify_after = now() where batch_id = ${id}`;
      // Second: 204, delivered.
      const second = await send(id);
      expect(second.result).toMatchObject({ notified: 1, notifyFailed: 0 });

      const spans = webhookSpans();
      expect(spans).toHaveLength(2);
      const [failed, delivered] = spans as [ReadableSpan, ReadableSpan];
      for (const [s, sender] of [
        [failed, first.sender],
        [delivered, second.sender],
      ] as const) {
        expect(s.kind).toBe(SpanKind.CLIENT);
        // In the batch's trace, a child of its start span, whoever sends it; linked to the sender.
        expect(traceOf(s)).toBe(BATCH_TRACE);
        expect(s.parentSpanContext?.spanId).toBe(START_SPAN);
        expect(s.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.['leasehold.link']])).toEqual([
          [sender.traceId, sender.spanId, 'sender'],
        ]);
        expect(s.attributes).toMatchObject({
          'http.request.method': 'POST',
          'url.full': `http://127.0.0.1:${port}/hook?token=REDACTED`,
          'server.address': '127.0.0.1',
          'server.port': port,
          'messaging.message.id': event!.id,
          'leasehold.batch.id': id,
        });
      }
      expect(failed.attributes).toMatchObject({ 'http.response.status_code': 500, 'error.type': '500' });
      expect(failed.status).toEqual({ code: SpanStatusCode.ERROR, message: 'HTTP 500' });
      expect(delivered.attributes['http.response.status_code']).toBe(204);
      expect(delivered.attributes['error.type']).toBeUndefined();
      expect(delivered.status.code).toBe(SpanStatusCode.UNSET);

      // Each request's traceparent names its own delivery span (W3C Trace Context).
      expect(got.map((h) => h.traceparent)).toEqual([
        `00-${BATCH_TRACE}-${idOf(failed)}-01`,
        `00-${BATCH_TRACE}-${idOf(delivered)}-01`,
      ]);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });

  it('a delivery that gets no answer is an error with the network error as error.type and no status code', async () => {
    // A port nothing listens on: take one, then close it.
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));

    const id = await finishedBatch(batchOf(`http://user:pass@127.0.0.1:${port}/gone`));
    expect((await send(id)).result).toMatchObject({ notified: 0, notifyFailed: 1 });
    const [span] = webhookSpans();
    expect(span).toBeDefined();
    expect(span!.parentSpanContext?.spanId).toBe(START_SPAN);
    expect(span!.attributes).toMatchObject({
      'url.full': `http://REDACTED:REDACTED@127.0.0.1:${port}/gone`,
      'error.type': 'ECONNREFUSED',
    });
    expect(span!.attributes['http.response.status_code']).toBeUndefined();
    expect(span!.status.code).toBe(SpanStatusCode.ERROR);
    expect(span!.status.message).toMatch(/ECONNREFUSED/);
  });

  it('a batch with no trace of its own: the span is a child of the sender, and the header still names it', async () => {
    const got: IncomingHttpHeaders[] = [];
    const receiver = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        got.push(req.headers);
        res.writeHead(202).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const port = (receiver.address() as AddressInfo).port;
    try {
      const id = await finishedBatch(batchOf(`http://127.0.0.1:${port}/hook`, { traceContext: null }));
      const { result, sender } = await send(id);
      expect(result).toMatchObject({ notified: 1 });
      const [span] = webhookSpans();
      expect([traceOf(span!), span!.parentSpanContext?.spanId]).toEqual([sender.traceId, sender.spanId]);
      expect(span!.links).toEqual([]);
      expect(got.map((h) => h.traceparent)).toEqual([`00-${sender.traceId}-${idOf(span!)}-01`]);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });
});
