// A process's lease by its own clock: it stops acting on its units when the TTL since its last
// successful heartbeat has passed, before the row can expire and another process claim them.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { Leaser, putTenantUnits } from '../../src/lease/index.js';
import { connect } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { PgProxy } from '../support/pgproxy.js';
import { clear, Recorder } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

describe('the lease by the process clock', () => {
  it('is valid for less than the TTL after the last successful heartbeat started', async () => {
    await clear(db.sql);
    const clock = new ManualClock(0);
    const l = new Leaser(db.sql, { ttlMs: 1_000, heartbeatIntervalMs: 300 }, new Recorder('L'), { clock });
    expect(l.leaseValid()).toBe(false);
    await l.heartbeat();
    expect(l.leaseValid()).toBe(true);
    clock.advance(999);
    expect(l.leaseValid()).toBe(true);
    clock.advance(1);
    expect(l.leaseValid()).toBe(false);
    await l.heartbeat();
    expect(l.leaseValid()).toBe(true);
    await l.deleteProcess();
  });

  it('a process whose connection goes silent drops its units before another process can claim them', async () => {
    for (let round = 0; round < 2; round++) {
      await clear(db.sql);
      await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 4 });
      const proxy = await PgProxy.start(db.url);
      // One connection: once it is silent, every later statement of A queues behind it.
      const silentPool = connect(proxy.url, { schema: db.schema, max: 1 });
      const events: string[] = [];
      const a = new Recorder('A');
      a.log = events;
      const b = new Recorder('B');
      b.log = events;
      const A = new Leaser(silentPool, { ttlMs: 800, heartbeatIntervalMs: 200, rebalanceIntervalMs: 100 }, a);
      const B = new Leaser(db.sql, { ttlMs: 800, heartbeatIntervalMs: 200 }, b);
      const stop = new AbortController();
      const running = A.run(stop.signal);
      while (a.owned.size < 4) await sleep(20);
      // From the next heartbeat on, A's connections answer nothing, ever.
      const fault = proxy.stallAfterSend(/insert into leasehold_processes/);
      await fault.fired;
      // The whole path is silent, not only that connection (a replaced pool's new connections too).
      proxy.goSilent();
      // B ticks until it owns all four: only once A's row has expired by the database clock.
      while (b.owned.size < 4) {
        await B.heartbeat();
        await B.tick();
        await sleep(20);
      }
      // A let go of all four before B gained any.
      const lost = events.indexOf('A:lost:4');
      expect(lost).toBeGreaterThanOrEqual(0);
      expect(lost).toBeLessThan(events.findIndex((e) => e.startsWith('B:gained')));
      expect(A.leaseValid()).toBe(false);
      expect(a.owned.size).toBe(0);
      stop.abort();
      await proxy.close();
      await Promise.race([running, sleep(2_000)]);
      await Promise.race([silentPool.end({ timeout: 0 }), sleep(1_000)]);
      await B.release();
      await B.deleteProcess();
    }
  });
});
