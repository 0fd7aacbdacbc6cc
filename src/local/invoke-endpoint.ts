// A local stand-in for the AWS Lambda Invoke API (docs/design.md, "Local mode"): the scheduler's and
// the API's real `@aws-sdk/client-lambda` calls reach local handlers when
// `AWS_ENDPOINT_URL_LAMBDA` points here.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { ClientContext } from 'aws-lambda';
import { createLambdaContext, systemNow, type LambdaLikeContext, type NowClock } from './context.js';
import { closeServer, listen, readBody } from './http-util.js';
import { LeaseholdError, InvalidSettingError } from '../errors.js';
import { browserRefusal, rebindingRefusal } from './local-guard.js';

/**
 * A function the endpoint can invoke: `(event, context) => result`, usually a middy handler.
 * Declared through a method so that handlers typed for a specific event (`WorkerEvent`) are
 * accepted; the endpoint passes whatever JSON the caller sent.
 */
export type LocalLambdaHandler = {
  bivarianceHack(event: unknown, context: LambdaLikeContext): unknown;
}['bivarianceHack'];

/** How an invocation was requested (`X-Amz-Invocation-Type`). */
export type LocalInvocationType = 'Event' | 'RequestResponse';

/** One invocation, as reported to the observers. */
export interface InvocationInfo {
  functionName: string;
  /** The context's `awsRequestId`, also sent back as `x-amzn-RequestId`. */
  awsRequestId: string;
  invocationType: LocalInvocationType;
  /** Time spent queued behind the concurrency limit, ms. */
  queuedMs: number;
}

/** A finished (or timed-out) invocation, as reported to `onDone`. */
export interface InvocationOutcome extends InvocationInfo {
  /** From handler start to settlement (or to the timeout), ms. */
  durationMs: number;
  /** True when the handler resolved before the timeout. */
  ok: boolean;
  /** True when the handler was still running at `timeoutMs`. */
  timedOut: boolean;
  /** What the handler threw, or the {@link LocalInvocationTimeoutError}. */
  error?: unknown;
}

/** Options of {@link createInvokeEndpoint}. */
export interface InvokeEndpointOptions {
  /** Handlers by function name. ARNs and `name:qualifier` resolve to the name. */
  functions: Record<string, LocalLambdaHandler>;
  /** Port on `host`. Default 0: any free port. */
  port?: number;
  /** Default `127.0.0.1`. */
  host?: string;
  /** Local timeout of every invocation, the basis of `getRemainingTimeInMillis()`. Default 60,000 ms. */
  timeoutMs?: number;
  /**
   * Invocations running at once. Beyond it, invocations (both types) wait in one FIFO queue;
   * an `Event` caller has its 202 already. Default 8.
   */
  concurrency?: number;
  /** Largest `Event` payload, bytes; larger ones get 413. Default 262,144 (256 KiB, Lambda's async limit). */
  maxEventPayloadBytes?: number;
  /**
   * Largest `RequestResponse` request and response payload, bytes (Lambda's sync limit). A larger
   * request gets 413; a larger result is answered as Lambda does, a function error of type
   * `Function.ResponseSizeTooLarge`. Default 6,291,456 (6 MB).
   */
  maxPayloadBytes?: number;
  /**
   * Reserved concurrency by function name, as Lambda's: a `RequestResponse` invocation of a
   * function that already has this many invocations running or queued is throttled, 429
   * `TooManyRequestsException` (`Reason: ReservedFunctionConcurrentInvocationLimitExceeded`);
   * 0 throttles every one. (Lambda queues `Event` invocations instead, so they are never
   * refused.) Default: no limit but `concurrency`.
   */
  reservedConcurrency?: Record<string, number>;
  /** Region in the context's ARN. Default `AWS_REGION`, else `us-east-1`. */
  region?: string;
  /** Read for the context's remaining time. Default the system clock. */
  clock?: NowClock;
  /** Called when a handler starts. Exceptions thrown by observers are ignored. */
  onInvoke?(info: InvocationInfo): void;
  /** Called once per invocation when it settles or times out. */
  onDone?(outcome: InvocationOutcome): void;
  /** Called when a handler throws or rejects, or times out. The server keeps serving. */
  onError?(error: unknown, info: InvocationInfo): void;
}

/** Options of {@link InvokeEndpoint.stop}. */
export interface StopOptions {
  /**
   * Default true: let queued invocations run and wait for every running one to settle.
   * False: drop the queue (queued `RequestResponse` callers get 503) and return without waiting.
   */
  wait?: boolean;
}

/** The local Invoke API, from {@link createInvokeEndpoint}. */
export interface InvokeEndpoint {
  /**
   * Listen. Resolves with the base URL (`http://127.0.0.1:<port>`), the value for
   * `AWS_ENDPOINT_URL_LAMBDA` or a `LambdaClient`'s `endpoint`.
   * @throws {LocalPortInUseError} `port` is taken; calling it twice throws.
   */
  start(): Promise<{ url: string; port: number }>;
  /** Stop accepting invocations (new requests get 503), then close. Idempotent. */
  stop(options?: StopOptions): Promise<void>;
  /** Handlers running now. */
  running(): number;
  /** Invocations waiting for a slot. */
  queued(): number;
  /** Resolves when nothing is running or queued. */
  idle(): Promise<void>;
  /** Invocations whose handler resolved in time. */
  readonly completed: number;
  /** Invocations whose handler threw, rejected or timed out. */
  readonly failed: number;
  /** Base URL once started. */
  readonly url: string | undefined;
}

/** An invocation ran past `timeoutMs`; its handler keeps its slot until it actually settles. */
export class LocalInvocationTimeoutError extends LeaseholdError {
  constructor(
    readonly functionName: string,
    readonly awsRequestId: string,
    readonly timeoutMs: number,
  ) {
    super(
      'invocation_timeout',
      `RequestId: ${awsRequestId} Error: Task timed out after ${(timeoutMs / 1000).toFixed(2)} seconds`,
    );
  }
}

/**
 * The environment that makes `@aws-sdk/client-lambda` clients created afterwards (in this
 * process or a child) talk to the endpoint at `url`: `AWS_ENDPOINT_URL_LAMBDA`, dummy
 * credentials (nothing checks them; real ones would only risk a credential-provider lookup) and
 * `AWS_REGION` (kept when set, else `us-east-1`).
 */
export function localLambdaEnv(url: string): Record<string, string> {
  return {
    AWS_ENDPOINT_URL_LAMBDA: url,
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
    AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
  };
}

interface Job {
  functionName: string;
  handler: LocalLambdaHandler;
  event: unknown;
  invocationType: LocalInvocationType;
  clientContext?: ClientContext;
  awsRequestId: string;
  enqueuedAtMs: number;
  /** Called once: with the result, the failure, or `dropped` when stopped before it ran. */
  settle(outcome: JobOutcome): void;
}

type JobOutcome = { kind: 'ok'; result: unknown } | { kind: 'error'; error: unknown } | { kind: 'dropped' };

const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations\/?$/;

/**
 * Create (not yet listening) a local Lambda Invoke API serving
 * `POST /2015-03-31/functions/{FunctionName}/invocations`:
 * - `X-Amz-Invocation-Type: Event`: 202 at once; the handler runs in the background.
 * - `RequestResponse` (default): 200 with the handler's result as JSON (`null` for undefined);
 *   a throw answers 200 with `X-Amz-Function-Error: Unhandled` and
 *   `{ errorType, errorMessage, trace }`, as Lambda does.
 * - `DryRun`: 204.
 * - Unknown function: 404, `x-amzn-ErrorType: ResourceNotFoundException`,
 *   `{ Type: 'User', message }`. Payload not JSON: 400 `InvalidRequestContentException`.
 *   Too large: 413 `RequestEntityTooLargeException`. Stopping: 503 `ServiceException`.
 *   Above a function's `reservedConcurrency` (`RequestResponse`): 429 `TooManyRequestsException`.
 *   A request a browser sent (it has an `Origin`), or one whose `Host` is not this loopback
 *   address and port: 403 `AccessDeniedException`.
 * - A `RequestResponse` result above `maxPayloadBytes` answers a `Function.ResponseSizeTooLarge`
 *   function error instead, as Lambda does.
 * Each invocation gets a {@link createLambdaContext} context with a fresh `awsRequestId`.
 * Handler failures go to `onError` and never reach the server.
 */
export function createInvokeEndpoint(options: InvokeEndpointOptions): InvokeEndpoint {
  const host = options.host ?? '127.0.0.1';
  const timeoutMs = options.timeoutMs ?? 60_000;
  const concurrency = options.concurrency ?? 8;
  const maxEventPayloadBytes = options.maxEventPayloadBytes ?? 262_144;
  const maxPayloadBytes = options.maxPayloadBytes ?? 6_291_456;
  const clock = options.clock ?? systemNow;
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new InvalidSettingError('concurrency', `must be a positive integer, got ${concurrency}`);

  const queue: Job[] = [];
  let active = 0;
  /** Invocations running or queued, by function name (for `reservedConcurrency`). */
  const inFlight = new Map<string, number>();
  let completed = 0;
  let failed = 0;
  let accepting = true;
  let server: Server | undefined;
  let url: string | undefined;
  let stopping: Promise<void> | undefined;
  let idleWaiters: (() => void)[] = [];

  const observe = <A extends unknown[]>(fn: ((...args: A) => void) | undefined, ...args: A) => {
    try {
      fn?.(...args);
    } catch {
      // an observer's failure must not disturb invocations
    }
  };

  const checkIdle = () => {
    if (active === 0 && queue.length === 0) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const w of waiters) w();
    }
  };

  const idle = (): Promise<void> =>
    active === 0 && queue.length === 0 ? Promise.resolve() : new Promise<void>((r) => idleWaiters.push(r));

  const pump = () => {
    while (active < concurrency && queue.length > 0) {
      const job = queue.shift()!;
      active++;
      void execute(job).finally(() => {
        active--;
        pump();
        checkIdle();
      });
    }
  };

  const execute = async (job: Job): Promise<void> => {
    const startedAtMs = clock.now();
    const info: InvocationInfo = {
      functionName: job.functionName,
      awsRequestId: job.awsRequestId,
      invocationType: job.invocationType,
      queuedMs: Math.max(0, startedAtMs - job.enqueuedAtMs),
    };
    const context = createLambdaContext({
      functionName: job.functionName,
      timeoutMs,
      startedAtMs,
      awsRequestId: job.awsRequestId,
      region: options.region,
      clientContext: job.clientContext,
      clock,
    });
    let finished = false;
    const finish = (outcome: JobOutcome, timedOut: boolean) => {
      if (finished) return;
      finished = true;
      const error = outcome.kind === 'error' ? outcome.error : undefined;
      if (outcome.kind === 'ok') completed++;
      else {
        failed++;
        observe(options.onError, error, info);
      }
      observe(options.onDone, {
        ...info,
        durationMs: Math.max(0, clock.now() - startedAtMs),
        ok: outcome.kind === 'ok',
        timedOut,
        ...(error !== undefined ? { error } : {}),
      });
      job.settle(outcome);
    };
    // Lambda would end the invocation here; locally the handler cannot be stopped, so it keeps
    // its slot until it settles, but the caller and the observers learn of the timeout now.
    const timer = setTimeout(
      () =>
        finish({ kind: 'error', error: new LocalInvocationTimeoutError(job.functionName, job.awsRequestId, timeoutMs) }, true),
      timeoutMs,
    );
    timer.unref();
    observe(options.onInvoke, info);
    try {
      const result = await Promise.resolve().then(() => job.handler(job.event, context));
      finish({ kind: 'ok', result }, false);
    } catch (error) {
      finish({ kind: 'error', error }, false);
    } finally {
      clearTimeout(timer);
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const awsRequestId = randomUUID();
    // Web pages may send requests to 127.0.0.1 too; the SDK sends no Origin and the loopback Host.
    const refusal = browserRefusal(req) ?? rebindingRefusal(req, host);
    if (refusal) {
      req.resume();
      return sendError(res, 403, 'AccessDeniedException', refusal, awsRequestId);
    }
    const pathname = (req.url ?? '/').split('?')[0]!;
    const match = INVOKE_PATH.exec(pathname);
    if (!match || req.method !== 'POST') {
      req.resume();
      return sendError(res, 404, 'UnknownOperationException', `Unknown operation ${req.method} ${pathname}`, awsRequestId);
    }
    if (!accepting) {
      req.resume();
      return sendError(res, 503, 'ServiceException', 'The local Lambda endpoint is stopping', awsRequestId);
    }
    const requested = safeDecode(match[1]!);
    const functionName = resolveFunctionName(requested, options.functions);
    if (functionName === undefined) {
      req.resume();
      const region = options.region ?? process.env.AWS_REGION ?? 'us-east-1';
      return sendError(
        res,
        404,
        'ResourceNotFoundException',
        `Function not found: arn:aws:lambda:${region}:000000000000:function:${requested}`,
        awsRequestId,
      );
    }
    const typeHeader = header(req, 'x-amz-invocation-type') ?? 'RequestResponse';
    if (!isInvocationType(typeHeader)) {
      req.resume();
      return sendError(res, 400, 'InvalidParameterValueException', `Unsupported invocation type: ${typeHeader}`, awsRequestId);
    }
    const limit = typeHeader === 'Event' ? maxEventPayloadBytes : maxPayloadBytes;
    const body = await readBody(req, limit);
    if (body === undefined) {
      return sendError(
        res,
        413,
        'RequestEntityTooLargeException',
        `Request must be smaller than ${limit} bytes for the ${typeHeader} invocation type`,
        awsRequestId,
      );
    }
    let event: unknown;
    try {
      const text = body.toString('utf8');
      event = text.trim() === '' ? {} : JSON.parse(text);
    } catch (e) {
      return sendError(
        res,
        400,
        'InvalidRequestContentException',
        `Could not parse request body into json: ${(e as Error).message}`,
        awsRequestId,
      );
    }
    if (typeHeader === 'DryRun') {
      res.writeHead(204, { 'x-amzn-RequestId': awsRequestId }).end();
      return;
    }
    const clientContext = decodeClientContext(header(req, 'x-amz-client-context'));
    const base: Omit<Job, 'settle'> = {
      functionName,
      handler: options.functions[functionName]!,
      event,
      invocationType: typeHeader,
      awsRequestId,
      enqueuedAtMs: clock.now(),
      ...(clientContext ? { clientContext } : {}),
    };
    // Checked and counted in one step, so concurrent callers cannot both take the last slot.
    const reserved = options.reservedConcurrency?.[functionName];
    if (typeHeader === 'RequestResponse' && reserved !== undefined && (inFlight.get(functionName) ?? 0) >= reserved) {
      return sendError(res, 429, 'TooManyRequestsException', 'Rate Exceeded.', awsRequestId, {
        Reason: 'ReservedFunctionConcurrentInvocationLimitExceeded',
      });
    }
    inFlight.set(functionName, (inFlight.get(functionName) ?? 0) + 1);
    const done = () => inFlight.set(functionName, (inFlight.get(functionName) ?? 1) - 1);
    if (typeHeader === 'Event') {
      res.writeHead(202, { 'x-amzn-RequestId': awsRequestId, 'content-length': '0' }).end();
      queue.push({ ...base, settle: done });
      pump();
      return;
    }
    queue.push({
      ...base,
      settle: (outcome) => {
        done();
        if (outcome.kind === 'dropped') {
          return sendError(
            res,
            503,
            'ServiceException',
            'The local Lambda endpoint stopped before the invocation ran',
            awsRequestId,
          );
        }
        const headers: Record<string, string> = {
          'content-type': 'application/json',
          'x-amzn-RequestId': awsRequestId,
          'x-amz-executed-version': '$LATEST',
        };
        let payload: string;
        if (outcome.kind === 'ok') {
          try {
            payload = JSON.stringify(outcome.result) ?? 'null';
          } catch (e) {
            headers['x-amz-function-error'] = 'Unhandled';
            payload = JSON.stringify(errorPayload(new TypeError(`result is not serialisable: ${(e as Error).message}`)));
          }
          const bytes = Buffer.byteLength(payload);
          if (bytes > maxPayloadBytes) {
            headers['x-amz-function-error'] = 'Unhandled';
            payload = JSON.stringify({
              errorType: 'Function.ResponseSizeTooLarge',
              errorMessage: `Response payload size (${bytes} bytes) exceeded maximum allowed payload size (${maxPayloadBytes} bytes).`,
            });
          }
        } else {
          headers['x-amz-function-error'] = 'Unhandled';
          payload = JSON.stringify(errorPayload(outcome.error));
        }
        if (!res.headersSent && !res.destroyed) res.writeHead(200, headers).end(payload);
      },
    });
    pump();
  };

  return {
    async start() {
      if (server) throw new Error('the local Lambda endpoint is already started');
      const s = createServer((req, res) => {
        handle(req, res).catch((e: unknown) => {
          if (!res.headersSent)
            sendError(res, 500, 'ServiceException', `local endpoint failure: ${(e as Error).message}`, randomUUID());
          else res.destroy();
        });
      });
      server = s;
      try {
        const listening = await listen(s, options.port ?? 0, host);
        url = listening.url;
        return listening;
      } catch (e) {
        server = undefined;
        throw e;
      }
    },

    stop(stopOptions = {}) {
      stopping ??= (async () => {
        accepting = false;
        if (stopOptions.wait === false) {
          for (const job of queue.splice(0)) job.settle({ kind: 'dropped' });
          checkIdle();
        }
        if (server) await closeServer(server, stopOptions.wait === false ? Promise.resolve() : idle());
      })();
      return stopping;
    },

    running: () => active,
    queued: () => queue.length,
    idle,
    get completed() {
      return completed;
    },
    get failed() {
      return failed;
    },
    get url() {
      return url;
    },
  };
}

function isInvocationType(t: string): t is LocalInvocationType | 'DryRun' {
  return t === 'Event' || t === 'RequestResponse' || t === 'DryRun';
}

/** Name in the map for `requested`: a name, `name:qualifier`, or a (partial) function ARN. */
function resolveFunctionName(requested: string, functions: Record<string, LocalLambdaHandler>): string | undefined {
  const has = (name: string) => Object.prototype.hasOwnProperty.call(functions, name);
  if (has(requested)) return requested;
  const parts = requested.split(':');
  const at = parts.indexOf('function');
  const name = at >= 0 ? parts[at + 1] : parts[0];
  return name !== undefined && has(name) ? name : undefined;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function decodeClientContext(value: string | undefined): ClientContext | undefined {
  if (!value) return undefined;
  try {
    return JSON.parse(Buffer.from(value, 'base64').toString('utf8')) as ClientContext;
  } catch {
    return undefined;
  }
}

/** Lambda's shape of an unhandled function error. */
function errorPayload(error: unknown): { errorType: string; errorMessage: string; trace: string[] } {
  if (error instanceof Error) {
    return { errorType: error.name, errorMessage: error.message, trace: (error.stack ?? '').split('\n') };
  }
  return { errorType: 'Error', errorMessage: String(error), trace: [] };
}

/** A service error the SDK parses: code in `x-amzn-ErrorType`, `{ Type, message, …extra }` body. */
function sendError(
  res: ServerResponse,
  status: number,
  type: string,
  message: string,
  requestId: string,
  extra: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify({ Type: status >= 500 ? 'Service' : 'User', message, ...extra });
  res
    .writeHead(status, {
      'content-type': 'application/json',
      'x-amzn-ErrorType': type,
      'x-amzn-RequestId': requestId,
      'content-length': Buffer.byteLength(body),
    })
    .end(body);
}
