// Logs in tests: a recorder that keeps every line, to assert on what a component reports.
import { createLog, type Log } from '../../src/log.js';

/** One line kept by {@link memoryLog}. */
export interface LogEntry {
  level: string;
  message: string;
  fields?: Record<string, unknown>;
}

/** A log that keeps its lines (their scoped fields merged in, as written). */
export function memoryLog(): { log: Log; entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  return { entries, log: createLog((level, message, fields) => void entries.push({ level, message, fields })) };
}
