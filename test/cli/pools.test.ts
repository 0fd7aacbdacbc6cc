// `leasehold pool set|show|list` (docs/design.md, "Concurrency pools"): the built command against
// the real API over HTTP on a real PostgreSQL. A pool is set, changed to per key, shown and
// listed with the permits out now; a lease is written here as a run's take would.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { syncPermits } from '../../src/batch/sql/pools.js';
import { startHttpServer, type HttpServer } from '../../src/local/index.js';
import { apiDeps, InvokeEndpoint } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const run = promisify(execFile);

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let server: HttpServer;
beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  const deps = apiDeps(db.sql, endpoint);
  server = await startHttpServer({ port: 0, handler: (event) => handleApi(event, deps) });
});
afterAll(async () => {
  await server.close();
  await endpoint.close();
});

const leasehold = async (args: string[]) =>
  (await run(process.execPath, [BIN, ...args, '--api', server.url], { env: { ...process.env } })).stdout;

it('pool set, show and list: a limit, then per key, with the items in flight now', async () => {
  expect((await leasehold(['pool', 'set', 'billing', '--limit', '20'])).trim()).toBe('billing: 0 in flight of 20 (0 runs)');
  await syncPermits(db.sql, {
    pool: 'billing',
    run: randomUUID(),
    targets: [{ key: 'eu', target: 3 }],
    leaseMs: 60_000,
    defaults: { total: 20, perKey: null },
  });
  expect((await leasehold(['pool', 'show', 'billing'])).trim()).toBe('billing: 3 in flight of 20 (1 run)');
  const keyed = await leasehold(['pool', 'set', 'billing', '--per-key', '2', '--total', '5']);
  expect(keyed.trim().split('\n')).toEqual(['billing: 3 in flight of 5, 2 per key (1 run)', '  "eu": 3']);
  await leasehold(['pool', 'set', 'search', '--limit', '4']);
  expect((await leasehold(['pool', 'list'])).trim().split('\n')).toEqual([
    'billing: 3 in flight of 5, 2 per key (1 run)',
    'search: 0 in flight of 4 (0 runs)',
  ]);
  const json = JSON.parse(await leasehold(['pool', 'show', 'search', '--json'])) as { limit: number };
  expect(json.limit).toBe(4);
  await expect(leasehold(['pool', 'set', 'x', '--limit', '2', '--per-key', '1'])).rejects.toThrow(
    /give --limit N, or --per-key N/,
  );
});
