// A local stand-in for an API Gateway HTTP API with IAM auth: it checks every request's SigV4
// signature (service execute-api) by computing it again with the maintained signer from the
// credentials it knows, refuses what does not match as API Gateway does (403), and passes what
// does to an upstream server (the real API handler behind leasehold's local HTTP server).
import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { Sha256 } from '@smithy/core/checksum';
import { HttpRequest } from '@smithy/core/protocols';
import { SignatureV4 } from '@smithy/signature-v4';

/** Credentials the stand-in accepts. */
export interface GatewayCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** One request as the stand-in judged it. */
export interface GatewayRecord {
  method: string;
  path: string;
  /** Whether the signature matched. */
  verified: boolean;
  /** Why not, when it did not. */
  reason?: string;
  signedHeaders: string[];
}

/** A running stand-in. */
export interface SigV4Gateway {
  url: string;
  records: GatewayRecord[];
  close(): Promise<void>;
}

const AUTH =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/;

/** `20261130T204512Z` → a Date. */
function amzDate(s: string | undefined): Date | undefined {
  const m = s && /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s);
  return m ? new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6])) : undefined;
}

/** The whole request body. */
export function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/**
 * Why the request's signature is not one `credentials` made for `service` (default
 * `execute-api`; a function URL's is `lambda`) in `region`, or
 * undefined when it is: the authorization header's form, key, scope and date (within 5 minutes),
 * then the whole signature computed again over the request as received (method, path, query,
 * the signed headers, the body's hash and the session token).
 */
export async function sigV4Refusal(
  req: IncomingMessage,
  body: Buffer,
  credentials: GatewayCredentials,
  region: string,
  service = 'execute-api',
): Promise<string | undefined> {
  const auth = req.headers.authorization;
  if (!auth) return 'Missing Authentication Token';
  const m = AUTH.exec(auth);
  if (!m) return 'Authorization header is not a SigV4 signature';
  const [, keyId, day, scopeRegion, scopeService, signedList] = m;
  if (keyId !== credentials.accessKeyId) return 'The security token included in the request is invalid.';
  if (scopeRegion !== region || scopeService !== service)
    return `Credential should be scoped to a valid region and service ${service}, not ${scopeRegion}/${scopeService}`;
  const date = amzDate(req.headers['x-amz-date'] as string | undefined);
  if (!date || date.toISOString().slice(0, 10).replace(/-/g, '') !== day)
    return 'x-amz-date missing or not the credential scope date';
  if (Math.abs(Date.now() - date.getTime()) > 5 * 60_000) return 'Signature expired';
  const signed = signedList.split(';');
  if (!signed.includes('host')) return 'host must be signed';
  // What the signer adds itself is left out, so it is computed again: the payload hash from the
  // body received, the date and the token from the credentials.
  const headers: Record<string, string> = {};
  for (const name of signed) {
    if (name === 'x-amz-date' || name === 'x-amz-content-sha256' || name === 'x-amz-security-token') continue;
    const v = req.headers[name];
    if (v === undefined) return `signed header ${name} is missing`;
    headers[name] = Array.isArray(v) ? v.join(',') : v;
  }
  const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
  const query: Record<string, string | string[]> = {};
  for (const [k, v] of url.searchParams) {
    const prior = query[k];
    query[k] = prior === undefined ? v : [prior, v].flat();
  }
  const signer = new SignatureV4({ service, region, credentials, sha256: Sha256 });
  const expected = (await signer.sign(
    new HttpRequest({
      method: req.method ?? 'GET',
      protocol: 'http:',
      hostname: url.hostname,
      port: url.port ? Number(url.port) : undefined,
      path: url.pathname,
      query,
      headers,
      body: body.length > 0 ? body : undefined,
    }),
    { signingDate: date },
  )) as HttpRequest;
  const want = Buffer.from(String(expected.headers.authorization));
  const got = Buffer.from(auth);
  if (want.length !== got.length || !timingSafeEqual(want, got)) {
    return 'The request signature we calculated does not match the signature you provided.';
  }
  return undefined;
}

/**
 * Start the stand-in on 127.0.0.1: verified requests are passed to `upstream` (its answer passed
 * back), others get 403 `{ message }` as API Gateway answers them.
 */
export async function startSigV4Gateway(options: {
  credentials: GatewayCredentials;
  region: string;
  upstream: string;
}): Promise<SigV4Gateway> {
  const records: GatewayRecord[] = [];
  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = await readAll(req);
      const reason = await sigV4Refusal(req, body, options.credentials, options.region);
      const signedHeaders = /SignedHeaders=([^,]+)/.exec(req.headers.authorization ?? '')?.[1].split(';') ?? [];
      records.push({ method: req.method ?? 'GET', path: req.url ?? '/', verified: reason === undefined, reason, signedHeaders });
      if (reason) {
        res
          .writeHead(403, { 'content-type': 'application/json', 'x-amzn-errortype': 'ForbiddenException' })
          .end(JSON.stringify({ message: reason }));
        return;
      }
      const up = await fetch(new URL(req.url ?? '/', options.upstream), {
        method: req.method,
        headers: Object.fromEntries(
          ['content-type', 'idempotency-key'].flatMap((h) => (req.headers[h] ? [[h, String(req.headers[h])]] : [])),
        ),
        body: body.length > 0 ? new Uint8Array(body) : undefined,
      });
      const text = Buffer.from(await up.arrayBuffer());
      const headers: Record<string, string> = {};
      for (const h of ['content-type', 'allow', 'location']) {
        const v = up.headers.get(h);
        if (v) headers[h] = v;
      }
      res.writeHead(up.status, headers).end(text);
    })().catch((e: unknown) => {
      if (!res.headersSent)
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ message: String(e) }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    records,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
