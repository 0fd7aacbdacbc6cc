// A worker's heartbeat after its container thawed with a dead pooled connection: retried once on
// another connection, on the real PostgreSQL through a proxy that kills connections silently.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leaser, type Reconciler } from '../../src/lease/index.js';
import { ReconnectingLeaser } from '../../src/runtime/index.js';
import { StoreTimeoutError } from '../../src/store/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { testDatabase } from '../support/db.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { dyingProxy, type DyingProxy } from '../support/tcp-proxy.js';
import { sleep } from '../support/time.js';

const idle: Reconciler = { unitsGained: () => {}, unitsLost: () => {}, inFlight: () => 0 };

const db = useTestDatabase();
let proxy: DyingProxy;
const pools: Sql[] = [];
beforeAll(async () => {
  proxy = await dyingProxy(db.url);
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end({ timeout: 1 })));
  await proxy.close();
});

/** A pool on the test schema through the proxy. */
function viaProxy(max = 1): Sql {
  const sql = connect(proxy.url, { max, schema: db.schema });
  pools.push(sql);
  return sql;
}

const settings = (processId: string) => ({ processId, hostname: 'h', version: 'v', ttlMs: 15_000, heartbeatIntervalMs: 5_000 });

const expiresAt = async (id: string) =>
  (await db.sql<{ at: Date }[]>`select expires_at as at from leasehold_processes where id = ${id}`)[0]?.at;

describe('a heartbeat on a connection that died while the container was frozen', () => {
  it('is retried once, at once, on another connection, and the process stays live', async () => {
    const id = randomUUID();
    const leaser = new ReconnectingLeaser(viaProxy(), settings(id), idle);
    const retries: unknown[] = [];
    leaser.onRetry = (e) => retries.push(e);
    await leaser.heartbeat();
    const first = await expiresAt(id);
    const accepted = proxy.accepted();
    proxy.killSilently();
    await sleep(20);
    const t0 = Date.now();
    expect(await leaser.heartbeat()).toEqual({ lapsed: false });
    expect(Date.now() - t0).toBeLessThan(2_000);
    expect(retries).toHaveLength(1);
    expect((retries[0] as { code?: string }).code).toBe('ECONNRESET');
    expect(proxy.accepted()).toBe(accepted + 1);
    expect((await expiresAt(id)).getTime()).toBeGreaterThan(first.getTime());
  });

  it('the plain leaser fails that heartbeat: the retry is what keeps it', async () => {
    const leaser = new Leaser(viaProxy(), settings(randomUUID()), idle);
    await leaser.heartbeat();
    proxy.killSilently();
    await expect(leaser.heartbeat()).rejects.toMatchObject({ code: 'ECONNRESET' });
  });

  it('a statement error is not retried', async () => {
    // A schema without leasehold's tables: the upsert fails with 42P01, not a connection error.
    const bare = await testDatabase({ migrate: false });
    try {
      const leaser = new ReconnectingLeaser(bare.sql, settings(randomUUID()), idle);
      let retried = 0;
      leaser.onRetry = () => retried++;
      await expect(leaser.heartbeat()).rejects.toMatchObject({ code: '42P01' });
      expect(retried).toBe(0);
    } finally {
      await bare.close();
    }
  });

  it('a heartbeat nobody answers is given up after storeTimeoutMs', async () => {
    const sql = viaProxy();
    const id = randomUUID();
    // The process row and the pool's connection first, unbounded: on a loaded machine opening
    // the connection through the proxy took more than the 300 ms under test (CI, 2026-12-07).
    await new ReconnectingLeaser(sql, settings(id), idle).heartbeat();
    const leaser = new ReconnectingLeaser(sql, { ...settings(id), storeTimeoutMs: 300 }, idle);
    // Hold the process row's lock so the next upsert waits.
    const blocker = db.connect({ max: 1 });
    let release!: () => void;
    let locked!: () => void;
    const holding = new Promise<void>((r) => (locked = r));
    const held = blocker.begin(async (tx) => {
      await tx`select 1 from leasehold_processes where id = ${leaser.processId} for update`;
      locked();
      await new Promise<void>((r) => (release = r));
    });
    // Only once the lock is held (a loaded server may take longer than any fixed wait).
    await holding;
    const t0 = Date.now();
    await expect(leaser.heartbeat()).rejects.toBeInstanceOf(StoreTimeoutError);
    expect(Date.now() - t0).toBeLessThan(1_500);
    release();
    await held;
  });
});
