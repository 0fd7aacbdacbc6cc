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
 * `127.0.0.1`, `localhost` or `[::1]` with the server's `port` (a page of another site whose
 * name was made to resolve to 127.0.0.1, a DNS rebinding, would send its own name). Undefined
 * when it may go on.
 */
export function foreignHostRefusal(req: IncomingMessage, port: number): string | undefined {
  const host = (req.headers.host ?? '').toLowerCase();
  if ([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`].includes(host)) return undefined;
  return `Host "${req.headers.host ?? ''}" is refused: open the dashboard at http://127.0.0.1:${port}/`;
}
