/** A structured log function: level, message, fields. */
export type Log = (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;
