/** A structured log function: level, message, fields. */
export type Log = (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;

/**
 * One JSON line per entry on stdout/stderr (CloudWatch reads them as structured logs), with
 * `service` set to `source`. Set `LEASEHOLD_LOG=silent` to drop them (tests, local demo).
 */
export function jsonLog(source: string): Log {
  return (level, message, fields = {}) => {
    if (process.env.LEASEHOLD_LOG === 'silent') return;
    const line = JSON.stringify({ level, time: new Date().toISOString(), service: source, message, ...fields });
    if (level === 'error') console.error(line);
    else console.log(line);
  };
}
