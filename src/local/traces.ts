// Spans in `leasehold dev` (docs/design.md, "Traces"; issue 41): `LEASEHOLD_TRACES=console`
// registers a tracer provider that prints every span as it ends (the OpenTelemetry SDK's
// ConsoleSpanExporter); `LEASEHOLD_TRACES=otlp` one that sends them to an OTLP/HTTP endpoint (the
// official `@opentelemetry/exporter-trace-otlp-http`, JSON, batched). Neither package is a
// dependency of leasehold: each is imported here only when asked for, so neither the worker's
// bundle nor a plain `leasehold dev` loads it; an app that wants them installs them (this
// repository has both as dev dependencies).
/**
 * What `LEASEHOLD_TRACES` may say: `console` prints spans, `otlp` sends them to an OTLP/HTTP
 * endpoint; unset, empty or `off`: none.
 */
export type LocalTracesMode = 'off' | 'console' | 'otlp';

/** `LEASEHOLD_TRACES` has a value leasehold does not know, or its SDK is not installed. */
export class LocalTracesError extends Error {
  readonly code = 'local_traces';
  constructor(message: string) {
    super(message);
    this.name = 'LocalTracesError';
  }
}

/** The SDK package that `console` and `otlp` need. */
export const TRACES_SDK = '@opentelemetry/sdk-trace-base';

/** The exporter package that `otlp` needs as well. */
export const OTLP_EXPORTER = '@opentelemetry/exporter-trace-otlp-http';

/**
 * Where `otlp` sends spans, as the exporter reads the standard variables of `env`:
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` plus
 * `/v1/traces`, else `http://localhost:4318/v1/traces`.
 */
export function otlpTracesEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) return traces;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (base) return `${base.replace(/\/+$/, '')}/v1/traces`;
  return 'http://localhost:4318/v1/traces';
}

/**
 * The mode `value` (`LEASEHOLD_TRACES`) names.
 * @throws {LocalTracesError} a value other than `console`, `otlp`, `off` or empty.
 */
export function localTracesMode(value: string | undefined): LocalTracesMode {
  const v = (value ?? '').trim().toLowerCase();
  if (v === '' || v === 'off') return 'off';
  if (v === 'console' || v === 'otlp') return v;
  throw new LocalTracesError(`LEASEHOLD_TRACES=${value}: not console, otlp or off`);
}

/**
 * Starts local traces as `value` (`LEASEHOLD_TRACES`) says, registering a global tracer provider
 * (`trace.setGlobalTracerProvider`): for `console`, spans are printed to stdout as each ends; for
 * `otlp`, they are sent in batches (the SDK's BatchSpanProcessor: every 5 s, or 512 spans) as
 * OTLP/HTTP JSON to {@link otlpTracesEndpoint}, with `OTEL_EXPORTER_OTLP_HEADERS` and the other
 * standard variables the exporter reads. Answers the mode, where spans go (`endpoint`, for
 * `otlp`) and a function that flushes, shuts the provider down and unregisters it (a no-op for
 * `off`). Registers a context manager as well (AsyncLocalStorage, unless one is registered), so
 * the spans made inside a span's work are its children.
 * @throws {LocalTracesError} an unknown value, `console` or `otlp` without {@link TRACES_SDK}
 *   installed, or `otlp` without {@link OTLP_EXPORTER} (the message names the package and the
 *   command that installs it).
 */
export async function startLocalTraces(
  value: string | undefined,
): Promise<{ mode: LocalTracesMode; endpoint?: string; stop: () => Promise<void> }> {
  const mode = localTracesMode(value);
  if (mode === 'off') return { mode, stop: async () => {} };
  const sdk = await need(mode, TRACES_SDK, () => import('@opentelemetry/sdk-trace-base'));
  let processor: import('@opentelemetry/sdk-trace-base').SpanProcessor;
  let endpoint: string | undefined;
  if (mode === 'otlp') {
    const otlp = await need(mode, OTLP_EXPORTER, () => import('@opentelemetry/exporter-trace-otlp-http'));
    endpoint = otlpTracesEndpoint();
    // The exporter reads the endpoint (and headers, timeout) from the standard variables itself.
    processor = new sdk.BatchSpanProcessor(new otlp.OTLPTraceExporter());
  } else {
    processor = new sdk.SimpleSpanProcessor(new sdk.ConsoleSpanExporter());
  }
  const [{ context, trace }, { LocalContextManager }] = await Promise.all([
    import('@opentelemetry/api'),
    import('./trace-context.js'),
  ]);
  const provider = new sdk.BasicTracerProvider({ spanProcessors: [processor] });
  // With a context manager a span's work makes its spans children of it (an item's own spans too).
  const managed = context.setGlobalContextManager(new LocalContextManager());
  trace.setGlobalTracerProvider(provider);
  return {
    mode,
    ...(endpoint !== undefined ? { endpoint } : {}),
    stop: async () => {
      await provider.shutdown();
      trace.disable();
      if (managed) context.disable();
    },
  };
}

/** `load()`, or a {@link LocalTracesError} naming `pkg` and how to install it when it is missing. */
async function need<T>(mode: LocalTracesMode, pkg: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch {
    throw new LocalTracesError(`LEASEHOLD_TRACES=${mode} needs ${pkg}: npm install --save-dev ${pkg}`);
  }
}
