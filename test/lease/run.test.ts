// run(signal): the first heartbeat is retried with backoff while the database cannot be
// reached, and the loop of heartbeats and ticks owns the process's share until aborted.
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../src/clock.js';
import { putTenantUnits } from '../../src/lease/index.js';
import { connect } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, member, ownedCounts } from '../support/lease.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase({ max: 4 });

/** The real clock, recording every sleep asked of it. */
function recordingClock(): Clock & { sleeps: number[] } {
  const sleeps: number[] = [];
  return { sleeps, now: () => Date.now(), sleep: (ms, signal) => (sleeps.push(ms), systemClock.sleep(ms, signal)) };
}

/** A free TCP port on 127.0.0.1 (nothing listens on it when this returns). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Forward connections on `port` to the test database: the database "comes back". */
function proxy(port: number, to: URL): Promise<{ server: Server; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = netConnect(Number(to.port || 5432), to.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  return new Promise((resolve) =>
    server.listen(port, '127.0.0.1', () =>
      resolve({
        server,
        close: () => {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      }),
    ),
  );
}

describe('run', () => {
  it('retries the first heartbeat with growing, capped backoff while the database is unreachable, and stops at once on abort', async () => {
    const sql = connect('postgres://x@127.0.0.1:1/x', { max: 1 });
    const clock = recordingClock();
    const { leaser, events } = member(sql, { ttlMs: 3_000, heartbeatIntervalMs: 400 }, { clock, random: () => 0.5 });
    const ac = new AbortController();
    let settled = false;
    const running = leaser.run(ac.signal).then(() => (settled = true));
    await sleep(1_300);
    expect(settled).toBe(false);
    expect(leaser.ready()).toBe(false);
    // Attempts at about 0, 150, 450 and 1,050 ms: waits of w + w × random, w doubling from
    // 100 ms up to the heartbeat interval.
    expect(events.length).toBeGreaterThanOrEqual(3);
    expect(events.every((e) => e.type === 'error' && e.step === 'heartbeat')).toBe(true);
    expect(clock.sleeps.length).toBeGreaterThanOrEqual(3);
    expect(clock.sleeps.slice(0, 3)).toEqual([150, 300, 600]);
    expect(Math.max(...clock.sleeps)).toBe(600);
    const t0 = Date.now();
    ac.abort();
    await running;
    expect(Date.now() - t0).toBeLessThan(300);
    await sql.end({ timeout: 1 });
  });

  it('comes up once the database answers, then owns its share', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 8 });
    const port = await freePort();
    const target = new URL(db.url);
    const url = new URL(db.url);
    url.hostname = '127.0.0.1';
    url.port = String(port);
    const sql = connect(url.toString(), { max: 1, schema: db.schema });
    const m = member(sql, { ttlMs: 3_000, heartbeatIntervalMs: 200, rebalanceIntervalMs: 50 });
    const ac = new AbortController();
    const running = m.leaser.run(ac.signal);
    await sleep(400);
    expect(m.leaser.ready()).toBe(false);
    const p = await proxy(port, target);
    try {
      await waitFor('the share', () => m.rec.owned.size === 8, { timeoutMs: 15_000, everyMs: 20 });
      expect(m.leaser.ready()).toBe(true);
    } finally {
      ac.abort();
      await running;
      await m.leaser.release();
      await m.leaser.deleteProcess();
      await sql.end({ timeout: 1 });
      await p.close();
    }
  });

  it('loops heartbeats and ticks until aborted: three processes each own a third', async () => {
    await clear(db.sql);
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 30 });
    const config = { ttlMs: 2_000, heartbeatIntervalMs: 300, rebalanceIntervalMs: 50 };
    const ms = [0, 1, 2].map(() => member(db.connect({ max: 1 }), config));
    const ac = new AbortController();
    const runs = ms.map((m) => m.leaser.run(ac.signal));
    await waitFor(
      'equal shares',
      async () => {
        const counts = await ownedCounts(db.sql);
        return ms.every((m) => counts.get(m.leaser.processId)?.units === 10 && m.rec.owned.size === 10);
      },
      { timeoutMs: 15_000, everyMs: 20 },
    );
    // Heartbeats keep the rows live past the first TTL.
    const [before] = await db.sql<{ at: Date }[]>`select min(heartbeat_at) as at from leasehold_processes`;
    await sleep(700);
    const [after] = await db.sql<{ at: Date; live: number }[]>`select min(heartbeat_at) as at,
      count(*) filter (where expires_at > now()) as live from leasehold_processes`;
    expect(after.at.getTime()).toBeGreaterThan(before.at.getTime());
    expect(after.live).toBe(3);
    const t0 = Date.now();
    ac.abort();
    await Promise.all(runs);
    expect(Date.now() - t0).toBeLessThan(300);
    for (const m of ms) {
      expect(m.events).toEqual([]);
      expect(m.rec.errors).toEqual([]);
      expect(m.rec.owned.size).toBe(10);
      await m.leaser.release();
      await m.leaser.deleteProcess();
    }
    expect((await ownedCounts(db.sql)).size).toBe(0);
  });
});
