// LEASEHOLD_TRACES in `leasehold dev` (docs/design.md, "Traces"; issue 41): `console` registers
// the OpenTelemetry SDK with its console exporter, so leasehold's own spans are printed as they
// end; `off` registers nothing; anything else is refused, naming the variable.
import { trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LocalTracesError, localTracesMode, startLocalTraces } from '../../src/local/traces.js';
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
    expect(() => localTracesMode('otlp')).toThrow(LocalTracesError);
    await expect(startLocalTraces('jaeger')).rejects.toThrow(/^LEASEHOLD_TRACES=jaeger: not console or off/);
  });
});
