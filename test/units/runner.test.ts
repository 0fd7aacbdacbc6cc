import { randomUUID } from 'node:crypto';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Leaser, putTenantUnits, type Unit } from '../../src/lease/index.js';
import { defineUnitJob, UnitJobRegistry, UnitRunner, type UnitContext } from '../../src/units/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { memoryLog } from '../support/log.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase();
beforeAll(async () => {
  await db.sql`create table probe_writes (tenant text, shard int, n int)`;
});

/** What the probe jobs saw, per unit key `tenant/shard`. */
const runs = new Map<string, number[]>();
const aborted = new Map<string, number>();
const contexts = new Map<string, UnitContext<{ label?: string }>>();
const key = (t: string, s: number) => `${t}/${s}`;
let throwing = false;

const tick = defineUnitJob<{ label?: string }>({
  name: 'probe-tick',
  description: 'records each run',
  config: z.object({ label: z.string().optional() }).strict(),
  intervalMs: 100,
  async run(ctx) {
    const k = key(ctx.tenant, ctx.shard);
    runs.set(k, [...(runs.get(k) ?? []), Date.now()]);
    contexts.set(k, ctx);
    if (throwing) throw new Error('probe failure');
  },
});

const blocking = defineUnitJob<{ label?: string }>({
  name: 'probe-block',
  description: 'runs until its signal aborts',
  config: z.object({ label: z.string().optional() }).strict(),
  intervalMs: 100,
  async run(ctx) {
    const k = key(ctx.tenant, ctx.shard);
    runs.set(k, [...(runs.get(k) ?? []), Date.now()]);
    contexts.set(k, ctx);
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    aborted.set(k, Date.now());
  },
});

const stubborn = defineUnitJob<Record<string, never>>({
  name: 'probe-stubborn',
  description: 'ignores its signal for a while',
  config: z.object({}).strict(),
  intervalMs: 100,
  async run(ctx) {
    runs.set(key(ctx.tenant, ctx.shard), [Date.now()]);
    await sleep(1_500);
  },
});

const jobs = new UnitJobRegistry([tick, blocking, stubborn] as never[]);

interface Pair {
  leaser: Leaser;
  runner: UnitRunner;
  log: ReturnType<typeof memoryLog>['entries'];
}
const pairs: Pair[] = [];

/** A leaser + unit runner driven step by step (heartbeat/tick called by the test). */
function pair(stopTimeoutMs = 2_000): Pair {
  const processId = randomUUID();
  const { log, entries } = memoryLog();
  const runner = new UnitRunner({ sql: db.sql, processId, jobs, log, stopTimeoutMs });
  const leaser = new Leaser(db.sql, { processId, ttlMs: 2_000, heartbeatIntervalMs: 500 }, runner);
  const p = { leaser, runner, log: entries };
  pairs.push(p);
  return p;
}

afterEach(async () => {
  throwing = false;
  for (const p of pairs.splice(0)) {
    await p.leaser.release();
    await p.runner.close();
    await p.leaser.deleteProcess();
  }
  await db.sql`delete from leasehold_units`;
});

let seq = 0;
const tenant = () => `runner-${++seq}`;

describe('UnitRunner', () => {
  it('runs each owned unit every interval while owned, and stops within one tick after the unit is removed', async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'probe-tick', shards: 2 });
    const { leaser } = pair();
    await leaser.heartbeat();
    await leaser.tick();
    expect(leaser.owned()).toHaveLength(2);
    // One run at once, then one per 100 ms interval (plus the run's own few ms): never sooner
    // than the interval, and on (a loaded machine may stretch the gaps, so the test waits).
    await waitFor('four runs of each shard', () => [0, 1].every((s) => (runs.get(key(t, s)) ?? []).length >= 4), {
      timeoutMs: 5_000,
    });
    for (const s of [0, 1]) {
      const times = runs.get(key(t, s)) ?? [];
      for (let i = 1; i < times.length; i++) expect(times[i] - times[i - 1], `runs of shard ${s}`).toBeGreaterThanOrEqual(95);
    }

    await putTenantUnits(db.sql, t, { job: 'probe-tick', shards: 1 });
    await leaser.tick();
    const after = runs.get(key(t, 1))!.length;
    const shard0 = runs.get(key(t, 0))!.length;
    await sleep(350);
    await waitFor('shard 0 running on', () => runs.get(key(t, 0))!.length > shard0 + 1, { timeoutMs: 5_000 });
    expect(runs.get(key(t, 1))!.length).toBe(after);
  });

  it('counts a run in flight, and aborts its signal as soon as the unit is lost; the tick returns after the run ended', async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'probe-block', shards: 1 });
    const { leaser, runner } = pair();
    await leaser.heartbeat();
    await leaser.tick();
    await waitFor('the first run', () => runs.has(key(t, 0)), { timeoutMs: 2_000 });
    expect(runner.inFlight({ tenant: t, shard: 0 })).toBe(1);

    // Another process takes the unit; the loser learns of it on its next tick.
    await db.sql`update leasehold_units set owner = ${randomUUID()} where tenant = ${t}`;
    const before = Date.now();
    await leaser.tick();
    const tickEnded = Date.now();
    expect(aborted.get(key(t, 0))).toBeDefined();
    expect(aborted.get(key(t, 0))!).toBeGreaterThanOrEqual(before);
    expect(aborted.get(key(t, 0))!).toBeLessThanOrEqual(tickEnded);
    expect(runner.inFlight({ tenant: t, shard: 0 })).toBe(0);
    expect(leaser.owned()).toEqual([]);
    expect(runs.get(key(t, 0))).toHaveLength(1);
  });

  it("makes a fenced write change nothing once the unit is someone else's", async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'probe-block', shards: 1 });
    const { leaser } = pair();
    await leaser.heartbeat();
    await leaser.tick();
    await waitFor('the first run', () => contexts.has(key(t, 0)), { timeoutMs: 2_000 });
    const ctx = contexts.get(key(t, 0))!;
    const write = (n: number) => ctx.sql`insert into probe_writes (tenant, shard, n) select ${t}, 0, ${n} where ${ctx.fence()}`;

    expect(await ctx.owns()).toBe(true);
    expect((await write(1)).count).toBe(1);
    await db.sql`update leasehold_units set owner = ${randomUUID()} where tenant = ${t}`;
    expect(await ctx.owns()).toBe(false);
    expect((await write(2)).count).toBe(0);
    expect(await db.sql`select n from probe_writes where tenant = ${t}`).toEqual([{ n: 1 }]);
  });

  it('logs a failing run and runs again on the next interval', async () => {
    const t = tenant();
    throwing = true;
    await putTenantUnits(db.sql, t, { job: 'probe-tick', shards: 1 });
    const { leaser, log } = pair();
    await leaser.heartbeat();
    await leaser.tick();
    await waitFor('three runs', () => (runs.get(key(t, 0))?.length ?? 0) >= 3, { timeoutMs: 2_000 });
    const failures = log.filter((e) => e.message === 'unit run failed');
    expect(failures.length).toBeGreaterThanOrEqual(2);
    expect(failures[0]).toMatchObject({
      level: 'error',
      fields: { tenant: t, shard: 0, job: 'probe-tick', error: 'probe failure' },
    });
  });

  it('leaves a unit whose job is unknown here idle, logging it once; a unit whose config does not parse too', async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'not-here', shards: 1 });
    const u = tenant();
    await putTenantUnits(db.sql, u, { job: 'probe-tick', shards: 1, config: { label: 7 } });
    const { leaser, runner, log } = pair();
    await leaser.heartbeat();
    await leaser.tick();
    expect(leaser.owned()).toHaveLength(2);
    await sleep(350);
    expect(runs.has(key(t, 0))).toBe(false);
    expect(runs.has(key(u, 0))).toBe(false);
    expect(runner.inFlight({ tenant: t, shard: 0 })).toBe(0);
    expect(log.filter((e) => e.fields?.job === 'not-here')).toEqual([
      {
        level: 'error',
        message: expect.stringMatching(/does not know/),
        fields: expect.objectContaining({ tenant: t, shard: 0 }),
      },
    ]);
    expect(log.filter((e) => e.fields?.tenant === u)).toEqual([
      {
        level: 'error',
        message: expect.stringMatching(/^unit config is invalid for its job \(config\.label: /),
        fields: expect.objectContaining({ shard: 0 }),
      },
    ]);

    // A config fixed in the registry is used from the next run on.
    await putTenantUnits(db.sql, u, { job: 'probe-tick', shards: 1, config: { label: 'ok' } });
    await waitFor('a run with the fixed config', () => runs.has(key(u, 0)), { timeoutMs: 2_000 });
    expect(contexts.get(key(u, 0))!.config).toEqual({ label: 'ok' });
  });

  it('close() aborts every run and waits; a run that ignores its signal is left behind after stopTimeoutMs', async () => {
    const a = tenant();
    const b = tenant();
    await putTenantUnits(db.sql, a, { job: 'probe-block', shards: 3 });
    await putTenantUnits(db.sql, b, { job: 'probe-stubborn', shards: 1 });
    const { leaser, runner, log } = pair(300);
    await leaser.heartbeat();
    await leaser.tick();
    await waitFor('every unit running', () => [0, 1, 2].every((s) => runs.has(key(a, s))) && runs.has(key(b, 0)), {
      timeoutMs: 2_000,
    });
    const started = Date.now();
    await runner.close();
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(1_000);
    for (const s of [0, 1, 2]) expect(aborted.get(key(a, s))).toBeGreaterThanOrEqual(started);
    expect(log.filter((e) => /did not stop in time/.test(e.message)).map((e) => e.fields?.tenant)).toEqual([b]);
    // A closed runner starts nothing more.
    runner.unitsGained([{ tenant: a, shard: 9, job: 'probe-tick', weight: 1, config: {} } satisfies Unit]);
    expect(runner.units()).toEqual([]);
  });

  it('never starts a run on a unit the store says another process owns', async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'probe-tick', shards: 1 });
    const { runner } = pair();
    await db.sql`update leasehold_units set owner = ${randomUUID()} where tenant = ${t}`;
    runner.unitsGained([{ tenant: t, shard: 0, job: 'probe-tick', weight: 1, config: {} }]);
    await sleep(300);
    expect(runs.has(key(t, 0))).toBe(false);
  });

  it('a deadline signal stops every unit', async () => {
    const t = tenant();
    await putTenantUnits(db.sql, t, { job: 'probe-block', shards: 2 });
    const deadline = new AbortController();
    const processId = randomUUID();
    const runner = new UnitRunner({ log: silentLog, sql: db.sql, processId, jobs, signal: deadline.signal });
    const leaser = new Leaser(db.sql, { processId, ttlMs: 2_000, heartbeatIntervalMs: 500 }, runner);
    pairs.push({ leaser, runner, log: [] });
    await leaser.heartbeat();
    await leaser.tick();
    await waitFor('both units running', () => runs.has(key(t, 0)) && runs.has(key(t, 1)), { timeoutMs: 2_000 });
    deadline.abort();
    await waitFor('both runs aborted', () => aborted.has(key(t, 0)) && aborted.has(key(t, 1)), { timeoutMs: 1_000 });
    expect(runner.units()).toEqual([]);
  });
});
