// The store timeout (issue 38, items 6, 7 and 12): a statement is timed from when the server
// begins on it, a timed-out statement is cancelled on the server, and a silent connection is
// dropped within one store timeout of the first timeout.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, StoreTimeoutError, withTimeout, type Sql } from '../../src/store/index.js';
import { dropPoolsWithUnanswered } from '../../src/store/failover.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { PgProxy } from '../support/pgproxy.js';
import { waitFor, deferred } from '../support/waits.js';

const db = useTestDatabase();
let proxy: PgProxy;
beforeAll(async () => {
  proxy = await PgProxy.start(db.url);
  await db.sql`create table timeout_rows (id int primary key, v int not null)`;
  await db.sql`insert into timeout_rows values (1, 0)`;
});
afterAll(async () => {
  await proxy.close();
});

const caught = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe('a store timeout', () => {
  it('drops a silent connection within one store timeout of the first timeout (3 rounds)', async () => {
    const timeoutMs = 1_000;
    for (let round = 0; round < 3; round++) {
      const sql = connect(proxy.url, { schema: db.schema, max: 1, applicationName: 'leasehold-test-silent2' });
      try {
        await sql`select 1`;
        expect(proxy.connections).toBe(1);
        const stall = proxy.stallAfterSend(/select 'silent2'/);
        const error = await caught(withTimeout(async () => (await sql`select 'silent2' as s`)[0], timeoutMs));
        const timedOutAt = Date.now();
        expect(error).toBeInstanceOf(StoreTimeoutError);
        // The proxy's record: the connection went silent on that statement.
        await stall.fired;
        await waitFor('the silent connection to be closed', () => proxy.connections === 0, { timeoutMs: 10_000 });
        const droppedMs = Date.now() - timedOutAt;
        console.log(`[silent] round ${round}: dropped ${droppedMs} ms after the timeout (store timeout ${timeoutMs} ms)`);
        expect(droppedMs).toBeLessThanOrEqual(timeoutMs);
      } finally {
        await sql.end({ timeout: 1 });
      }
    }
  }, 60_000);

  it('does not count the wait behind busy connections, nor retire the pool (3 rounds)', async () => {
    for (let round = 0; round < 3; round++) {
      const replaced: unknown[] = [];
      const sql = connect(db.url, {
        schema: db.schema,
        max: 1,
        applicationName: 'leasehold-test-busy',
        onReadOnly: (e) => replaced.push(e),
      });
      try {
        // Six statements of 300 ms on one connection: the last is answered after about 1.8 s,
        // past the 1 s timeout, although the server never took more than 300 ms on any.
        const results = await Promise.allSettled(
          [1, 2, 3, 4, 5, 6].map((n) =>
            withTimeout(
              async () => (await sql<{ pid: number }[]>`select pg_backend_pid() as pid, pg_sleep(0.3), ${n}::int as n`)[0],
              1_000,
            ),
          ),
        );
        const errors = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
        expect(errors).toEqual([]);
        // One server session answered all six: the pool was never retired.
        const pids = new Set(results.map((r) => (r as PromiseFulfilledResult<{ pid: number }>).value.pid));
        expect(pids.size).toBe(1);
        expect(replaced).toEqual([]);
      } finally {
        await sql.end({ timeout: 1 });
      }
    }
  }, 60_000);

  it('cancels the statement on the server: a timed-out write holds and waits for no lock after its timeout (3 rounds)', async () => {
    const holder = connect(db.url, { schema: db.schema, max: 1, applicationName: 'leasehold-test-holder' });
    // No lock_timeout nor statement_timeout: only the store timeout can end the wait.
    const sql = connect(db.url, {
      schema: db.schema,
      max: 2,
      lockTimeoutMs: 0,
      statementTimeoutMs: 0,
      applicationName: 'leasehold-test-cancel',
    });
    const waiting = (s: Sql) =>
      s<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
        where application_name = 'leasehold-test-cancel' and wait_event_type = 'Lock'`.then((r) => r[0].n);
    try {
      for (let round = 0; round < 3; round++) {
        const release = deferred();
        const locked = deferred();
        const held = holder.begin(async (tx) => {
          await tx`select * from timeout_rows where id = 1 for update`;
          locked.resolve();
          await release.promise;
        });
        await locked.promise;
        const write = withTimeout(async () => {
          await sql.begin(async (tx) => {
            await tx`update timeout_rows set v = v + 1 where id = 1`;
          });
        }, 500);
        // The server's evidence: the write waits for the row lock.
        await waitFor('the write to wait for the lock', async () => (await waiting(db.sql)) === 1);
        expect(await caught(write)).toBeInstanceOf(StoreTimeoutError);
        const timedOutAt = Date.now();
        await waitFor('no write of the timed-out call to wait for the lock', async () => (await waiting(db.sql)) === 0, {
          timeoutMs: 3_000,
        });
        console.log(`[cancel] round ${round}: lock wait gone ${Date.now() - timedOutAt} ms after the timeout`);
        release.resolve();
        await held;
        // Nothing of the timed-out write stays: the row is as it was.
        await new Promise((r) => setTimeout(r, 100));
        const [{ v }] = await db.sql<{ v: number }[]>`select v from timeout_rows where id = 1`;
        expect(v).toBe(0);
      }
    } finally {
      await holder.end({ timeout: 1 });
      await sql.end({ timeout: 1 });
    }
  }, 60_000);

  it('counts a cursor read to its end as answered: a later timeout of unknown statements retires no pool', async () => {
    // A cursor's next() puts a resolve and a reject of its own on the query for each page; the
    // last one settles it. Were it left in flight, a timeout whose statements are not known
    // (dropPoolsWithUnanswered) would take its pool for a silent one and retire it.
    for (const rows of [0, 3, 10]) {
      const replaced: unknown[] = [];
      const sql = connect(db.url, { schema: db.schema, max: 2, onReadOnly: (e) => replaced.push(e) });
      try {
        let seen = 0;
        for await (const page of sql<{ g: number }[]>`select g from generate_series(1, ${rows}) g`.cursor(4)) seen += page.length;
        expect(seen).toBe(rows);
        await new Promise((resolve) => setTimeout(resolve, 150));
        dropPoolsWithUnanswered(100, 100);
        expect(replaced).toEqual([]);
        // The pool still answers on its own connections.
        expect((await sql<{ one: number }[]>`select 1 as one`)[0].one).toBe(1);
      } finally {
        await sql.end({ timeout: 1 });
      }
    }
  });
});
