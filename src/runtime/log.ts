import { Logger, LogLevelThreshold, type LogItem } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import { createLog, type Log } from '../log.js';

/** Where JSON log lines go; default stdout (errors to stderr). */
let sink: ((line: string, level: 'info' | 'warn' | 'error') => void) | undefined;

/**
 * Send every JSON log line — {@link jsonLog}'s, the Powertools logger's and the EMF metric lines
 * — to `write` instead of stdout/stderr (local mode writes them to `.leasehold/dev.log`);
 * `undefined` restores the default.
 */
export function setLogSink(write: ((line: string, level: 'info' | 'warn' | 'error') => void) | undefined): void {
  sink = write;
}

/** Whether `LEASEHOLD_LOG=silent` drops every log and metric line (tests). */
export function logSilenced(): boolean {
  return process.env.LEASEHOLD_LOG === 'silent';
}

/**
 * Write one finished JSON line to the sink, or to stdout (stderr for errors), unless silenced.
 * Every line leasehold writes goes through here.
 */
export function writeLogLine(line: string, level: 'info' | 'warn' | 'error'): void {
  if (logSilenced()) return;
  if (sink) sink(line, level);
  else if (level === 'error') console.error(line);
  else console.log(line);
}

/**
 * One JSON line per entry on stdout/stderr (CloudWatch reads them as structured logs), with
 * `service` set to `source`. Set `LEASEHOLD_LOG=silent` to drop them (tests).
 */
export function jsonLog(source: string): Log {
  return createLog((level, message, fields) => {
    if (logSilenced()) return;
    writeLogLine(JSON.stringify({ level, time: new Date().toISOString(), service: source, message, ...fields }), level);
  });
}

/**
 * The Powertools logger with its output routed through {@link writeLogLine}, so
 * {@link setLogSink} and `LEASEHOLD_LOG=silent` apply to it like to every other line.
 */
class LeaseholdLogger extends Logger {
  protected override printLog(logLevel: number, log: LogItem): void {
    if (logSilenced()) return;
    log.prepareForPrint();
    const level = logLevel >= LogLevelThreshold.ERROR ? 'error' : logLevel >= LogLevelThreshold.WARN ? 'warn' : 'info';
    writeLogLine(JSON.stringify(log.getAttributes(), this.getJsonReplacer()), level);
  }

  protected override createLogger(options?: ConstructorParameters<typeof Logger>[0]): Logger {
    return new LeaseholdLogger(options);
  }
}

const loggers = new Map<string, LeaseholdLogger>();

/**
 * The container's Powertools logger for `service` (one per service, created on first use):
 * structured JSON with `level`, `message`, `timestamp`, `service`, `cold_start` and, once
 * {@link lambdaLog} injected an invocation's context, `function_name`, `function_request_id`
 * and the rest of the Lambda context. Log level from `POWERTOOLS_LOG_LEVEL` (default INFO).
 */
export function powertoolsLogger(service: string): Logger {
  let logger = loggers.get(service);
  if (!logger) {
    logger = new LeaseholdLogger({ serviceName: service });
    loggers.set(service, logger);
  }
  return logger;
}

/**
 * A {@link Log} for one invocation of `service`: the Powertools logger with the Lambda
 * `context` injected, and `fields` (for example `processId`) on every line. Fields named
 * `processId`, `batchId` and `tenant` are top-level keys of each line, like every other field.
 *
 * On Lambda one container runs one invocation at a time, so injecting the context into the
 * container's logger is exact; locally, concurrent invocations share it and a line may show
 * another invocation's request id (the `fields` are always this invocation's).
 */
export function lambdaLog(
  service: string,
  context?: Pick<Context, 'awsRequestId'> & Partial<Context>,
  fields: Record<string, unknown> = {},
): Log {
  const logger = powertoolsLogger(service);
  if (context?.awsRequestId && typeof context.functionName === 'string') logger.addContext(context as Context);
  return createLog((level, message, all) => {
    if (level === 'error') logger.error(message, all);
    else if (level === 'warn') logger.warn(message, all);
    else logger.info(message, all);
  }, fields);
}
