// A stub HTTP endpoint in front of the local S3 server (test/support/s3.ts): each request is
// answered as `plan` says, a real HTTP answer on a real socket, never a mock of the SDK or of
// leasehold's code: passed on to the server, a 503 SlowDown, a 500 InternalError, or passed on
// with its body stalled after the first chunk (the connection stays open, nothing more comes).
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { S3Client } from '@aws-sdk/client-s3';

/** What the stub does with one request. */
export type StubAnswer = 'pass' | 'slowdown' | 'internal' | 'stall';

/** A running stub. */
export interface S3Stub {
  /** `http://127.0.0.1:PORT`. */
  endpoint: string;
  /** A client of the stub (s3rver's credentials, path-style, `maxAttempts` as given, default 1). */
  client(options?: { maxAttempts?: number; requestHandler?: S3Client['config']['requestHandler'] }): S3Client;
  /** What each request was answered, in order, as `METHOD answer`. */
  log: string[];
  /** Resolves when a stalled answer has sent its headers and first chunk. */
  stalled(): Promise<void>;
  close(): Promise<void>;
}

const ERROR_XML = (code: string, message: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>stub</RequestId></Error>`;

/** Start a stub on a free port of 127.0.0.1 in front of `upstream` (`http://127.0.0.1:PORT`). */
export async function s3Stub(upstream: string, plan: (req: IncomingMessage, n: number) => StubAnswer): Promise<S3Stub> {
  const up = new URL(upstream);
  const log: string[] = [];
  const sockets = new Set<Socket>();
  let onStall: (() => void)[] = [];
  const server: Server = createServer((req, res) => {
    const answer = plan(req, log.length);
    log.push(`${req.method} ${answer}`);
    if (answer === 'slowdown' || answer === 'internal') {
      req.resume();
      const [status, code, message] =
        answer === 'slowdown'
          ? [503, 'SlowDown', 'Please reduce your request rate.']
          : [500, 'InternalError', 'We encountered an internal error.'];
      res.writeHead(status, { 'content-type': 'application/xml' });
      res.end(req.method === 'HEAD' ? undefined : ERROR_XML(code, message));
      return;
    }
    const fwd = request(
      { host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers },
      (upRes: IncomingMessage) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        if (answer === 'pass') return void upRes.pipe(res);
        upRes.once('data', (chunk: Buffer) => {
          res.write(chunk.subarray(0, Math.max(1, Math.floor(chunk.length / 2))));
          upRes.destroy();
          for (const f of onStall) f();
          onStall = [];
        });
      },
    );
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    endpoint,
    log,
    client: (options = {}) =>
      new S3Client({
        region: 'us-east-1',
        endpoint,
        forcePathStyle: true,
        credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
        maxAttempts: options.maxAttempts ?? 1,
        ...(options.requestHandler ? { requestHandler: options.requestHandler } : {}),
      }),
    stalled: () => new Promise<void>((resolve) => onStall.push(resolve)),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
