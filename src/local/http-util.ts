import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LeaseholdError } from '../errors.js';

/** A local server could not listen because its port is taken. `code` is stable. */
export class LocalPortInUseError extends LeaseholdError {
  constructor(
    readonly host: string,
    readonly port: number,
  ) {
    super(
      'port_in_use',
      `port ${port} on ${host} is already in use: stop what uses it or choose another port (--port N, or PORT; 0 picks a free one)`,
    );
  }
}

/**
 * Listen on `host:port` (0: any free port) and resolve with the port and base URL.
 * @throws {LocalPortInUseError} on `EADDRINUSE`; other listen errors as they are.
 */
export function listen(server: Server, port: number, host: string): Promise<{ port: number; url: string }> {
  return new Promise((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => reject(e.code === 'EADDRINUSE' ? new LocalPortInUseError(host, port) : e);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      const actual = (server.address() as AddressInfo).port;
      resolve({ port: actual, url: `http://${host.includes(':') ? `[${host}]` : host}:${actual}` });
    });
  });
}

/**
 * Close `server` once `drained` resolves: no new connections from now on, idle keep-alive
 * connections closed at once and again after draining, and any still open 1 s later destroyed.
 */
export async function closeServer(server: Server, drained: Promise<void>): Promise<void> {
  const closed = new Promise<void>((r) => server.close(() => r()));
  server.closeIdleConnections();
  await drained;
  server.closeIdleConnections();
  const force = setTimeout(() => server.closeAllConnections(), 1_000);
  await closed;
  clearTimeout(force);
}

/**
 * Read the request body. Resolves with it, or with undefined as soon as it is known to exceed
 * `limit` bytes (declared `content-length` or bytes received); the rest is then read and
 * dropped, so the client can still read the answer.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    const refuse = () => {
      tooLarge = true;
      chunks.length = 0;
      resolve(undefined);
    };
    req.on('data', (chunk: Buffer) => {
      if (tooLarge) return;
      size += chunk.length;
      if (size > limit) refuse();
      else chunks.push(chunk);
    });
    req.once('end', () => resolve(tooLarge ? undefined : Buffer.concat(chunks)));
    req.once('error', reject);
    if (Number(req.headers['content-length'] ?? 0) > limit) refuse();
  });
}
