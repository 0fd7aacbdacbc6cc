// The scheduler reads the fleet's balance from the process rows (the weight each process's
// heartbeat reported) and records it as EMF: fair share, spread and starving processes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { putTenantUnits, setDesired } from '../../src/lease/index.js';
import { loadConfig, metricsFor, recordFleetBalance, runScheduler, setLogSink } from '../../src/runtime/index.js';
import { type Dispatcher } from '../../src/batch/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { concurrently, member } from '../support/lease.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await testDatabase();
});
afterAll(() => db.close());

const nobody: Dispatcher = { invoke: async () => {} };

describe('the balance of the fleet', () => {
  it('a scheduler run reports the fair share, the spread and the starving processes, and records them as EMF', async () => {
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 40 });
    await setDesired(db.sql, 4);
    const config = loadConfig({ DATABASE_URL: db.url });
    const three = [0, 1, 2].map(() => member(db.sql));
    await concurrently(three, (m) => m.leaser.heartbeat());
    for (let t = 0; t < 3; t++) await concurrently(three, (m) => m.leaser.tick());
    // Their heartbeats report 14, 13 and 13 units; a fourth process has just joined (it owns nothing).
    await concurrently(three, (m) => m.leaser.heartbeat());
    const late = member(db.sql);
    await late.leaser.heartbeat();
    const r = await runScheduler({ sql: db.sql, config, dispatcher: nobody });
    expect(r.fleet).toEqual({ desired: 4, live: 4, pending: 0 });
    // Fair share 40 / 4 = 10; the newcomer owns less than 10 × 0.8.
    expect(r.balance).toEqual({ fairShare: 10, minWeight: 0, maxWeight: 14, starving: 1, retiring: 0, batch: 0 });

    const lines: string[] = [];
    setLogSink((line) => lines.push(line));
    try {
      const m = metricsFor('scheduler-balance-test');
      recordFleetBalance(m, r);
      m.flush();
    } finally {
      setLogSink(undefined);
    }
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => '_aws' in l);
    expect(emf).toMatchObject({
      FairShare: 10,
      WeightMin: 0,
      WeightMax: 14,
      StarvingProcesses: 1,
      RetiringProcesses: 0,
      BatchProcesses: 0,
    });
    const names = (emf!._aws as { CloudWatchMetrics: { Metrics: { Name: string }[] }[] }).CloudWatchMetrics[0].Metrics.map(
      (x) => x.Name,
    );
    expect(names).toEqual(expect.arrayContaining(['FairShare', 'WeightMin', 'WeightMax', 'StarvingProcesses']));

    // Once the newcomer claimed its share (the others shed for it) and every heartbeat reported
    // it, nobody starves. Which process sheds what depends on how the concurrent ticks interleave,
    // so the spread may settle anywhere inside the hysteresis band (10 × (1 ± 0.2)).
    const all = [...three, late];
    for (let t = 0; t < 3; t++) {
      await concurrently(all, (x) => x.leaser.heartbeat());
      await concurrently(all, (x) => x.leaser.tick());
    }
    await concurrently(all, (x) => x.leaser.heartbeat());
    const after = await runScheduler({ sql: db.sql, config, dispatcher: nobody });
    expect(after.balance).toMatchObject({ fairShare: 10, starving: 0, retiring: 0, batch: 0 });
    expect(after.balance.minWeight).toBeGreaterThanOrEqual(8);
    expect(after.balance.maxWeight).toBeLessThanOrEqual(12);
  });
});
