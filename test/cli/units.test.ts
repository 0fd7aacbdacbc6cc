// A unit's quarantine as the command shows it (docs/design.md, "Crashes and quarantine"): the
// built `leasehold` command against the real API over HTTP on a real PostgreSQL. `units list`
// shows a quarantined unit's end and its crashes in a row, and `units release` lifts it.
// test/lease/quarantine.test.ts and test/units/poison.test.ts make the crashes really happen;
// here the unit rows are set to what three crashes leave, since only their display is checked.
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { handleApi } from '../../src/api/index.js';
import { putTenantUnits } from '../../src/lease/index.js';
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

it('units list shows a quarantined unit with its end and crashes, and units release lifts it', async () => {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 2 });
  await db.sql`update leasehold_units set crashes = 3, quarantines = 1, quarantined_until = now() + interval '5 minutes'
    where tenant = 'acme' and shard = 0`;
  const [{ until }] = await db.sql<{ until: Date }[]>`select quarantined_until as until from leasehold_units
    where tenant = 'acme' and shard = 0`;
  // The table's rows, without its heading line.
  const rows = (out: string) =>
    out
      .trim()
      .split('\n')
      .filter((l) => /^acme\//.test(l));
  const lines = rows(await leasehold(['units', 'list', '--tenant', 'acme']));
  expect(lines).toHaveLength(2);
  expect(lines[0]).toMatch(/^acme\/0 /);
  expect(lines[0]).toContain(`quarantined until ${until.toISOString()} (quarantine 1)`);
  expect(lines[0]).toMatch(/3 crashes in a row/);
  expect(lines[1]).toMatch(/^acme\/1 .* unowned\s*$/);

  expect((await leasehold(['units', 'release', 'acme', '0'])).trim()).toBe('acme/0: released (claimable)');
  const after = rows(await leasehold(['units', 'list', '--tenant', 'acme']));
  expect(after[0]).toMatch(/^acme\/0 .* unowned\s*$/);
  const [row] = await db.sql<{ crashes: number; quarantines: number; quarantined_until: Date | null }[]>`select crashes,
      quarantines, quarantined_until from leasehold_units where tenant = 'acme' and shard = 0`;
  expect(row).toEqual({ crashes: 0, quarantines: 0, quarantined_until: null });
});
