// The local stand-in for API Gateway (docs/design.md, "Local mode"): an HTTP server that turns each
// request into an HTTP API payload format 2.0 event for the API handler, as deployed with IAM
// auth, and writes the handler's result back as API Gateway would.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type {
  APIGatewayEventRequestContextIAMAuthorizer,
  APIGatewayProxyEventV2WithIAMAuthorizer,
  APIGatewayProxyResultV2,
} from 'aws-lambda';
import { createLambdaContext, type LambdaLikeContext } from './context.js';
import { closeServer, listen, readBody } from './http-util.js';
import { crossSiteRefusal, rebindingRefusal } from './local-guard.js';

/**
 * The API handler: receives an HTTP API v2 event (with the IAM authorizer block a deployed
 * API with IAM auth carries, so handlers typed for `APIGatewayProxyEventV2` fit too) and
 * returns a structured result, a string, or any JSON value (API Gateway's inferred format).
 */
export type HttpApiHandler = (
  event: APIGatewayProxyEventV2WithIAMAuthorizer,
  context: LambdaLikeContext,
) => Promise<APIGatewayProxyResultV2>;

/** One answered request, as reported to `onResponse`. */
export interface HttpExchange {
  method: string;
  /** Path without the query string. */
  path: string;
  statusCode: number;
  /** `requestContext.requestId` of the event (also the context's `awsRequestId`). */
  requestId: string;
  durationMs: number;
}

/** API Gateway's own limit on an HTTP API request's payload: 10 MB, bytes. */
export const API_GATEWAY_MAX_BODY_BYTES = 10_485_760;

/** Options of {@link startHttpServer}. */
export interface HttpServerOptions {
  /** Port to listen on; 0 means any free port. */
  port: number;
  /** Default `127.0.0.1`. */
  host?: string;
  handler: HttpApiHandler;
  /**
   * Largest request body, bytes; larger ones get 413 without calling the handler. Default
   * {@link API_GATEWAY_MAX_BODY_BYTES}, the gateway's own limit, so the API's smaller
   * `LEASEHOLD_MAX_BODY_BYTES` decides first, as it does when deployed.
   */
  maxBodyBytes?: number;
  /**
   * How long the handler may take, ms (API Gateway's integration timeout is 30 s). The context's
   * remaining time counts down from it; past it the client gets 503 and the late result is
   * dropped. Default 30,000.
   */
  timeoutMs?: number;
  /** The caller identity put in `requestContext.authorizer.iam`. Default a local IAM user. */
  iam?: APIGatewayEventRequestContextIAMAuthorizer['iam'];
  /**
   * Serves requests that are not for the API (the dashboard's page and assets) before the API
   * sees them: resolves to true when it answered the request. Default none.
   */
  assets?: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
  /** Called after each API response is written. Exceptions thrown by observers are ignored. */
  onResponse?(exchange: HttpExchange): void;
  /** Called when the handler throws, times out or returns something unusable (the client got 500/503). */
  onError?(error: unknown, event: APIGatewayProxyEventV2WithIAMAuthorizer): void;
}

/** A listening server, from {@link startHttpServer}. */
export interface HttpServer {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** Stop accepting connections, let requests in progress finish, then close. Idempotent. */
  close(): Promise<void>;
}

/** The identity a local request carries in place of a SigV4-signed caller. */
export const LOCAL_IAM_IDENTITY: APIGatewayEventRequestContextIAMAuthorizer['iam'] = {
  accessKey: 'LOCAL',
  accountId: '000000000000',
  callerId: 'LOCAL',
  cognitoIdentity: null,
  principalOrgId: '',
  userArn: 'arn:aws:iam::000000000000:user/local',
  userId: 'LOCAL',
};

/**
 * Serve `handler` over HTTP on `host:port` as API Gateway (HTTP API, payload format 2.0,
 * `$default` route and stage) would:
 * - event: `rawPath`, `rawQueryString` as received; `headers` lower-cased, repeated ones joined
 *   with `,` (cookies go to `cookies`, not `headers`); `queryStringParameters` decoded, repeated
 *   ones joined with `,`, absent without a query; `body` as text for UTF-8 text types
 *   (text/*, JSON, XML, forms, JavaScript) and base64 with `isBase64Encoded` otherwise.
 * - response: `statusCode` (default 200), `headers`, `cookies` as `set-cookie` headers, `body`
 *   (base64-decoded when `isBase64Encoded`). A result without `statusCode` is sent as JSON.
 * - body above `maxBodyBytes`: 413 `{ error: { code: 'payload_too_large', message } }`;
 *   handler throws or returns an invalid result: 500 `{ error: { code: 'internal', message } }`;
 *   past `timeoutMs`: 503 `{ error: { code: 'timeout', message } }`. The server never crashes on them.
 * - a request that would change something sent by another site's page (an `Origin` that is not
 *   this server's): 403 `{ error: { code: 'forbidden', message } }`, without calling the handler.
 * - on a loopback `host`, a request whose `Host` is not the loopback with this port (DNS
 *   rebinding): 403 `forbidden` as well, for every method and path, the dashboard's included.
 * @throws {LocalPortInUseError} `port` is taken.
 */
export async function startHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const host = options.host ?? '127.0.0.1';
  const maxBodyBytes = options.maxBodyBytes ?? API_GATEWAY_MAX_BODY_BYTES;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const observe = <A extends unknown[]>(fn: ((...args: A) => void) | undefined, ...args: A) => {
    try {
      fn?.(...args);
    } catch {
      // an observer's failure must not disturb requests
    }
  };

  let inFlight = 0;
  let drainWaiters: (() => void)[] = [];
  const drained = () => (inFlight === 0 ? Promise.resolve() : new Promise<void>((r) => drainWaiters.push(r)));

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    // A page of another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends
    // its own name as Host and its own origin: it is same-origin to the browser, so only the
    // Host tells it apart.
    const rebinding = rebindingRefusal(req, host);
    if (rebinding) {
      req.resume();
      const body = Buffer.from(JSON.stringify({ error: { code: 'forbidden', message: rebinding } }));
      res.writeHead(403, { 'content-type': 'application/json', 'content-length': String(body.length) }).end(body);
      return;
    }
    if (options.assets && (await options.assets(req, res))) return;
    const startedAtMs = Date.now();
    const requestId = randomUUID();
    const [rawPath, rawQueryString] = splitUrl(req.url ?? '/');
    const send = (statusCode: number, headers: Record<string, string | string[]>, body: Buffer) => {
      if (res.headersSent || res.destroyed) return;
      res.writeHead(statusCode, { ...headers, 'content-length': String(body.length) }).end(body);
      observe(options.onResponse, {
        method: req.method ?? 'GET',
        path: rawPath,
        statusCode,
        requestId,
        durationMs: Date.now() - startedAtMs,
      });
    };
    const sendError = (statusCode: number, code: string, message: string) =>
      send(statusCode, { 'content-type': 'application/json' }, Buffer.from(JSON.stringify({ error: { code, message } })));

    // The API has no login locally: a page of another site must not be able to change anything.
    const refusal = crossSiteRefusal(req);
    if (refusal) return sendError(403, 'forbidden', refusal);
    const body = await readBody(req, maxBodyBytes);
    if (body === undefined) return sendError(413, 'payload_too_large', `request body exceeds ${maxBodyBytes} bytes`);

    const event = toEvent(req, rawPath, rawQueryString, body, requestId, startedAtMs, options.iam ?? LOCAL_IAM_IDENTITY);
    const context = createLambdaContext({ functionName: 'api', timeoutMs, startedAtMs, awsRequestId: requestId });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs)));
    try {
      const result = await Promise.race([Promise.resolve().then(() => options.handler(event, context)), timedOut]);
      if (result === 'timeout') {
        observe(options.onError, new Error(`the handler did not answer within ${timeoutMs} ms`), event);
        return sendError(503, 'timeout', `the API did not answer within ${timeoutMs} ms`);
      }
      const response = toResponse(result);
      send(response.statusCode, response.headers, response.body);
    } catch (error) {
      observe(options.onError, error, event);
      sendError(500, 'internal', error instanceof Error ? error.message : String(error));
    } finally {
      clearTimeout(timer);
    }
  };

  const server = createServer((req, res) => {
    inFlight++;
    handle(req, res)
      .catch(() => {
        if (!res.headersSent) res.writeHead(500).end();
        else res.destroy();
      })
      .finally(() => {
        if (--inFlight === 0) {
          const waiters = drainWaiters;
          drainWaiters = [];
          for (const w of waiters) w();
        }
      });
  });
  const { port, url } = await listen(server, options.port, host);
  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    close: () => (closing ??= closeServer(server, drained())),
  };
}

function splitUrl(url: string): [string, string] {
  const q = url.indexOf('?');
  return q < 0 ? [url, ''] : [url.slice(0, q), url.slice(q + 1)];
}

/** Content types whose (valid UTF-8) bodies API handlers get as text rather than base64. */
const TEXT_TYPE =
  /^(text\/[^;]+|application\/(json|[^;]+\+json|xml|[^;]+\+xml|x-www-form-urlencoded|javascript|ecmascript|graphql|x-ndjson|yaml|x-yaml|csv))\s*(;|$)/i;

const utf8 = new TextDecoder('utf-8', { fatal: true });

function toEvent(
  req: IncomingMessage,
  rawPath: string,
  rawQueryString: string,
  body: Buffer,
  requestId: string,
  timeEpoch: number,
  iam: APIGatewayEventRequestContextIAMAuthorizer['iam'],
): APIGatewayProxyEventV2WithIAMAuthorizer {
  const headers: Record<string, string> = {};
  let cookies: string[] | undefined;
  for (const [name, values] of Object.entries(req.headersDistinct)) {
    if (!values) continue;
    if (name === 'cookie') {
      cookies = values.flatMap((v) => v.split(';').map((c) => c.trim())).filter((c) => c !== '');
    } else headers[name] = values.join(',');
  }
  const sourceIp = (req.socket.remoteAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
  headers['x-forwarded-for'] ??= sourceIp;
  headers['x-forwarded-proto'] ??= 'http';
  headers['x-forwarded-port'] ??= String(req.socket.localPort ?? '');

  let queryStringParameters: Record<string, string> | undefined;
  if (rawQueryString !== '') {
    queryStringParameters = {};
    for (const [key, value] of new URLSearchParams(rawQueryString)) {
      const prior = queryStringParameters[key];
      queryStringParameters[key] = prior === undefined ? value : `${prior},${value}`;
    }
  }

  let text: string | undefined;
  if (body.length > 0 && TEXT_TYPE.test(headers['content-type'] ?? '')) {
    try {
      text = utf8.decode(body);
    } catch {
      // not valid UTF-8 despite its type: sent as base64 below
    }
  }
  const domainName = headers.host ?? '127.0.0.1';
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath,
    rawQueryString,
    ...(cookies?.length ? { cookies } : {}),
    headers,
    ...(queryStringParameters ? { queryStringParameters } : {}),
    requestContext: {
      accountId: iam.accountId,
      apiId: 'local',
      authorizer: { iam },
      domainName,
      domainPrefix: domainName.split('.')[0]!,
      http: {
        method: req.method ?? 'GET',
        path: rawPath,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp,
        userAgent: headers['user-agent'] ?? '',
      },
      requestId,
      routeKey: '$default',
      stage: '$default',
      time: clfTime(timeEpoch),
      timeEpoch,
    },
    ...(body.length > 0 ? { body: text ?? body.toString('base64') } : {}),
    isBase64Encoded: body.length > 0 && text === undefined,
  };
}

/** API Gateway's `requestContext.time`: `30/Nov/2026:09:28:15 +0000`. */
function clfTime(epochMs: number): string {
  const d = new Date(epochMs);
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getUTCDate())}/${months[d.getUTCMonth()]}/${d.getUTCFullYear()}:${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} +0000`;
}

interface Response {
  statusCode: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

/**
 * API Gateway's reading of a handler result: an object with `statusCode` is a structured
 * response; anything else is the JSON body of a 200 (a string is sent as it is).
 * @throws {Error} the structured response has an invalid status code or body.
 */
function toResponse(result: unknown): Response {
  if (typeof result === 'string') {
    return { statusCode: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(result) };
  }
  if (typeof result !== 'object' || result === null || !('statusCode' in result)) {
    return {
      statusCode: 200,
      headers: { 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify(result ?? null)),
    };
  }
  const r = result as { statusCode?: unknown; headers?: unknown; cookies?: unknown; body?: unknown; isBase64Encoded?: unknown };
  const statusCode = r.statusCode ?? 200;
  if (typeof statusCode !== 'number' || !Number.isInteger(statusCode) || statusCode < 100 || statusCode > 599) {
    throw new Error(`the handler returned an invalid statusCode: ${JSON.stringify(r.statusCode)}`);
  }
  if (r.body !== undefined && r.body !== null && typeof r.body !== 'string') {
    throw new Error(`the handler returned a body of type ${typeof r.body}; it must be a string`);
  }
  const headers: Record<string, string | string[]> = {};
  if (r.headers && typeof r.headers === 'object') {
    for (const [name, value] of Object.entries(r.headers as Record<string, unknown>)) {
      const lower = name.toLowerCase();
      // Framing is ours to set for the body actually sent.
      if (lower === 'content-length' || lower === 'transfer-encoding') continue;
      headers[lower] = String(value);
    }
  }
  if (Array.isArray(r.cookies) && r.cookies.length > 0) {
    const prior = headers['set-cookie'];
    headers['set-cookie'] = [...(prior === undefined ? [] : [prior].flat()), ...r.cookies.map(String)];
  }
  const text = typeof r.body === 'string' ? r.body : '';
  return { statusCode, headers, body: r.isBase64Encoded === true ? Buffer.from(text, 'base64') : Buffer.from(text, 'utf8') };
}
