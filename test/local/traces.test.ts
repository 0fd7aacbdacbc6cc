// LEASEHOLD_TRACES in `leasehold dev` (docs/design.md, "Traces"; issue 41): `console` registers
// the OpenTelemetry SDK with its console exporter, so leasehold's own spans are printed as they
// end; `otlp` sends them as OTLP/HTTP JSON to the endpoint the standard variables name (a local
// HTTP server here); `off` registers nothing; anything else is refused, naming the variable.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  LocalTracesError,
  localTracesMode,
  OTLP_EXPORTER,
  otlpTracesEndpoint,
  startLocalTraces,
} from '../../src/local/traces.js';
import { traced, tracingRegistered } from '../../src/tracing.js';

afterEach(() => {
  vi.restoreAllMocks();
  trace.disable();
});

describe('LEASEHOLD_TRACES', () => {
  it("console prints leasehold's spans as they end, and stopping unregisters the provider", async () => {
    const printed: unknown[] = [];
    vi.spyOn(console, 'dir').mockImplementation((item: unknown) => void printed.push(item));
    const traces = await startLocalTraces('console');
    expect(traces.mode).toBe('console');
    expect(tracingRegistered()).toBe(true);
    const answer = await traced('leasehold.test', { 'leasehold.batch.id': 'b1' }, async () =>
      traced('leasehold.inner', {}, async () => 42),
    );
    expect(answer).toBe(42);
    const spans = printed as {
      name: string;
      traceId: string;
      id: string;
      parentSpanContext?: { spanId: string };
      attributes: Record<string, unknown>;
    }[];
    expect(spans.map((s) => s.name)).toEqual(['leasehold.inner', 'leasehold.test']);
    expect(spans[1]!.attributes).toMatchObject({ 'leasehold.batch.id': 'b1' });
    expect(spans[0]!.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(spans[0]!.parentSpanContext?.spanId).toBe(spans[1]!.id);
    await traces.stop();
    expect(tracingRegistered()).toBe(false);
  });

  it('off, empty or unset register nothing; another value is refused, naming the variable', async () => {
    for (const value of [undefined, '', 'off', ' OFF ']) {
      const t = await startLocalTraces(value);
      expect(t.mode).toBe('off');
      expect(tracingRegistered()).toBe(false);
    }
    expect(localTracesMode('Console')).toBe('console');
    expect(localTracesMode(' OTLP')).toBe('otlp');
    expect(() => localTracesMode('zipkin')).toThrow(LocalTracesError);
    await expect(startLocalTraces('jaeger')).rejects.toThrow(/^LEASEHOLD_TRACES=jaeger: not console, otlp or off/);
  });

  it('otlp sends the spans, parent and attributes kept, as OTLP/HTTP JSON to OTEL_EXPORTER_OTLP_ENDPOINT', async () => {
    const got: { url: string; headers: IncomingHttpHeaders; body: string }[] = [];
    const collector = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        got.push({ url: req.url ?? '', headers: req.headers, body });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
    const saved = { ...process.env };
    try {
      delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
      process.env.OTEL_EXPORTER_OTLP_ENDPOINT = base;
      process.env.OTEL_EXPORTER_OTLP_HEADERS = 'x-test=local';
      const traces = await startLocalTraces('otlp');
      expect(traces).toMatchObject({ mode: 'otlp', endpoint: `${base}/v1/traces` });
      expect(tracingRegistered()).toBe(true);
      await traced('leasehold.outer', { 'leasehold.batch.id': 'b7', 'leasehold.item.attempt': 2 }, async () =>
        traced('leasehold.inner', {}, async () => 1),
      );
      // Batched: nothing is sent until the stop flushes.
      await traces.stop();
      expect(tracingRegistered()).toBe(false);
      expect(got).toHaveLength(1);
      expect(got[0]!.url).toBe('/v1/traces');
      expect(got[0]!.headers['content-type']).toMatch(/^application\/json/);
      expect(got[0]!.headers['x-test']).toBe('local');
      type Span = {
        name: string;
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        attributes: { key: string; value: Record<string, unknown> }[];
      };
      const body = JSON.parse(got[0]!.body) as { resourceSpans: { scopeSpans: { scope: { name: string }; spans: Span[] }[] }[] };
      const scopes = body.resourceSpans.flatMap((r) => r.scopeSpans);
      expect(scopes.map((s) => s.scope.name)).toEqual(['leasehold']);
      const spans = scopes.flatMap((s) => s.spans);
      const outer = spans.find((s) => s.name === 'leasehold.outer')!;
      const inner = spans.find((s) => s.name === 'leasehold.inner')!;
      expect(outer.attributes).toEqual(
        expect.arrayContaining([
          { key: 'leasehold.batch.id', value: { stringValue: 'b7' } },
          { key: 'leasehold.item.attempt', value: { intValue: 2 } },
        ]),
      );
      // The context manager it registers nests a span's work's spans in it.
      expect(inner.traceId).toBe(outer.traceId);
      expect(inner.parentSpanId).toBe(outer.spanId);
      expect(outer.traceId).toMatch(/^[0-9a-f]{32}$/);
    } finally {
      process.env = saved;
      await new Promise((r) => collector.close(r));
    }
  });

  it('otlp names the package to install when the exporter is missing', async () => {
    vi.doMock(OTLP_EXPORTER, () => {
      throw new Error(`Cannot find package '${OTLP_EXPORTER}'`);
    });
    try {
      await expect(startLocalTraces('otlp')).rejects.toThrow(
        `LEASEHOLD_TRACES=otlp needs ${OTLP_EXPORTER}: npm install --save-dev ${OTLP_EXPORTER}`,
      );
      expect(tracingRegistered()).toBe(false);
    } finally {
      vi.doUnmock(OTLP_EXPORTER);
    }
  });

  it('otlp endpoint: the traces variable as it is, else the base plus /v1/traces, else localhost:4318', () => {
    expect(
      otlpTracesEndpoint({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:1/t', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' }),
    ).toBe('http://c:1/t');
    expect(otlpTracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' })).toBe('http://c:4318/v1/traces');
    expect(otlpTracesEndpoint({})).toBe('http://localhost:4318/v1/traces');
  });
});
