// The dashboard's files (built by `npm run build` into dist/dashboard/), served by `leasehold dev`
// next to the API and by `leasehold dashboard` next to its signing forwarder.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';

/** The page and its two assets, by request path. */
const FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/dashboard/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/dashboard/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
  '/dashboard/LICENSES.txt': { file: 'LICENSES.txt', type: 'text/plain; charset=utf-8' },
};

/**
 * What the browser may do with the page: only this origin's scripts, styles and API, no frames,
 * no inline script (the bundle sets styles through the DOM, which this allows).
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

/**
 * The folder of the built dashboard: `dist/dashboard/` of this package (next to `dist/src/` when
 * this module runs built, or under the package root when it runs from its TypeScript source).
 */
export function dashboardDir(): string {
  const built = fileURLToPath(new URL('../../dashboard/', import.meta.url));
  if (existsSync(built) && existsSync(`${built}index.html`)) return built;
  return fileURLToPath(new URL('../../dist/dashboard/', import.meta.url));
}

/** Serves the dashboard's files: {@link dashboardAssets}. */
export type AssetHandler = (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;

/**
 * A handler that answers `GET`/`HEAD` of the dashboard's page (`/`, also `/index.html`) and
 * assets (`/dashboard/…`) from `dir` (default {@link dashboardDir}), with a content security
 * policy, and resolves to true; any other request it leaves alone (false). A missing build is
 * answered 500 with what to run.
 */
export function dashboardAssets(dir = dashboardDir()): AssetHandler {
  const folder = dir.endsWith('/') ? dir : `${dir}/`;
  return async (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') return false;
    const path = (req.url ?? '/').split('?')[0];
    const entry = FILES[path === '/index.html' ? '/' : path];
    if (!entry) return false;
    let body: Buffer;
    try {
      body = await readFile(`${folder}${entry.file}`);
    } catch {
      const text = `the dashboard is not built (${folder}${entry.file} is missing): run \`npm run build\` in leasehold's folder`;
      res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(text);
      return true;
    }
    res.writeHead(200, { 'content-type': entry.type, 'content-length': String(body.length), ...SECURITY_HEADERS });
    res.end(req.method === 'HEAD' ? undefined : body);
    return true;
  };
}
