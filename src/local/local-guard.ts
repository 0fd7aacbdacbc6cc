// Keeps web pages of other sites away from a server on this machine: a browser sends requests
// to 127.0.0.1 from any page it shows, so a local server that acts on them must check where they
// come from.
import type { IncomingMessage } from 'node:http';

/**
 * Why a request that changes something (any method but GET, HEAD, OPTIONS) must be refused as
 * coming from another site's page: its `Origin` (which browsers send on such requests) is not the
 * server's own (`http://` + its `Host`). Undefined when it may go on; requests without an
 * `Origin` (the CLI, curl) may.
 */
export function crossSiteRefusal(req: IncomingMessage): string | undefined {
  const method = req.method ?? 'GET';
  if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS') return undefined;
  const origin = req.headers.origin;
  if (origin === undefined) return undefined;
  if (origin === `http://${req.headers.host ?? ''}`) return undefined;
  return `${method} from a page of ${origin} is refused: only this server's own pages may change anything`;
}

/**
 * Why a request must be refused as not addressed to this machine's loopback: its `Host` is not
 * `127.0.0.1`, `localhost` or `[::1]`, with the server's `port` or none (a page of another site whose
 * name was made to resolve to 127.0.0.1, a DNS rebinding, would send its own name). Undefined
 * when it may go on.
 */
export function foreignHostRefusal(req: IncomingMessage, port: number): string | undefined {
  const host = (req.headers.host ?? '').toLowerCase();
  const names = ['127.0.0.1', 'localhost', '[::1]'];
  if (names.includes(host) || names.some((name) => host === `${name}:${port}`)) return undefined;
  return `Host "${req.headers.host ?? ''}" is refused: this server answers at http://127.0.0.1:${port}/ only`;
}

/** The names of this machine's loopback, as a server's listen host. */
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/**
 * {@link foreignHostRefusal} for a server listening on `listenHost` at the port the request came
 * in on. A server bound to an address other than the loopback (a user's explicit choice, for
 * example inside a container) is reached by other names, so it does not check the `Host`.
 */
export function rebindingRefusal(req: IncomingMessage, listenHost: string): string | undefined {
  if (!LOOPBACK.has(listenHost)) return undefined;
  return foreignHostRefusal(req, req.socket.localPort ?? 0);
}

/**
 * Why a request to a server that has no pages (the local Lambda invoke endpoint) must be refused
 * as sent by a browser: it carries an `Origin`, which browsers add to every cross-origin request
 * and SDKs never send. Undefined when it may go on.
 */
export function browserRefusal(req: IncomingMessage): string | undefined {
  const origin = req.headers.origin;
  if (origin === undefined) return undefined;
  return `a request from a page of ${origin} is refused: this endpoint serves SDK calls only`;
}
