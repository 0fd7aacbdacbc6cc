// A TCP proxy in front of the test PostgreSQL that can make its connections die silently, the way
// pooled connections of a frozen Lambda container die: the server side is gone, the client does
// not know until its next write, which is answered with a reset.
import { connect as netConnect, createServer, type Server, type Socket } from 'node:net';

/** A running proxy. */
export interface DyingProxy {
  /** `url` with its host and port replaced by the proxy's. */
  url: string;
  /** Connections accepted so far. */
  accepted(): number;
  /**
   * Kill every open connection silently: the server side is closed now; the client side stays
   * open and is reset (RST) when the client next writes.
   */
  killSilently(): void;
  close(): Promise<void>;
}

/** Start a proxy on 127.0.0.1 in front of the PostgreSQL of `url`. */
export async function dyingProxy(url: string): Promise<DyingProxy> {
  const target = new URL(url);
  const upstreamPort = Number(target.port || 5432);
  const upstreamHost = target.hostname;
  const pairs = new Set<{ client: Socket; server: Socket; dead: boolean }>();
  let accepted = 0;
  const server: Server = createServer((client) => {
    accepted++;
    const upstream = netConnect(upstreamPort, upstreamHost);
    const pair = { client, server: upstream, dead: false };
    pairs.add(pair);
    client.on('data', (chunk) => {
      if (pair.dead) return void client.resetAndDestroy();
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!pair.dead) client.write(chunk);
    });
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    client.on('close', drop);
    upstream.on('error', () => {
      if (!pair.dead) drop();
    });
    upstream.on('close', () => {
      if (!pair.dead) drop();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(port);
  return {
    url: proxied.toString(),
    accepted: () => accepted,
    killSilently: () => {
      for (const p of pairs) {
        p.dead = true;
        p.server.destroy();
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const p of pairs) {
          p.client.destroy();
          p.server.destroy();
        }
        server.close(() => resolve());
      }),
  };
}
