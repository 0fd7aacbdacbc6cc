// A server that keeps refusing writes (issue 38, item 1): after a failover the pool may lead to
// the old writer, now read-only, for a while. Each 25006 replaced the whole pool, whose new
// connections met 25006 at once: a reconnect storm (11 new connections a second per container).
// A role whose sessions start read-only (`default_transaction_read_only`) stands in for that
// server here, behind a proxy that counts the connections opened.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { PgProxy } from '../support/pgproxy.js';

const db = useTestDatabase();
const role = `lh_ro_${Math.random().toString(36).slice(2, 8)}`;
// The embedded server asks for a password (scram), the machine's PostgreSQL trusts: one for both.
const password = `pw_${Math.random().toString(36).slice(2, 10)}`;
let proxy: PgProxy;
beforeAll(async () => {
  proxy = await PgProxy.start(db.url);
  await db.sql`create table ro_rows (n int)`;
  await db.sql.unsafe(`create role ${role} login password '${password}'`);
  await db.sql.unsafe(`grant usage on schema "${db.schema}" to ${role}`);
  await db.sql.unsafe(`grant insert, select on "${db.schema}".ro_rows to ${role}`);
});
afterAll(async () => {
  await proxy.close();
  await db.sql.unsafe(`drop owned by ${role}`).catch(() => {});
  await db.sql.unsafe(`drop role if exists ${role}`).catch(() => {});
});

describe('a server that keeps refusing writes', () => {
  it('gets at most 2 new connections a second from a pool, one episode reported, and writes again once it takes them (2 rounds)', async () => {
    for (let round = 0; round < 2; round++) {
      await db.sql.unsafe(`alter role ${role} set default_transaction_read_only = on`);
      const url = new URL(proxy.url);
      url.username = role;
      url.password = password;
      const episodes: unknown[] = [];
      const sql = connect(url.toString(), { schema: db.schema, max: 4, onReadOnly: (e) => episodes.push(e) });
      try {
        // The server's evidence: a session of that role refuses writes with 25006.
        await expect(sql`insert into ro_rows values (0)`).rejects.toMatchObject({ code: '25006' });
        const before = proxy.accepted;
        const started = Date.now();
        // Four writers retrying every 20 ms for 4 s, as a worker's moves and heartbeats would.
        let refused = 0;
        await Promise.all(
          [1, 2, 3, 4].map(async () => {
            while (Date.now() - started < 4_000) {
              await sql`insert into ro_rows values (1)`.catch((e: { code?: string }) => {
                if (e.code === '25006') refused++;
              });
              await new Promise((r) => setTimeout(r, 20));
            }
          }),
        );
        const opened = proxy.accepted - before;
        const seconds = (Date.now() - started) / 1000;
        console.log(
          `[read-only] round ${round}: ${refused} writes refused, ${opened} connections opened in ${seconds.toFixed(1)} s (${(opened / seconds).toFixed(1)}/s), ${episodes.length} episode(s) reported`,
        );
        expect(refused).toBeGreaterThan(100);
        expect(opened / seconds).toBeLessThanOrEqual(2);
        expect(episodes).toHaveLength(1);
        // The writer is back: new sessions take writes, and the pool reaches one within the wait cap.
        await db.sql.unsafe(`alter role ${role} set default_transaction_read_only = off`);
        const back = Date.now();
        for (;;) {
          const ok = await sql`insert into ro_rows values (2)`.then(
            () => true,
            () => false,
          );
          if (ok) break;
          expect(Date.now() - back).toBeLessThan(15_000);
          await new Promise((r) => setTimeout(r, 50));
        }
        console.log(`[read-only] round ${round}: writing again ${Date.now() - back} ms after the writer came back`);
      } finally {
        await sql.end({ timeout: 1 });
      }
    }
  }, 90_000);
});
