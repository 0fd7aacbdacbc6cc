// Spans in `leasehold dev` (docs/design.md, "Traces"; issue 41): `LEASEHOLD_TRACES=console`
// registers a tracer provider that prints every span as it ends (the OpenTelemetry SDK's
// ConsoleSpanExporter). The SDK (`@opentelemetry/sdk-trace-base`) is not a dependency of leasehold:
// it is imported here only when asked for, so neither the worker's bundle nor a plain `leasehold
// dev` loads it; an app that wants the printout installs it (this repository has it as a dev
// dependency). Sending spans to an OTLP endpoint is left to the app's own SDK setup.

/** What `LEASEHOLD_TRACES` may say: `console` prints spans; unset, empty or `off`: none. */
export type LocalTracesMode = 'off' | 'console';

/** `LEASEHOLD_TRACES` has a value leasehold does not know, or its SDK is not installed. */
export class LocalTracesError extends Error {
  readonly code = 'local_traces';
  constructor(message: string) {
    super(message);
    this.name = 'LocalTracesError';
  }
}

/** The SDK package that `console` needs. */
export const TRACES_SDK = '@opentelemetry/sdk-trace-base';

/**
 * The mode `value` (`LEASEHOLD_TRACES`) names.
 * @throws {LocalTracesError} a value other than `console`, `off` or empty.
 */
export function localTracesMode(value: string | undefined): LocalTracesMode {
  const v = (value ?? '').trim().toLowerCase();
  if (v === '' || v === 'off') return 'off';
  if (v === 'console') return 'console';
  throw new LocalTracesError(`LEASEHOLD_TRACES=${value}: not console or off (for OTLP, register your own SDK)`);
}

/**
 * Starts local traces as `value` (`LEASEHOLD_TRACES`) says: for `console`, registers a global
 * tracer provider (`trace.setGlobalTracerProvider`) whose spans are printed to stdout as each ends.
 * Answers the mode and a function that flushes and unregisters it (a no-op for `off`).
 * @throws {LocalTracesError} an unknown value, or `console` without {@link TRACES_SDK} installed.
 */
export async function startLocalTraces(value: string | undefined): Promise<{ mode: LocalTracesMode; stop: () => Promise<void> }> {
  const mode = localTracesMode(value);
  if (mode === 'off') return { mode, stop: async () => {} };
  let sdk: typeof import('@opentelemetry/sdk-trace-base');
  try {
    sdk = await import('@opentelemetry/sdk-trace-base');
  } catch {
    throw new LocalTracesError(`LEASEHOLD_TRACES=console needs ${TRACES_SDK}: npm install --save-dev ${TRACES_SDK}`);
  }
  const { trace } = await import('@opentelemetry/api');
  const provider = new sdk.BasicTracerProvider({
    spanProcessors: [new sdk.SimpleSpanProcessor(new sdk.ConsoleSpanExporter())],
  });
  trace.setGlobalTracerProvider(provider);
  return {
    mode,
    stop: async () => {
      await provider.shutdown();
      trace.disable();
    },
  };
}
