// Shared pieces of the API tests: real-shaped API Gateway v2 events, a local Lambda invoke
// endpoint that records what the API dispatched, temp folders for the checksum job, and
// handler dependencies on a real test schema.
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { LambdaClient } from '@aws-sdk/client-lambda';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { afterAll, beforeAll, expect } from 'vitest';
import { handleApi, type ApiDeps } from '../../src/api/index.js';
import { defaultRegistry, type JobRegistry } from '../../src/jobs/index.js';
import { NO_WORKER_LIMIT } from '../../src/lease/index.js';
import { LambdaDispatcher } from '../../src/runtime/index.js';
import { WorkerDispatcher } from '../../src/runtime/dispatch.js';
import type { Sql } from '../../src/store/index.js';
import { silentLog } from '../../src/log.js';
import { testDatabase, type TestDatabase } from './db.js';

/** Options of {@link apiEvent}. */
export interface EventOptions {
  /** An object is sent as JSON; a string is sent as is. */
  body?: unknown;
  headers?: Record<string, string>;
  query?: Record<string, string>;
  /** Send the body base64-encoded, as API Gateway does for binary content. */
  base64?: boolean;
  /** Stage name; default `$default` (no prefix in the path). */
  stage?: string;
}

/**
 * An API Gateway HTTP API (payload 2.0) event as the service sends it: lowercased header
 * names, `rawPath`/`rawQueryString`, `requestContext.http`, string body.
 */
export function apiEvent(method: string, path: string, options: EventOptions = {}): APIGatewayProxyEventV2 {
  const headers: Record<string, string> = { host: 'abc123.execute-api.eu-west-1.amazonaws.com', 'user-agent': 'vitest' };
  let body: string | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(body));
  }
  for (const [k, v] of Object.entries(options.headers ?? {})) headers[k.toLowerCase()] = v;
  if (body !== undefined && options.base64) body = Buffer.from(body, 'utf8').toString('base64');
  const rawQueryString = new URLSearchParams(options.query ?? {}).toString();
  const stage = options.stage ?? '$default';
  const now = Date.now();
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString,
    headers,
    ...(options.query ? { queryStringParameters: options.query } : {}),
    requestContext: {
      accountId: '123456789012',
      apiId: 'abc123',
      domainName: headers.host,
      domainPrefix: 'abc123',
      http: { method, path, protocol: 'HTTP/1.1', sourceIp: '203.0.113.7', userAgent: 'vitest' },
      requestId: randomUUID(),
      routeKey: '$default',
      stage,
      time: new Date(now).toUTCString(),
      timeEpoch: now,
    },
    ...(body !== undefined ? { body } : {}),
    isBase64Encoded: options.base64 ?? false,
  };
}

/** A handler answer with its JSON body parsed. */
export interface Answer {
  status: number;
  headers: Record<string, string | number | boolean>;
  // The tests read fields freely; the handler's types are checked in src.
  body: any;
  raw: APIGatewayProxyStructuredResultV2;
}

/** Parse a handler result, checking what every answer must have: JSON with its content type. */
export function answer(raw: APIGatewayProxyStructuredResultV2): Answer {
  expect(raw.headers?.['content-type']).toBe('application/json');
  expect(typeof raw.body).toBe('string');
  return { status: raw.statusCode ?? 200, headers: raw.headers ?? {}, body: JSON.parse(raw.body!), raw };
}

/** One invoke request received by {@link InvokeEndpoint}. */
export interface InvokeRecord {
  functionName: string;
  invocationType: string | undefined;
  payload: unknown;
}

/**
 * A local Lambda Invoke endpoint (the real Lambda REST path and headers), recording every
 * invoke. `failing = true` makes it refuse invokes the way Lambda does (4xx with an error type).
 */
export class InvokeEndpoint {
  readonly invokes: InvokeRecord[] = [];
  failing = false;
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(): Promise<InvokeEndpoint> {
    // eslint-disable-next-line prefer-const -- assigned once the server listens; its handler reads it
    let self!: InvokeEndpoint;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const m = /^\/2015-03-31\/functions\/([^/]+)\/invocations/.exec(req.url ?? '');
        if (!m || req.method !== 'POST') {
          res.writeHead(404, { 'content-type': 'application/json', 'x-amzn-errortype': 'UnknownOperationException' });
          return res.end(JSON.stringify({ message: 'unknown operation' }));
        }
        if (self.failing) {
          res.writeHead(403, { 'content-type': 'application/json', 'x-amzn-errortype': 'AccessDeniedException' });
          return res.end(JSON.stringify({ Message: 'not allowed to invoke' }));
        }
        const text = Buffer.concat(chunks).toString('utf8');
        self.invokes.push({
          functionName: decodeURIComponent(m[1]),
          invocationType: req.headers['x-amz-invocation-type'] as string | undefined,
          payload: text ? JSON.parse(text) : undefined,
        });
        res.writeHead(202, { 'x-amzn-requestid': randomUUID() });
        res.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    self = new InvokeEndpoint(server, `http://127.0.0.1:${port}`);
    return self;
  }

  /** A real {@link LambdaDispatcher} whose SDK client talks to this endpoint. */
  dispatcher(functionName = 'leasehold-worker'): LambdaDispatcher {
    const client = new LambdaClient({
      endpoint: this.url,
      region: 'eu-west-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      maxAttempts: 1,
    });
    return new LambdaDispatcher(functionName, client);
  }

  /** Batch ids sent to workers, in order. */
  batchIds(): string[] {
    return this.invokes.map((i) => (i.payload as { batchId?: string } | undefined)?.batchId ?? '');
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** A folder under the OS temp dir with the given files (relative path → content). */
export async function tempTree(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-api-'));
  for (const [rel, content] of Object.entries(files)) {
    const path = join(dir, rel);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, content);
  }
  return dir;
}

export const removeTree = (dir: string) => rm(dir, { recursive: true, force: true });

/** Handler dependencies on `sql`, with the built-in jobs reading under `allowedRoots`. */
export function apiDeps(
  sql: Sql,
  endpoint: InvokeEndpoint,
  overrides: { maxOpen?: number; maxBodyBytes?: number; allowedRoots?: string[]; jobs?: JobRegistry; log?: ApiDeps['log'] } = {},
): ApiDeps {
  return {
    sql,
    jobs: overrides.jobs ?? defaultRegistry({ allowedRoots: overrides.allowedRoots ?? [tmpdir()], maxItems: 1000 }),
    config: { maxOpen: overrides.maxOpen ?? 4, maxBodyBytes: overrides.maxBodyBytes ?? 65_536 },
    // The runtime's defaults: no worker limit, the confirmation window of 30 s.
    workers: new WorkerDispatcher(sql, endpoint.dispatcher(), { maxWorkers: NO_WORKER_LIMIT, invocationPendingMs: 30_000 }),
    log: overrides.log ?? silentLog,
  };
}

/** Call the handler and parse its answer. */
export async function call(deps: ApiDeps, method: string, path: string, options?: EventOptions): Promise<Answer> {
  return answer(await handleApi(apiEvent(method, path, options), deps));
}

let seq = 0;
/** A tenant name unique within this test process, so tests never share maxOpen budgets. */
export function uniqueTenant(prefix = 't'): string {
  seq += 1;
  return `${prefix}-${process.pid}-${seq}`;
}

/** What an API test file works on: set by {@link apiSuite}'s `beforeAll`, closed by its `afterAll`. */
export interface ApiSuite {
  /** The file's own schema on the test database. */
  db: TestDatabase;
  /** The local Lambda invoke endpoint the API dispatches workers to. */
  endpoint: InvokeEndpoint;
  /** The API handler's dependencies on `db` and `endpoint`. */
  deps: ApiDeps;
  /** A temp folder holding `files`, for checksum batches (removed after the file's tests). */
  dir: string;
}

/**
 * The setup every API test file shares, registered as the file's `beforeAll` and `afterAll`: a
 * test schema, an invoke endpoint, {@link apiDeps} with `overrides`, and a temp tree of `files`
 * (relative path → content). Read the fields inside tests and hooks only (they are set once the
 * file's `beforeAll` has run).
 */
export function apiSuite(files: Record<string, string>, overrides: Parameters<typeof apiDeps>[2] = {}): ApiSuite {
  const suite = {} as ApiSuite;
  beforeAll(async () => {
    suite.db = await testDatabase();
    suite.endpoint = await InvokeEndpoint.start();
    suite.deps = apiDeps(suite.db.sql, suite.endpoint, overrides);
    suite.dir = await tempTree(files);
  });
  afterAll(async () => {
    if (suite.dir) await removeTree(suite.dir);
    await suite.endpoint?.close();
    await suite.db?.close();
  });
  return suite;
}
