/** A structured log function: level, message, fields. */
export type Log = (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;

/** Where JSON log lines go; default stdout (errors to stderr). */
let sink: ((line: string, level: 'info' | 'warn' | 'error') => void) | undefined;

/**
 * Send every JSON log line to `write` instead of stdout/stderr (local mode writes them to
 * `.leasehold/dev.log`); `undefined` restores the default.
 */
export function setLogSink(write: ((line: string, level: 'info' | 'warn' | 'error') => void) | undefined): void {
  sink = write;
}

/**
 * One JSON line per entry on stdout/stderr (CloudWatch reads them as structured logs), with
 * `service` set to `source`. Set `LEASEHOLD_LOG=silent` to drop them (tests).
 */
export function jsonLog(source: string): Log {
  return (level, message, fields = {}) => {
    if (process.env.LEASEHOLD_LOG === 'silent') return;
    const line = JSON.stringify({ level, time: new Date().toISOString(), service: source, message, ...fields });
    if (sink) sink(line, level);
    else if (level === 'error') console.error(line);
    else console.log(line);
  };
}
