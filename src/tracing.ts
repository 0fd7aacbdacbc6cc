// OpenTelemetry traces (docs/design.md, "Traces"): the door every layer goes through. leasehold
// depends on `@opentelemetry/api` alone and makes spans only once the app registered a tracer
// provider (the AWS Distro for OpenTelemetry layer does, and so does `leasehold dev` with
// LEASEHOLD_TRACES). Until then nothing is loaded: the check is one look at the API's global
// registry, so a worker's cold start does not load the API (it is a chunk of its own:
// docs/design.md, "Cold starts and code splitting") and its hot path makes no span and no
// allocation. Imports nothing at run time.
import type { Attributes, SpanContext } from '@opentelemetry/api';
import type { Tracing } from './tracing-otel.js';

export type { SpanKindName, Tracing, TraceLinks } from './tracing-otel.js';

/** Where `@opentelemetry/api` 1.x keeps what an app registered (its global registry). */
const API_KEY = Symbol.for('opentelemetry.js.api.1');

/**
 * Whether an app registered a global tracer provider through `@opentelemetry/api` 1.x
 * (`trace.setGlobalTracerProvider`, an SDK's `register()`). Costs one property read.
 */
export function tracingRegistered(): boolean {
  const registry = (globalThis as Record<symbol, { trace?: unknown } | undefined>)[API_KEY];
  return registry?.trace !== undefined;
}

/** A W3C `traceparent`: version 00, trace id, parent span id, flags. */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The span context a W3C `traceparent` names (remote), or undefined for anything else. */
export function parseTraceparent(text: string | null | undefined): SpanContext | undefined {
  const m = typeof text === 'string' ? TRACEPARENT.exec(text.trim()) : null;
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: Number.parseInt(m[3]!, 16) & 0xff, isRemote: true };
}

/** The W3C `traceparent` of a span context. */
export function formatTraceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

let loading: Promise<Tracing> | undefined;

/**
 * leasehold's tracer when an app registered a tracer provider, else undefined (and nothing is
 * loaded). The API is imported on the first call that finds a provider.
 */
export async function tracing(): Promise<Tracing | undefined> {
  if (!tracingRegistered()) return undefined;
  loading ??= import('./tracing-otel.js').then((m) => new m.Tracing());
  return (await loading).follow();
}

/**
 * Run `f` inside a span `name` (kind internal unless `kind` says otherwise) that ends when `f`
 * settles, with status error and the exception recorded when it throws (and rethrows it); the
 * span's parent is the active context, `links` its links (default none). Without a registered
 * tracer provider this is `f()`.
 */
export async function traced<T>(
  name: string,
  attributes: Attributes,
  f: () => Promise<T>,
  kind: import('./tracing-otel.js').SpanKindName = 'internal',
  links?: import('./tracing-otel.js').TraceLinks,
): Promise<T> {
  const t = await tracing();
  return t ? t.traced(name, attributes, f, kind, links) : f();
}

/**
 * The AWS X-Ray trace header (`Root=1-…-…;Parent=…;Sampled=0|1`) of a W3C `traceparent`, as
 * PutEvents' `TraceHeader` takes it (docs/design.md, "Traces"); undefined for one that does not parse.
 */
export function xrayTraceHeader(traceparent: string | null | undefined): string | undefined {
  const sc = parseTraceparent(traceparent);
  if (!sc) return undefined;
  const id = sc.traceId;
  return `Root=1-${id.slice(0, 8)}-${id.slice(8)};Parent=${sc.spanId};Sampled=${sc.traceFlags & 1}`;
}
