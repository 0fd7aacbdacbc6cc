// A session stuck in its transaction (issue 18, item 3): a client frozen in the middle of a start
// holds the datasource's row lock, and another holds a unit of an expired process. A real
// session, left idle in a real open transaction: the waiters must fail fast and retryably, the
// scheduler must do its other work in the same run, and the server must end the stuck session.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { putTenantUnits } from '../../src/lease/index.js';
import { loadConfig, runScheduler } from '../../src/runtime/index.js';
import type { Sql } from '../../src/store/index.js';
import { apiDeps, call, InvokeEndpoint, removeTree, tempTree, uniqueTenant } from '../support/api.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { deferred, waitFor } from '../support/waits.js';

const db = useTestDatabase();
let endpoint: InvokeEndpoint;
let dir: string;
beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  dir = await tempTree({ 'a.txt': 'alpha', 'b.txt': 'beta' });
});
afterAll(async () => {
  await removeTree(dir);
  await endpoint.close();
});

const APP = 'leasehold-test-stuck';

/** What the server says of the stuck client's sessions: their state and how many locks they hold. */
async function stuckSessions(sql: Sql): Promise<{ state: string; locks: number }[]> {
  return sql<{ state: string; locks: number }[]>`
    select a.state, (select count(*) from pg_locks l where l.pid = a.pid and l.granted) as locks
    from pg_stat_activity a where a.application_name = ${APP}`;
}

describe('a session stuck in its transaction', () => {
  it('makes another start answer 503 with Retry-After within the lock timeout, leaves the scheduler its other work, and is ended by the server, after which the start succeeds', async () => {
    const tenant = uniqueTenant();
    // An expired process owning a unit, for the sweep.
    await putTenantUnits(db.sql, tenant, { job: 'noop', shards: 2, weight: 1 });
    await db.sql`insert into leasehold_processes (id, hostname, version, expires_at)
      values ('00000000-0000-4000-8000-000000000001', 'gone', 'test', now() - interval '1 hour')`;
    await db.sql`update leasehold_units set owner = '00000000-0000-4000-8000-000000000001' where tenant = ${tenant}`;

    // The frozen client: it took the datasource's row lock as a start does and locked a unit, then
    // stopped. Its pool ends sessions idle in a transaction after 6 s (the default is 10 s).
    const client = db.connect({ max: 1, applicationName: APP, idleInTransactionTimeoutMs: 6_000 });
    const locked = deferred();
    const thaw = deferred();
    const stuck = client.begin(async (tx) => {
      await tx`insert into leasehold_datasources (tenant, datasource) values (${tenant}, 'files')
        on conflict (tenant, datasource) do update set tenant = excluded.tenant`;
      await tx`select 1 from leasehold_units where tenant = ${tenant} and shard = 0 for update`;
      locked.resolve();
      // Frozen here, idle in its transaction, until the test thaws it.
      await thaw.promise;
      await tx`select 1`;
    });
    stuck.catch(() => {});
    await locked.promise;
    const stuckAt = Date.now();
    // The server's own word: idle in transaction, holding locks.
    const [before] = await stuckSessions(db.sql);
    expect(before.state).toBe('idle in transaction');
    expect(before.locks).toBeGreaterThan(2);

    // Another start on that datasource answers at once (the lock timeout is 2 s), retryably.
    const deps = apiDeps(db.sql, endpoint);
    const body = { tenant, datasource: 'files', job: 'checksum', params: { dir }, requestKey: 'second' };
    const t0 = Date.now();
    const refused = await call(deps, 'POST', '/batches', { body });
    const tookMs = Date.now() - t0;
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ error: { code: 'database_unavailable' } });
    expect(refused.headers['retry-after']).toBe('1');
    expect(tookMs).toBeLessThan(5_000);

    // A scheduler run: the sweep waits on the locked unit and gives up on it alone; dispatch,
    // the fleet plan and retention still run.
    const other = await call(deps, 'POST', '/batches', {
      body: { tenant, datasource: 'other', job: 'checksum', params: { dir }, requestKey: 'other' },
    });
    expect(other.status).toBe(201);
    await db.sql`update leasehold_batches set dispatched_at = null where id = ${other.body.id}`;
    const config = loadConfig({ DATABASE_URL: db.url });
    const dispatched: unknown[] = [];
    const result = await runScheduler({ sql: db.sql, config, dispatcher: { invoke: async (e) => void dispatched.push(e) } });
    expect(result.lockTimeouts).toEqual(['sweep']);
    expect(result.dispatched).toContain(other.body.id);
    expect(Date.now() - stuckAt).toBeLessThan(6_000);

    // The server ends the stuck session, and its locks go with it.
    await waitFor('the stuck session to be ended', async () => (await stuckSessions(db.sql)).length === 0, { timeoutMs: 10_000 });
    // Thawed, the client finds its session gone: the transaction fails, nothing of it committed.
    thaw.resolve();
    const ended = await stuck.then(
      () => undefined,
      (e: unknown) => e as { code?: string },
    );
    expect(ended).toBeDefined();
    await client.end({ timeout: 1 });

    // Now the start goes through, and the sweep frees the units.
    const retried = await call(deps, 'POST', '/batches', { body });
    expect(retried.status).toBe(201);
    const after = await runScheduler({ sql: db.sql, config, dispatcher: { invoke: async () => {} } });
    expect(after.lockTimeouts).toBeUndefined();
    expect(after.swept.units).toBe(2);
  }, 30_000);
});
