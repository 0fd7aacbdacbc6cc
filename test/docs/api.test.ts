// docs/api.md is the API's reference (the router's doc comment points there): it must name every
// route the router serves and every error code the API answers with, at its status.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HTTP_STATUS } from '../../src/api/errors.js';
import { apiRoutes } from '../../src/api/router.js';

const ROOT = resolve(import.meta.dirname, '../..');
const DOC = readFileSync(join(ROOT, 'docs', 'api.md'), 'utf8');

describe('docs/api.md', () => {
  it('names every route the router serves, method and path', () => {
    const routes = apiRoutes();
    expect(routes.length).toBeGreaterThan(20);
    const missing = routes.map(({ method, path }) => `${method} ${path}`).filter((route) => !DOC.includes(`\`${route}\``));
    expect(missing).toEqual([]);
  });

  it('lists every error code the API answers with, at its status', () => {
    const codes = Object.entries(HTTP_STATUS);
    expect(codes.length).toBeGreaterThan(20);
    const missing = codes.map(([code, status]) => `| ${status} | \`${code}\` |`).filter((row) => !DOC.includes(row));
    expect(missing).toEqual([]);
  });
});
