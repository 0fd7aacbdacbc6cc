// The scheduler reads the fleet's balance from the process rows (the weight each process's
// heartbeat reported) and records it as EMF: fair share, spread and starving processes.
import { describe, expect, it } from 'vitest';
import { balanceOf, putTenantUnits, readFleet, setDesired } from '../../src/lease/index.js';
import { loadConfig, metricsFor, recordFleetBalance, runScheduler, setLogSink } from '../../src/runtime/index.js';
import { type Dispatcher } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, concurrently, member } from '../support/lease.js';

const db = useTestDatabase();

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

  it('a fleet split as evenly as the ceiling share allows has nobody starving, and each process is measured against the exact share', async () => {
    await clear(db.sql);
    // Weights {1, 1, 1, 1, 2, 2}: 8 over 3 processes, fair share ceil(8 / 3) = 3, best split 3, 3, 2.
    await putTenantUnits(db.sql, 'light', { job: 'sync', shards: 4, weight: 1 });
    await putTenantUnits(db.sql, 'heavy', { job: 'sync', shards: 2, weight: 2 });
    await setDesired(db.sql, 3);
    const config = loadConfig({ DATABASE_URL: db.url });
    // The split is made deterministic, since it is the measure of a split this test checks, not
    // how claims race: with concurrent ticks from random start keys a process may first take
    // both heavy units (4), and 4, 2, 2 is stable (shedding either would leave it below its
    // share), so the 3, 3, 2 this test measures came only most of the time (CI, twice). The units
    // sit at fixed positions (light, heavy, light, light, heavy, light), each process starts its
    // claims at its own fixed key (0.1, 0.45, 0.8), and they tick in turn: 3, 3, 2 every time.
    await db.sql`update leasehold_units u set pos = v.pos
      from (values ('light', 0, 0.05), ('heavy', 0, 0.15), ('light', 1, 0.3), ('light', 2, 0.5),
                   ('heavy', 1, 0.65), ('light', 3, 0.9)) as v(tenant, shard, pos)
      where u.tenant = v.tenant and u.shard = v.shard`;
    const three = [0.1, 0.45, 0.8].map((at) => member(db.sql, {}, { random: () => at }));
    for (let t = 0; t < 6; t++) {
      await concurrently(three, (m) => m.leaser.heartbeat());
      for (const m of three) await m.leaser.tick();
    }
    await concurrently(three, (m) => m.leaser.heartbeat());
    const r = await runScheduler({ sql: db.sql, config, dispatcher: nobody });
    expect(r.balance).toMatchObject({ fairShare: 3, minWeight: 2, maxWeight: 3, starving: 0 });
    const fleet = await readFleet(db.sql);
    expect(fleet.evenShare).toBeCloseTo(8 / 3, 10);
    expect([...fleet.reportedWeights].sort()).toEqual([2, 3, 3]);
    // 3 is 112.5 % of the exact share, 2 is 75 %.
    expect(fleet.reportedWeights.map((w) => Math.round((1000 * w) / fleet.evenShare) / 10).sort()).toEqual([112.5, 112.5, 75]);
    // One below the ceiling is not starving; two below is.
    expect(balanceOf([3, 3, 2], 3, 0.2).starving).toBe(0);
    expect(balanceOf([3, 4, 1], 3, 0.2).starving).toBe(1);
    expect(balanceOf([10, 10, 8], 10, 0.2).starving).toBe(0);
    expect(balanceOf([11, 11, 7], 10, 0.2).starving).toBe(1);
    for (const m of three) await m.leaser.release();
    await clear(db.sql);
  });
});
