// The middy middlewares every leasehold function is wrapped with (docs/design.md, "Serverless
// runtime": all handlers are wrapped with @middy/core). Small and written here: @middy's own
// packages past v6 need Node 22, and these need nothing they offer.
import type { MiddlewareObj, Request } from '@middy/core';
import type { APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { ConfigError } from './config.js';
import { settleAfterThaw } from './db.js';
import type { Log } from '../log.js';
import { lambdaLog } from './log.js';
import { metricsFor, type RuntimeMetrics } from './metrics.js';

/** What one invocation gets from {@link invocation}: `context.leasehold`. */
export interface Invocation {
  /** `worker`, `scheduler`, `api`, `trigger` or `migrate`. */
  service: string;
  /** Structured JSON logs (Powertools) with the Lambda context injected. */
  log: Log;
  /** The container's metrics for the service; flushed as EMF after the invocation. */
  metrics: RuntimeMetrics;
  /** Aborted at `remaining time − marginMs` (or when the invocation ends). */
  deadline: AbortSignal;
  /** When `deadline` aborts, epoch ms. */
  deadlineAt: number;
}

/** The Lambda context of a leasehold handler: the platform's, plus {@link Invocation} once {@link invocation} ran. */
export type LeaseholdContext = Context & { leasehold?: Invocation };

/**
 * The {@link Invocation} the middleware put on `context`.
 * @throws {Error} the handler was not wrapped with {@link invocation}.
 */
export function invocationOf(context: Context): Invocation {
  const inv = (context as LeaseholdContext).leasehold;
  if (!inv) throw new Error('no invocation context: wrap the handler with the invocation() middleware');
  return inv;
}

/** Options of {@link invocation}. */
export interface InvocationOptions {
  /** Service name in logs and metrics. */
  service: string;
  /**
   * The deadline margin, ms, read at each invocation (so a configuration error surfaces as the
   * invocation's error, naming the variable). Default 0: the deadline is the platform's.
   */
  marginMs?: () => number;
  /** Awaited first at each invocation (before `marginMs`): loads what the handler's dependencies need. */
  prepare?: () => Promise<void>;
}

type AnyRequest = Request<unknown, unknown, Error, LeaseholdContext>;

/**
 * Per-invocation context: before the handler, lets timers due after a container thaw run (stale
 * pooled connections are closed first: {@link settleAfterThaw}), then gives the handler
 * `context.leasehold`: a Powertools {@link Log} with the Lambda context injected, the service's
 * metrics, and a deadline `AbortSignal` aborted at `remaining time − marginMs`. After the
 * handler (also when it throws) the deadline timer is cleared, the signal aborted and the
 * metrics flushed; an error is logged with its message (for a {@link ConfigError}, naming the
 * variable) and rethrown.
 */
export function invocation(options: InvocationOptions): MiddlewareObj<unknown, unknown, Error, LeaseholdContext> {
  const timers = new WeakMap<object, { timer: NodeJS.Timeout; controller: AbortController }>();
  const end = (request: AnyRequest) => {
    const t = timers.get(request);
    if (t) {
      clearTimeout(t.timer);
      t.controller.abort();
      timers.delete(request);
    }
    request.context.leasehold?.metrics.flush();
  };
  return {
    before: async (request) => {
      await settleAfterThaw();
      await options.prepare?.();
      const context = request.context;
      const log = lambdaLog(options.service, context);
      const metrics = metricsFor(options.service);
      const controller = new AbortController();
      const remaining = typeof context.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : 900_000;
      const marginMs = options.marginMs?.() ?? 0;
      const inMs = Math.max(0, remaining - marginMs);
      const timer = setTimeout(() => controller.abort(new Error('deadline')), inMs);
      timer.unref();
      timers.set(request, { timer, controller });
      context.leasehold = { service: options.service, log, metrics, deadline: controller.signal, deadlineAt: Date.now() + inMs };
    },
    after: async (request) => {
      end(request);
    },
    onError: async (request) => {
      const log = request.context.leasehold?.log ?? lambdaLog(options.service, request.context);
      const error = request.error;
      if (request.response === undefined) {
        log('error', error instanceof ConfigError ? 'configuration invalid' : 'invocation failed', {
          ...(error instanceof ConfigError ? { variable: error.variable } : {}),
          error: error instanceof Error ? (error.stack ?? error.message) : String(error),
        });
      }
      end(request);
    },
  };
}

/**
 * For the HTTP API: anything that escapes the API handler (which maps its own errors to
 * statuses) is answered `500 { error: { code: 'internal', message: 'internal error' } }` as JSON
 * and logged, never a bare Lambda error. A {@link ConfigError} is not answered: it stops the
 * function, its message naming the variable.
 */
export function httpErrorBoundary(): MiddlewareObj<unknown, APIGatewayProxyStructuredResultV2, Error, LeaseholdContext> {
  return {
    onError: async (request) => {
      if (request.response !== undefined || request.error instanceof ConfigError) return;
      const log = request.context.leasehold?.log;
      log?.('error', 'request failed', {
        error: request.error instanceof Error ? (request.error.stack ?? request.error.message) : String(request.error),
      });
      request.response = {
        statusCode: 500,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ error: { code: 'internal', message: 'internal error' } }),
      };
    },
  };
}
