// A poison unit (docs/design.md, "Crashes and quarantine"): a unit job that calls process.exit
// on one unit, run by 3 real worker processes (test/units/fixtures/poison-worker.ts), each
// replaced as soon as it dies, as the scheduler would. The unit is quarantined after 3 crashes,
// the other units keep running, and a batch running meanwhile finishes with every item done.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createBatch, getBatch } from '../../src/batch/index.js';
import { deleteTenantUnits, liftQuarantines, putTenantUnits, releaseUnit } from '../../src/lease/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/poison-worker.ts', import.meta.url));
const TTL_MS = 3_000;

const db = useTestDatabase();
beforeAll(async () => {
  await db.sql`create table poison_unit_runs (tenant text, shard int, process_id uuid, at timestamptz default clock_timestamp())`;
});

const children = new Set<ChildProcess>();
/** Exits of the workers, in order: the code (3: killed by the poison unit) and when. */
const exits: { code: number | null; at: number }[] = [];
let replacing = true;
afterAll(async () => {
  replacing = false;
  for (const c of children) c.kill('SIGKILL');
});

function startWorker(): void {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: {
      ...process.env,
      TEST_DB_URL: db.url,
      TEST_DB_SCHEMA: db.schema,
      LEASEHOLD_TTL_MS: String(TTL_MS),
      LEASEHOLD_HEARTBEAT_MS: '500',
      LEASEHOLD_REBALANCE_MS: '200',
      LEASEHOLD_WORKER_POLL_MS: '100',
      LEASEHOLD_BEAT_MS: '300',
      LEASEHOLD_STALE_MS: '3000',
      LEASEHOLD_ATTEMPTS: '10',
      LEASEHOLD_MAX_RUNS: '1',
      LEASEHOLD_BACKOFF_MS: '100',
      LEASEHOLD_DEADLINE_MARGIN_MS: '1000',
      LEASEHOLD_UNIT_MAX_CRASHES: '3',
      LEASEHOLD_UNIT_QUARANTINE_MS: '1000',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.add(child);
  child.on('exit', (code) => {
    children.delete(child);
    exits.push({ code, at: Date.now() });
    // A dead worker is replaced at once (the scheduler would, within a minute).
    if (replacing) startWorker();
  });
}

const badUnit = async () => {
  const [u] = await db.sql<
    { owner: string | null; crashes: number; quarantines: number; quarantined_until: Date | null; left_ms: number | null }[]
  >`select owner, crashes, quarantines, quarantined_until,
      (extract(epoch from quarantined_until - now()) * 1000)::float8 as left_ms
    from leasehold_units where tenant = 'bad' and shard = 0`;
  return u;
};
const poisonExits = () => exits.filter((e) => e.code === 3).length;

it(
  'quarantines a unit whose job kills its process after 3 crashes; other units and a batch keep going',
  { timeout: 180_000 },
  async () => {
    await putTenantUnits(db.sql, 'bad', { job: 'poison-test', shards: 1 });
    await putTenantUnits(db.sql, 'good', { job: 'poison-test', shards: 5 });
    // One batch per worker (each runs one at a time), so the processes that die hold runs.
    const batches: string[] = [];
    for (let b = 0; b < 3; b++) {
      const { batch } = await createBatch(db.sql, {
        tenant: 't',
        datasource: 'd',
        job: 'sleepy',
        params: { ms: 150 },
        requestKey: `poison-${b}`,
        items: Array.from({ length: 120 }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` })),
      });
      batches.push(batch.id);
    }
    for (let i = 0; i < 3; i++) startWorker();

    // The unit's third crash quarantines it: the server's own evidence is the dead processes
    // (exit code 3, the poison's) and the unit row.
    const quarantined = await waitFor(
      'the poison unit quarantined',
      async () => ((await badUnit()).quarantined_until ? badUnit() : null),
      {
        timeoutMs: 90_000,
        everyMs: 50,
      },
    );
    expect(poisonExits()).toBe(3);
    expect(quarantined).toMatchObject({ owner: null, crashes: 3, quarantines: 1 });

    const ended = await waitFor(
      'the batches finished',
      async () => {
        const all = await Promise.all(batches.map((id) => getBatch(db.sql, id)));
        return all.every((b) => b?.status !== 'open') ? all : null;
      },
      { timeoutMs: 90_000, everyMs: 200 },
    );
    // Quarantined for good while nobody lifts it (the scheduler is not running here): no more deaths.
    await sleep(3 * TTL_MS);
    expect(poisonExits()).toBe(3);
    expect(await badUnit()).toMatchObject({ owner: null, crashes: 3, quarantines: 1 });

    // Every item done, none failed; an item of a dead process used one attempt per death (so some
    // were retried: the crashes hit the batches), never more.
    expect(ended.map((b) => b?.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    const [items] = await db.sql<{ done: number; failed: number; max_attempts: number; retried: number }[]>`select
      count(*) filter (where state = 'done')::int as done, count(*) filter (where state = 'failed')::int as failed,
      max(attempts)::int as max_attempts, count(*) filter (where attempts > 1)::int as retried
    from leasehold_items where batch_id in ${db.sql(batches)}`;
    expect(items).toMatchObject({ done: 360, failed: 0 });
    expect(items.retried).toBeGreaterThan(0);
    expect(items.max_attempts).toBeLessThanOrEqual(1 + 3);

    // The good units ran throughout: the longest pause of each, from its first run until now, is
    // a few TTLs at most (a unit of a dead process waits for its row to expire, then for a claim
    // by a live process, which takes one unit that died in a run at a time).
    const gaps = await db.sql<{ shard: number; runs: number; max_gap_ms: number }[]>`select shard, count(*)::int as runs,
      (extract(epoch from max(gap)) * 1000)::float8 as max_gap_ms
    from (select shard, at - lag(at) over (partition by shard order by at) as gap from poison_unit_runs
          where tenant = 'good') r
    group by shard order by shard`;
    console.log(
      `poison unit: quarantined after ${poisonExits()} crashes; 3 batches succeeded, ${items.retried} items retried, ` +
        `max attempts ${items.max_attempts}; good units' longest pause (ms): ${gaps.map((g) => Math.round(g.max_gap_ms)).join(', ')}`,
    );
    expect(gaps.map((g) => g.shard)).toEqual([0, 1, 2, 3, 4]);
    for (const g of gaps) {
      expect(g.runs).toBeGreaterThan(5);
      expect(g.max_gap_ms).toBeLessThan(6 * TTL_MS);
    }

    // The units that died with it (idle, or in the middle of a run) were never quarantined.
    const [good] = await db.sql<
      { quarantined: number }[]
    >`select count(*) filter (where quarantined_until is not null)::int as quarantined
    from leasehold_units where tenant = 'good'`;
    expect(good.quarantined).toBe(0);

    // Once its quarantine is over and lifted, the unit is claimed again; its next crash in a row
    // quarantines it at once, for twice as long (1 s, then 2 s).
    expect(await liftQuarantines(db.sql)).toBe(1);
    const again = await waitFor(
      'the second quarantine',
      async () => {
        const u = await badUnit();
        return u.quarantines === 2 ? u : null;
      },
      { timeoutMs: 30_000, everyMs: 20 },
    );
    expect(poisonExits()).toBe(4);
    expect(again.crashes).toBe(4);
    expect(again.left_ms).toBeGreaterThan(1_000);

    // An explicit release lifts it and forgets the crashes: they count from 1 again (the unit is
    // claimed again at once, so it goes on killing processes until its next quarantine).
    const released = await releaseUnit(db.sql, 'bad', 0);
    expect(released).toMatchObject({ crashes: 0, quarantines: 0, quarantinedUntil: null });
    const first = await waitFor(
      'a crash after the release',
      async () => {
        const u = await badUnit();
        return u.crashes > 0 ? u : null;
      },
      { timeoutMs: 30_000, everyMs: 5 },
    );
    expect(first).toMatchObject({ crashes: 1, quarantines: 0, quarantined_until: null });
    expect(poisonExits()).toBeGreaterThanOrEqual(5);

    // The poison removed, the fleet settles: every good unit owned by a live process.
    await deleteTenantUnits(db.sql, 'bad');
    await waitFor(
      'the good units owned by live processes',
      async () => {
        const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_units u
          join leasehold_processes p on p.id = u.owner and p.expires_at > now() where u.tenant = 'good'`;
        return r.n === 5;
      },
      { timeoutMs: 60_000, everyMs: 100 },
    );
    replacing = false;
    for (const c of children) c.kill('SIGTERM');
    await waitFor('every worker stopped', () => children.size === 0, { timeoutMs: 30_000, everyMs: 50 });
  },
);
