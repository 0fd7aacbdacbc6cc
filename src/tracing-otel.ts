// leasehold's tracer over `@opentelemetry/api` (docs/design.md, "Traces"). Loaded by the door
// (src/tracing.ts) only once an app registered a tracer provider; nothing else imports it.
import {
  context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

/** The instrumentation scope's name: every span of leasehold's comes from this tracer. */
export const TRACER_NAME = 'leasehold';

/** A span's kind by name (the OpenTelemetry kinds). */
export type SpanKindName = 'internal' | 'server' | 'client' | 'producer' | 'consumer';

const KINDS: Record<SpanKindName, SpanKind> = {
  internal: SpanKind.INTERNAL,
  server: SpanKind.SERVER,
  client: SpanKind.CLIENT,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
};

/** Where `@opentelemetry/api` 1.x keeps what an app registered (its global registry). */
const API_KEY = Symbol.for('opentelemetry.js.api.1');

/** Links of a span: span contexts with the attributes of each link. */
export type TraceLinks = { context: SpanContext; attributes?: Attributes }[];

/** leasehold's spans through the app's registered tracer provider. */
export class Tracing {
  private provider: TracerProvider | undefined;
  private tracer!: Tracer;

  constructor() {
    this.follow();
  }

  /**
   * Take the registered provider's tracer again if the app registered another since
   * (`trace.disable()` then a new provider: a restarted `leasehold dev`, tests), so no span goes
   * to a provider that was shut down. Called by the door (src/tracing.ts) on every `tracing()`,
   * once per run or traced call, never per item.
   */
  follow(): this {
    const p = trace.getTracerProvider();
    if (p !== this.provider) {
      this.provider = p;
      this.tracer = p.getTracer(TRACER_NAME);
    }
    return this;
  }

  /**
   * Start a span. `parent`: a span context (a stored `traceparent`), or undefined for the
   * active context; `root` starts a new trace whatever the active context is.
   */
  start(name: string, kind: SpanKindName, attributes: Attributes, parent?: SpanContext, links?: TraceLinks, root = false): Span {
    const ctx: Context = parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : context.active();
    return this.tracer.startSpan(name, { kind: KINDS[kind], attributes, links: links as Link[] | undefined, root }, ctx);
  }

  /** Start a span whose parent context is `parent` (made once by {@link contextOf}, reused), with `links` (default none). */
  startIn(name: string, kind: SpanKindName, attributes: Attributes, parent: Context, links?: TraceLinks): Span {
    return this.tracer.startSpan(name, { kind: KINDS[kind], attributes, links: links as Link[] | undefined }, parent);
  }

  /** A context whose active span is `span`, to start many children in with {@link startIn}. */
  contextOf(span: Span): Context {
    return trace.setSpan(ROOT_CONTEXT, span);
  }

  /** Whether an app registered a context manager (without one no span can be made active). Asked once per item. */
  contextManaged(): boolean {
    return (globalThis as Record<symbol, { context?: unknown } | undefined>)[API_KEY]?.context !== undefined;
  }

  /** Runs `f` with `span` as the active span (for spans the work makes: needs a context manager). */
  within<T>(span: Span, f: () => T): T {
    return context.with(trace.setSpan(context.active(), span), f);
  }

  /**
   * Mark `span` failed with `error` (status error, the exception recorded, `error.type` its
   * class's name as the OpenTelemetry conventions ask); does not end it.
   */
  fail(span: Span, error: unknown): void {
    const e = error instanceof Error ? error : new Error(String(error));
    span.recordException(e);
    span.setAttribute('error.type', e.name && e.name !== 'Error' ? e.name : e.constructor.name || 'Error');
    span.setStatus({ code: SpanStatusCode.ERROR, message: e.message });
  }

  /** Mark `span` failed with a message (an item's error text); does not end it. */
  failWith(span: Span, message: string): void {
    span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  /** The active span's context when it is a valid one (the invocation's, under ADOT), else undefined. */
  activeSpanContext(): SpanContext | undefined {
    const sc = trace.getSpanContext(context.active());
    return sc && trace.isSpanContextValid(sc) ? sc : undefined;
  }

  /** See `traced` in src/tracing.ts. */
  async traced<T>(
    name: string,
    attributes: Attributes,
    f: () => Promise<T>,
    kind: SpanKindName = 'internal',
    links?: TraceLinks,
  ): Promise<T> {
    const span = this.start(name, kind, attributes, undefined, links);
    try {
      return await this.within(span, f);
    } catch (e) {
      this.fail(span, e);
      throw e;
    } finally {
      span.end();
    }
  }
}
