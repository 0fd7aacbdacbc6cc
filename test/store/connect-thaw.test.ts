// What happens to a pooled connection that died while its Lambda container was frozen, on the
// real PostgreSQL through a proxy that kills connections silently.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isConnectionError, settleAfterThaw } from '../../src/runtime/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { databaseUrl } from '../support/db.js';
import { dyingProxy, type DyingProxy } from '../support/tcp-proxy.js';

let proxy: DyingProxy;
const pools: Sql[] = [];
beforeAll(async () => {
  proxy = await dyingProxy(databaseUrl());
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
  await proxy.close();
});

const pid = async (sql: Sql) => (await sql<{ pid: number }[]>`select pg_backend_pid() as pid`)[0].pid;

/** Block the event loop, as a frozen container does: no timer runs meanwhile. */
function freeze(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

describe('a pooled connection that died silently', () => {
  it('fails its next statement with a connection error, and postgres.js replaces it once it has seen the close', async () => {
    const sql = connect(proxy.url, { max: 1 });
    pools.push(sql);
    const before = await pid(sql);
    proxy.killSilently();
    const error = await sql`select 1`.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeDefined();
    expect(isConnectionError(error)).toBe(true);
    // postgres.js rejects the statement before it sees the socket close; a statement sent in that
    // same turn would be queued on the dead connection and never answered. One timer turn later
    // the close has been seen.
    await settleAfterThaw();
    const after = await pid(sql);
    expect(after).not.toBe(before);
  });

  it('after a freeze longer than the idle timeout, settling the thawed timers closes it before the first statement', async () => {
    // Control: without settling, the first statement after the freeze lands on the dead connection.
    const unsettled = connect(proxy.url, { max: 1, idleTimeoutS: 1 });
    pools.push(unsettled);
    await pid(unsettled);
    proxy.killSilently();
    freeze(1_500);
    const failed = await unsettled`select 1`.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isConnectionError(failed)).toBe(true);

    const settled = connect(proxy.url, { max: 1, idleTimeoutS: 1 });
    pools.push(settled);
    const before = await pid(settled);
    const accepted = proxy.accepted();
    proxy.killSilently();
    freeze(1_500);
    await settleAfterThaw();
    // No error: the idle timer that came due during the freeze closed the dead connection first.
    const after = await pid(settled);
    expect(after).not.toBe(before);
    expect(proxy.accepted()).toBe(accepted + 1);
  });

  it('a connection idle for less than the idle timeout is kept across invocations', async () => {
    const sql = connect(proxy.url, { max: 1, idleTimeoutS: 5 });
    pools.push(sql);
    const before = await pid(sql);
    freeze(300);
    await settleAfterThaw();
    expect(await pid(sql)).toBe(before);
  });
});

describe('connection errors', () => {
  it('are told apart from statement errors', async () => {
    const sql = connect(proxy.url, { max: 1 });
    pools.push(sql);
    const syntax = await sql`selec 1`.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isConnectionError(syntax)).toBe(false);
    const ended = connect(proxy.url, { max: 1 });
    await ended.end();
    const afterEnd = await ended`select 1`.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isConnectionError(afterEnd)).toBe(true);
    for (const code of ['ECONNRESET', 'CONNECTION_CLOSED', '57P01', '08006']) expect(isConnectionError({ code })).toBe(true);
    for (const code of ['23505', '40001', '57014', undefined]) expect(isConnectionError({ code })).toBe(false);
  });
});
