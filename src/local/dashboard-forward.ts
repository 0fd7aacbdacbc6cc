// The forwarding half of `leasehold dashboard --api URL` (docs/design.md, "Serverless runtime":
// the API keeps its IAM auth): one page request checked, signed with SigV4 for `execute-api` and
// sent to the stage's API, and the API's answer passed back. Serving the page and the server's
// lifetime are src/local/dashboard-proxy.ts.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpRequest } from '@smithy/core/protocols';
import type { SignatureV4 } from '@smithy/signature-v4';
import { readBody } from './http-util.js';

/** Headers of the page's requests that are forwarded (and signed); every other is dropped. */
const FORWARDED_HEADERS = ['content-type', 'idempotency-key', 'accept'];

/** Response headers of the API that are passed back to the page. */
const RETURNED_HEADERS = ['content-type', 'allow', 'location', 'retry-after'];

/** RFC 3986 encoding, as SigV4 canonicalises query strings. */
const escapeUri = (s: string) =>
  encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/** Where and how an {@link ApiForwarder} forwards. */
export interface ApiForwarderOptions {
  /** The API's base URL (no query). */
  base: URL;
  /** `base`'s path without a trailing slash; request paths are appended to it. */
  basePath: string;
  /** Signs for `execute-api` in the API's region. */
  signer: SignatureV4;
  /** How long one forwarded request may take, ms. */
  timeoutMs: number;
  /** Largest request body forwarded, bytes. */
  maxBodyBytes: number;
}

/** Forwards page requests to the API, signed, and answers with what the API answered. */
export class ApiForwarder {
  constructor(private readonly options: ApiForwarderOptions) {}

  /**
   * Forward one request: `GET`, `POST`, `PUT` or `DELETE` only (405), a body up to
   * `maxBodyBytes` (413); 401 `no_credentials` when it cannot be signed, 502 `api_unreachable`,
   * or 504 `api_timeout` after `timeoutMs`.
   */
  async forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { base, timeoutMs, maxBodyBytes } = this.options;
    const method = req.method ?? 'GET';
    if (!['GET', 'POST', 'PUT', 'DELETE'].includes(method)) {
      return sendJsonError(res, 405, 'method_not_allowed', `${method} is not forwarded to the API`, {
        allow: 'GET, POST, PUT, DELETE',
      });
    }
    const body = await readBody(req, maxBodyBytes);
    if (body === undefined) return sendJsonError(res, 413, 'body_too_large', `request body exceeds ${maxBodyBytes} bytes`);
    const { path, query } = this.target(req.url ?? '/');
    let signed: HttpRequest;
    try {
      signed = await this.sign(req, method, path, query, body);
    } catch (e) {
      return sendJsonError(
        res,
        401,
        'no_credentials',
        `no AWS credentials to sign the request with: ${(e as Error).message}. Set AWS_PROFILE (after \`aws sso login\`), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`,
      );
    }
    const search = Object.entries(query)
      .flatMap(([k, v]) => [v].flat().map((one) => `${escapeUri(k)}=${escapeUri(one)}`))
      .join('&');
    const target = `${base.protocol}//${base.host}${path}${search ? `?${search}` : ''}`;
    const { host: _host, ...sendHeaders } = signed.headers;
    let answer: Response;
    try {
      answer = await fetch(target, {
        method,
        headers: sendHeaders,
        body: body.length > 0 ? new Uint8Array(body) : undefined,
        redirect: 'manual',
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (e) {
      const err = e as Error;
      if (err.name === 'TimeoutError')
        return sendJsonError(res, 504, 'api_timeout', `the API did not answer within ${timeoutMs} ms`);
      return sendJsonError(
        res,
        502,
        'api_unreachable',
        `the API at ${base.origin} does not answer: ${(err.cause as Error)?.message ?? err.message}`,
      );
    }
    await passBack(answer, res);
  }

  /** The API path (`basePath` + the request's) and the query, repeated keys as arrays. */
  private target(raw: string): { path: string; query: Record<string, string | string[]> } {
    const q = raw.indexOf('?');
    const path = `${this.options.basePath}${q < 0 ? raw : raw.slice(0, q)}`;
    const query: Record<string, string | string[]> = {};
    for (const [k, v] of new URLSearchParams(q < 0 ? '' : raw.slice(q + 1))) {
      const prior = query[k];
      query[k] = prior === undefined ? v : [prior, v].flat();
    }
    return { path, query };
  }

  /** The request as it goes to the API: the forwarded headers only, signed. Throws without credentials. */
  private async sign(
    req: IncomingMessage,
    method: string,
    path: string,
    query: Record<string, string | string[]>,
    body: Buffer,
  ): Promise<HttpRequest> {
    const { base, signer } = this.options;
    const headers: Record<string, string> = { host: base.host };
    for (const name of FORWARDED_HEADERS) {
      const v = req.headers[name];
      if (typeof v === 'string') headers[name] = v;
    }
    return (await signer.sign(
      new HttpRequest({
        method,
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port ? Number(base.port) : undefined,
        path,
        query,
        headers,
        body: body.length > 0 ? body : undefined,
      }),
    )) as HttpRequest;
  }
}

/** The API's answer to the page: status, body and the {@link RETURNED_HEADERS}, never cached. */
async function passBack(answer: Response, res: ServerResponse): Promise<void> {
  const payload = Buffer.from(await answer.arrayBuffer());
  const out: Record<string, string> = { 'content-length': String(payload.length), 'cache-control': 'no-store' };
  for (const name of RETURNED_HEADERS) {
    const v = answer.headers.get(name);
    if (v !== null) out[name] = v;
  }
  res.writeHead(answer.status, out).end(payload);
}

/**
 * Answer `{ error: { code, message } }` with `status`; a response already under way is cut
 * instead, since a second head cannot be sent.
 */
export function sendJsonError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) return void res.destroy();
  const body = JSON.stringify({ error: { code, message } });
  res
    .writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers })
    .end(body);
}
