import { beforeEach, describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { defaultRegistry } from '../../src/jobs/index.js';
import { putTenantUnits, setDesired, deleteTenantUnits, listProcesses } from '../../src/lease/index.js';
import { loadConfig, runScheduler, runWorker } from '../../src/runtime/index.js';
import { type Dispatcher, type WorkerEvent } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { createLog, silentLog } from '../../src/log.js';

const db = useTestDatabase();
beforeEach(async () => {
  await db.sql`delete from leasehold_units`;
  await db.sql`delete from leasehold_processes`;
  await db.sql`delete from leasehold_invocations`;
  await db.sql`delete from leasehold_items`;
  await db.sql`delete from leasehold_batches`;
});

/** A dispatcher that records what it was asked to invoke (the Dispatcher interface is ours). */
function recording(): Dispatcher & { events: WorkerEvent[] } {
  const events: WorkerEvent[] = [];
  return { events, invoke: async (e) => void events.push(e) };
}

const config = (extra: Record<string, string> = {}) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '300',
    LEASEHOLD_REBALANCE_MS: '300',
    LEASEHOLD_SWEEP_CUTOFF_MS: '2000',
    LEASEHOLD_DEADLINE_MARGIN_MS: '500',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_WORKER_IDLE_MS: '300',
    ...extra,
  });

describe('scheduler keeps the desired count of live processes', () => {
  it('invokes nothing when no unit has weight and no batch is open', async () => {
    await setDesired(db.sql, 5);
    await putTenantUnits(db.sql, 'idle', { job: 'outbox-delivery', shards: 3, weight: 0 });
    const d = recording();
    const r = await runScheduler({ sql: db.sql, config: config(), dispatcher: d });
    expect(r.invoked).toBe(0);
    expect(d.events).toEqual([]);
  });

  it('invokes desired − live − pending, capped, and overlapping runs never over-invoke', async () => {
    await setDesired(db.sql, 7);
    await putTenantUnits(db.sql, 'acme', { job: 'outbox-delivery', shards: 4 });
    // Two live processes already.
    for (const id of ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002']) {
      await db.sql`insert into leasehold_processes (id, hostname, version, expires_at) values (${id}, 'h', 'v', now() + interval '1 minute')`;
    }
    const d = recording();
    const runs = await Promise.all(
      Array.from({ length: 6 }, () =>
        runScheduler({ sql: db.connect({ max: 1 }), config: config({ LEASEHOLD_INVOKE_CAP: '4' }), dispatcher: d }),
      ),
    );
    // 7 desired − 2 live = 5, but each run invokes at most 4: the first takes 4, another 1, the rest 0.
    expect(runs.map((r) => r.invoked).sort()).toEqual([0, 0, 0, 0, 1, 4]);
    expect(d.events).toHaveLength(5);
    expect(new Set(d.events.map((e) => e.invocationId)).size).toBe(5);
    // Invoked but not yet live: a later run invokes nothing more.
    const again = await runScheduler({ sql: db.sql, config: config(), dispatcher: d });
    expect(again.invoked).toBe(0);
    expect(again.fleet).toEqual({ desired: 7, live: 2, pending: 5 });
  });

  it('the sweep deletes processes expired past the cutoff and frees their units', async () => {
    await putTenantUnits(db.sql, 'acme', { job: 'outbox-delivery', shards: 2 });
    const dead = '00000000-0000-4000-8000-0000000000dd';
    await db.sql`insert into leasehold_processes (id, hostname, version, expires_at) values (${dead}, 'h', 'v', now() - interval '1 hour')`;
    await db.sql`update leasehold_units set owner = ${dead}`;
    const r = await runScheduler({ sql: db.sql, config: config(), dispatcher: recording() });
    expect(r.swept).toEqual({ processes: 1, units: 2 });
    const owners = await db.sql`select owner from leasehold_units`;
    expect(owners.every((o) => o.owner === null)).toBe(true);
  });
});

describe('a worker process', () => {
  it('marks its invocation live, owns its share while it lives, and returns owning nothing', async () => {
    await setDesired(db.sql, 3);
    await putTenantUnits(db.sql, 'acme', { job: 'outbox-delivery', shards: 6 });
    const d = recording();
    const plan = await runScheduler({ sql: db.sql, config: config(), dispatcher: d });
    expect(plan.invoked).toBe(3);
    const seen: number[] = [];
    const workers = d.events.splice(0).map((event) =>
      runWorker(
        event,
        { getRemainingTimeInMillis: () => 3000 },
        {
          log: silentLog,
          sql: db.sql,
          jobs: defaultRegistry(),
          config: config(),
          dispatcher: d,
          units: () => {
            let owned = 0;
            return {
              unitsGained(u) {
                owned += u.length;
                seen.push(owned);
              },
              unitsLost(u) {
                owned -= u.length;
              },
              inFlight: () => 0,
              close: async () => {},
            };
          },
        },
      ),
    );
    // While they live: three processes, 2 units each, no invocation pending any more.
    await sleep(1500);
    const live = await db.sql`select p.id, (select count(*) from leasehold_units u where u.owner = p.id) as units
      from leasehold_processes p where expires_at > now()`;
    expect(live.map((p) => p.units)).toEqual([2, 2, 2]);
    expect((await db.sql`select count(*) as n from leasehold_invocations`)[0].n).toBe(0);

    const results = await Promise.all(workers);
    expect(results.every((r) => r.reason === 'deadline')).toBe(true);
    // Owning nothing: no process row, no owned unit. Each asked for one replacement.
    expect((await db.sql`select count(*) as n from leasehold_processes`)[0].n).toBe(0);
    expect((await db.sql`select count(*) as n from leasehold_units where owner is not null`)[0].n).toBe(0);
    expect(results.reduce((s, r) => s + r.replacements, 0)).toBe(3);
    expect(d.events.filter((e) => e.invocationId)).toHaveLength(3);
  }, 15_000);

  it("a replacement invoked at the deadline continues its predecessor's chain, hop after hop", async () => {
    await setDesired(db.sql, 1);
    await putTenantUnits(db.sql, 'acme', { job: 'outbox-delivery', shards: 2 });
    const d = recording();
    expect((await runScheduler({ sql: db.sql, config: config(), dispatcher: d })).invoked).toBe(1);
    type Row = {
      id: string;
      started_at: Date;
      replaces: string | null;
      chain_id: string;
      chain_started_at: Date;
      replacements: number;
    };
    const rows: Row[] = [];
    const results = [];
    // Three processes in a row: the scheduler's, its replacement and the replacement's.
    for (let hop = 0; hop < 3; hop++) {
      const [event] = d.events.splice(0);
      expect(event.invocationId).toBeDefined();
      const worker = runWorker(
        event,
        { getRemainingTimeInMillis: () => 1500 },
        { log: silentLog, sql: db.sql, jobs: defaultRegistry(), config: config(), dispatcher: d },
      );
      // While it lives, its row says where it stands in the chain.
      let row: Row | undefined;
      while (!row) {
        [row] = await db.sql<Row[]>`select id, started_at, replaces, chain_id, chain_started_at, replacements
          from leasehold_processes where expires_at > now()`;
        if (!row) await sleep(20);
      }
      rows.push(row);
      const [view] = await listProcesses(db.sql);
      expect(view).toMatchObject({ id: row.id, replaces: row.replaces, chainId: row.chain_id, replacements: hop });
      results.push(await worker);
    }
    expect(results.map((r) => [r.reason, r.replacements])).toEqual([
      ['deadline', 1],
      ['deadline', 1],
      ['deadline', 1],
    ]);
    const [first, second, third] = rows;
    // The first starts a chain of its own, on the database clock: its id, its start.
    expect(first).toMatchObject({ replaces: null, chain_id: first.id, replacements: 0 });
    expect(first.chain_started_at).toEqual(first.started_at);
    // Each later one replaces the one before, in the same chain, counting the hops.
    expect(second).toMatchObject({ replaces: first.id, chain_id: first.id, replacements: 1 });
    expect(third).toMatchObject({ replaces: second.id, chain_id: first.id, replacements: 2 });
    expect([second.chain_started_at, third.chain_started_at]).toEqual([first.started_at, first.started_at]);
    expect(new Set(rows.map((r) => r.id)).size).toBe(3);
    // The last one's replacement carries the chain on in its event.
    expect(d.events).toEqual([
      {
        invocationId: expect.any(String),
        chain: { replaces: third.id, id: first.id, startedAt: first.started_at.toISOString(), replacements: 3 },
      },
    ]);
  }, 20_000);

  it('a malformed chain in the event starts a chain of its own, logged', async () => {
    await setDesired(db.sql, 1);
    await putTenantUnits(db.sql, 'acme', { job: 'outbox-delivery', shards: 1 });
    const d = recording();
    await runScheduler({ sql: db.sql, config: config(), dispatcher: d });
    const [event] = d.events.splice(0);
    const said: string[] = [];
    const worker = runWorker(
      { ...event, chain: { replaces: 'not-a-uuid', id: 'x', startedAt: 'soon', replacements: -1 } },
      { getRemainingTimeInMillis: () => 1200 },
      {
        log: createLog((_level, message) => void said.push(message)),
        sql: db.sql,
        jobs: defaultRegistry(),
        config: config(),
        dispatcher: d,
      },
    );
    let row: { id: string; replaces: string | null; chain_id: string } | undefined;
    while (!row) {
      [row] = await db.sql<{ id: string; replaces: string | null; chain_id: string }[]>`select id, replaces, chain_id
        from leasehold_processes where expires_at > now()`;
      if (!row) await sleep(20);
    }
    expect(row).toMatchObject({ replaces: null, chain_id: row.id });
    expect((await worker).reason).toBe('deadline');
    expect(said.some((m) => /malformed chain/.test(m))).toBe(true);
  }, 20_000);

  it('with no unit work, an idle worker returns soon instead of waiting for its deadline', async () => {
    await deleteTenantUnits(db.sql, 'acme');
    const t0 = Date.now();
    const r = await runWorker(
      {},
      { getRemainingTimeInMillis: () => 60_000 },
      { log: silentLog, sql: db.sql, jobs: defaultRegistry(), config: config(), dispatcher: recording() },
    );
    expect(r.reason).toBe('idle');
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect((await db.sql`select count(*) as n from leasehold_processes`)[0].n).toBe(0);
  });

  it('an open batch with no unit work brings a dispatched worker, not the fleet', async () => {
    await setDesired(db.sql, 3);
    await createBatch(db.sql, {
      tenant: 't',
      datasource: 'd',
      job: 'checksum',
      params: { dir: '/tmp' },
      requestKey: 'k',
      items: [{ key: 'x' }],
    });
    const d = recording();
    const r = await runScheduler({ sql: db.sql, config: config(), dispatcher: d });
    expect(r.dispatched).toHaveLength(1);
    expect(r.invoked).toBe(0);
  });
});
