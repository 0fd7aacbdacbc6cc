// The one logger of leasehold: structured lines (level, message, fields), with fields scoped to
// a process, a batch or a unit by `with`. The runtime writes them as JSON (src/runtime/log.ts);
// the library takes a Log as a required dependency and tests pass `silentLog` or a recorder.

/** Severity of a line. */
export type LogLevel = 'info' | 'warn' | 'error';

/** Fields of a line: top-level keys of its JSON. */
export type LogFields = Record<string, unknown>;

/**
 * A structured logger: `log(level, message, fields?)` writes one line; `log.with({ processId })`
 * is a logger that adds those fields to every line it writes (a line's own fields win).
 */
export interface Log {
  (level: LogLevel, message: string, fields?: LogFields): void;
  /** A logger that writes through this one with `fields` on every line. */
  with(fields: LogFields): Log;
}

/** A {@link Log} that hands every line, its scoped fields merged in, to `write`. */
export function createLog(write: (level: LogLevel, message: string, fields: LogFields) => void, scope: LogFields = {}): Log {
  const log = ((level: LogLevel, message: string, fields: LogFields = {}) =>
    write(level, message, { ...scope, ...fields })) as Log;
  log.with = (fields) => createLog(write, { ...scope, ...fields });
  return log;
}

/** A {@link Log} that drops every line. */
export const silentLog: Log = createLog(() => {});

/**
 * The fields a log line gives an error: its `name`, `code` (when it has one) and `message`, never
 * `String(error)` (which drops the code) nor a driver's whole object. Not an Error: its text.
 */
export function errorFields(error: unknown): { name: string; code?: string; message: string } {
  if (!(error instanceof Error)) return { name: typeof error, message: String(error) };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, ...(typeof code === 'string' ? { code } : {}), message: error.message };
}
