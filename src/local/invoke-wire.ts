// The wire format of the local Lambda Invoke API (docs/design.md, "Local mode"): reading an
// invocation request (route, guards, function name, invocation type, payload limits, JSON) and
// writing Lambda's answers (service errors, results, function errors), as the SDK parses them.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ClientContext } from 'aws-lambda';
import { readBody } from './http-util.js';
import { browserRefusal, rebindingRefusal } from './local-guard.js';
import type { JobOutcome, LocalInvocationType, LocalLambdaHandler } from './invoke-queue.js';

const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations\/?$/;

/** What {@link readInvocation} checks a request against. */
export interface InvocationLimits {
  /** The endpoint's own host, which a request's `Host` must name. */
  host: string;
  /** False once the endpoint is stopping. */
  accepting: boolean;
  functions: Record<string, LocalLambdaHandler>;
  region: string | undefined;
  maxEventPayloadBytes: number;
  maxPayloadBytes: number;
}

/** A request that passed every check. */
export interface InvocationRequest {
  /** The name in `functions` the requested name or ARN resolves to. */
  functionName: string;
  invocationType: LocalInvocationType | 'DryRun';
  event: unknown;
  clientContext?: ClientContext;
}

/**
 * Read and check one invocation request. A request that fails a check is answered here (403,
 * 404, 503, 400, 413 as documented on `createInvokeEndpoint`) and gives undefined.
 */
export async function readInvocation(
  req: IncomingMessage,
  res: ServerResponse,
  awsRequestId: string,
  limits: InvocationLimits,
): Promise<InvocationRequest | undefined> {
  const refused = (status: number, type: string, message: string) => {
    req.resume();
    sendError(res, status, type, message, awsRequestId);
    return undefined;
  };
  // Web pages may send requests to 127.0.0.1 too; the SDK sends no Origin and the loopback Host.
  const refusal = browserRefusal(req) ?? rebindingRefusal(req, limits.host);
  if (refusal) return refused(403, 'AccessDeniedException', refusal);
  const pathname = (req.url ?? '/').split('?')[0]!;
  const match = INVOKE_PATH.exec(pathname);
  if (!match || req.method !== 'POST')
    return refused(404, 'UnknownOperationException', `Unknown operation ${req.method} ${pathname}`);
  if (!limits.accepting) return refused(503, 'ServiceException', 'The local Lambda endpoint is stopping');
  const requested = safeDecode(match[1]!);
  const functionName = resolveFunctionName(requested, limits.functions);
  if (functionName === undefined) {
    const region = limits.region ?? process.env.AWS_REGION ?? 'us-east-1';
    return refused(
      404,
      'ResourceNotFoundException',
      `Function not found: arn:aws:lambda:${region}:000000000000:function:${requested}`,
    );
  }
  const invocationType = header(req, 'x-amz-invocation-type') ?? 'RequestResponse';
  if (!isInvocationType(invocationType))
    return refused(400, 'InvalidParameterValueException', `Unsupported invocation type: ${invocationType}`);
  const limit = invocationType === 'Event' ? limits.maxEventPayloadBytes : limits.maxPayloadBytes;
  const body = await readBody(req, limit);
  if (body === undefined) {
    sendError(
      res,
      413,
      'RequestEntityTooLargeException',
      `Request must be smaller than ${limit} bytes for the ${invocationType} invocation type`,
      awsRequestId,
    );
    return undefined;
  }
  let event: unknown;
  try {
    const text = body.toString('utf8');
    event = text.trim() === '' ? {} : JSON.parse(text);
  } catch (e) {
    sendError(
      res,
      400,
      'InvalidRequestContentException',
      `Could not parse request body into json: ${(e as Error).message}`,
      awsRequestId,
    );
    return undefined;
  }
  const clientContext = decodeClientContext(header(req, 'x-amz-client-context'));
  return { functionName, invocationType, event, ...(clientContext ? { clientContext } : {}) };
}

/**
 * Answer a `RequestResponse` caller with how its invocation ended: 200 with the result as JSON,
 * or a function error (`X-Amz-Function-Error: Unhandled`) for a throw, an unserialisable result
 * or one above `maxPayloadBytes` (`Function.ResponseSizeTooLarge`); 503 when it was dropped.
 */
export function replyWithOutcome(res: ServerResponse, outcome: JobOutcome, awsRequestId: string, maxPayloadBytes: number): void {
  if (outcome.kind === 'dropped') {
    return sendError(res, 503, 'ServiceException', 'The local Lambda endpoint stopped before the invocation ran', awsRequestId);
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
}

/** A service error the SDK parses: code in `x-amzn-ErrorType`, `{ Type, message, …extra }` body. */
export function sendError(
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
