// A local stand-in for the AWS Lambda Invoke API (docs/design.md, "Local mode"): the scheduler's and
// the API's real `@aws-sdk/client-lambda` calls reach local handlers when
// `AWS_ENDPOINT_URL_LAMBDA` points here. This file owns the endpoint's face and its server; the
// queue of invocations is src/local/invoke-queue.ts, the wire format src/local/invoke-wire.ts.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { systemNow, type NowClock } from './context.js';
import { closeServer, listen } from './http-util.js';
import { InvalidSettingError } from '../errors.js';
import {
  InvocationQueue,
  type InvocationInfo,
  type InvocationOutcome,
  type InvocationJob,
  type JobOutcome,
  type LocalLambdaHandler,
} from './invoke-queue.js';
import { readInvocation, replyWithOutcome, sendError, type InvocationLimits } from './invoke-wire.js';

export {
  LocalInvocationTimeoutError,
  type InvocationInfo,
  type InvocationOutcome,
  type LocalInvocationType,
  type LocalLambdaHandler,
} from './invoke-queue.js';

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
   * The memory size every invocation's context reports (`memoryLimitInMB`), MB: what a worker's
   * usage is counted at (docs/design.md, "Usage and cost"). Default 1,024.
   */
  memoryLimitInMB?: number;
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
   * 0 throttles every one. Lambda queues `Event` invocations above a reserved concurrency
   * instead, so they are never refused; at 0 (a function stopped by its operators) it answers
   * them 202 and runs none: the endpoint drops them too (counted in `dropped`). Changed while
   * serving by {@link InvokeEndpoint.setReservedConcurrency}. Default: no limit but `concurrency`.
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
  /** `Event` invocations answered 202 and never run: their function's reserved concurrency was 0. */
  readonly dropped: number;
  /**
   * Set (a number) or remove (undefined) a function's reserved concurrency while serving, as
   * `PutFunctionConcurrency` / `DeleteFunctionConcurrency` do; see `reservedConcurrency`.
   * @throws {InvalidSettingError} not a whole number ≥ 0.
   */
  setReservedConcurrency(functionName: string, reserved: number | undefined): void;
  /** Base URL once started. */
  readonly url: string | undefined;
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
 *   Above a function's `reservedConcurrency` (`RequestResponse`): 429 `TooManyRequestsException`;
 *   an `Event` to a function whose reserved concurrency is 0: 202, never run.
 *   A request a browser sent (it has an `Origin`), or one whose `Host` is not this loopback
 *   address and port: 403 `AccessDeniedException`.
 * - A `RequestResponse` result above `maxPayloadBytes` answers a `Function.ResponseSizeTooLarge`
 *   function error instead, as Lambda does.
 * Each invocation gets a {@link createLambdaContext} context with a fresh `awsRequestId`.
 * Handler failures go to `onError` and never reach the server.
 */
export function createInvokeEndpoint(options: InvokeEndpointOptions): InvokeEndpoint {
  const host = options.host ?? '127.0.0.1';
  const clock = options.clock ?? systemNow;
  const queue = queueOf(options, clock);
  const limits: InvocationLimits = {
    host,
    accepting: true,
    functions: options.functions,
    region: options.region,
    maxEventPayloadBytes: options.maxEventPayloadBytes ?? 262_144,
    maxPayloadBytes: options.maxPayloadBytes ?? 6_291_456,
  };
  let server: Server | undefined;
  let url: string | undefined;
  let stopping: Promise<void> | undefined;
  const reserved = reservations(options.reservedConcurrency);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const awsRequestId = randomUUID();
    const request = await readInvocation(req, res, awsRequestId, limits);
    if (request === undefined) return;
    const { functionName, invocationType, event, clientContext } = request;
    if (invocationType === 'DryRun') {
      res.writeHead(204, { 'x-amzn-RequestId': awsRequestId }).end();
      return;
    }
    const job: InvocationJob = {
      functionName,
      handler: options.functions[functionName]!,
      event,
      invocationType,
      awsRequestId,
      enqueuedAtMs: clock.now(),
      ...(clientContext ? { clientContext } : {}),
    };
    if (invocationType === 'Event') {
      res.writeHead(202, { 'x-amzn-RequestId': awsRequestId, 'content-length': '0' }).end();
      // Throttled to zero: accepted, never run (Lambda drops the event after its 202).
      if (reserved.of(functionName) === 0) reserved.dropped++;
      else queue.enqueue(job, () => {});
      return;
    }
    // Lambda queues Event invocations, so only a RequestResponse one meets reserved concurrency.
    const settle = (outcome: JobOutcome) => replyWithOutcome(res, outcome, awsRequestId, limits.maxPayloadBytes);
    if (!queue.enqueue(job, settle, reserved.of(functionName))) {
      sendError(res, 429, 'TooManyRequestsException', 'Rate Exceeded.', awsRequestId, {
        Reason: 'ReservedFunctionConcurrentInvocationLimitExceeded',
      });
    }
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
        limits.accepting = false;
        if (stopOptions.wait === false) queue.dropQueued();
        if (server) await closeServer(server, stopOptions.wait === false ? Promise.resolve() : queue.idle());
      })();
      return stopping;
    },

    running: () => queue.running(),
    queued: () => queue.queued(),
    idle: () => queue.idle(),
    get completed() {
      return queue.completed;
    },
    get failed() {
      return queue.failed;
    },
    get dropped() {
      return reserved.dropped;
    },
    setReservedConcurrency: (functionName, n) => reserved.set(functionName, n),
    get url() {
      return url;
    },
  };
}

/** Reserved concurrency by function name, changed while serving, and the `Event` invokes dropped at 0. */
function reservations(initial: Record<string, number> = {}) {
  const byName: Record<string, number> = { ...initial };
  return {
    dropped: 0,
    of: (functionName: string): number | undefined => byName[functionName],
    set(functionName: string, n: number | undefined): void {
      if (n === undefined) {
        delete byName[functionName];
        return;
      }
      if (!Number.isInteger(n) || n < 0)
        throw new InvalidSettingError('reservedConcurrency', `must be a whole number ≥ 0, got ${n}`);
      byName[functionName] = n;
    },
  };
}

/** The endpoint's queue of invocations, with its settings' defaults. @throws {InvalidSettingError} a bad `concurrency`. */
function queueOf(options: InvokeEndpointOptions, clock: NowClock): InvocationQueue {
  const concurrency = options.concurrency ?? 8;
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new InvalidSettingError('concurrency', `must be a positive integer, got ${concurrency}`);
  return new InvocationQueue({
    concurrency,
    timeoutMs: options.timeoutMs ?? 60_000,
    memoryLimitInMB: options.memoryLimitInMB,
    region: options.region,
    clock,
    onInvoke: options.onInvoke,
    onDone: options.onDone,
    onError: options.onError,
  });
}
