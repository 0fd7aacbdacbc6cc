// Crashes and quarantine (docs/design.md, "Crashes and quarantine") on a real PostgreSQL: a
// process that owns units, marks a run of one unit's job (the unit runner's own statement) and
// then stops heartbeating dies with that run in flight; whoever frees its units counts the crash
// on that unit alone. The processes really expire (database clock); test/units/poison.test.ts
// kills real worker processes.
import { beforeAll, expect, it } from 'vitest';
import { liftQuarantines, putTenantUnits, releaseUnit, sweep } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { endRun, startRun } from '../../src/units/sql/runs.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { clear, member, type Member } from '../support/lease.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase({ max: 4 });
let pool: Sql;
beforeAll(async () => {
  pool = db.connect({ max: 2 });
});

/**
 * Short-lived processes: TTL 1 s (how soon one that stops heartbeating is dead); quarantined after
 * 3 crashes for 2 s, doubling. Statements get 10 s: the default budget, a third of the TTL (133 ms
 * at the 400 ms TTL this test once had), is for a heartbeat loop racing its TTL, and a loaded CI
 * server answered a statement in more (StoreTimeoutError); here a slow statement only waits. A
 * process joins with a heartbeat and a claim right after it, which must come within its TTL.
 */
const SHORT = { ttlMs: 1_000, heartbeatIntervalMs: 100, maxUnitCrashes: 3, quarantineMs: 2_000, storeTimeoutMs: 10_000 };
const QUARANTINE_MS = SHORT.quarantineMs;
const UNIT0 = { tenant: 'q', shard: 0 };

/** Wait until `id`'s row has expired by the database clock. */
async function expired(id: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const [r] = await db.sql<{ done: boolean }[]>`select coalesce((select expires_at <= now()
      from leasehold_processes where id = ${id}), true) as done`;
    if (r.done) return;
    await sleep(20);
  }
  throw new Error(`${id} did not expire`);
}

/** A new process that heartbeats once and claims what it can. */
async function joined(): Promise<Member> {
  const m = member(pool, SHORT);
  await m.leaser.heartbeat();
  await m.leaser.tick();
  return m;
}

/** `m` starts a run of shard 0's job and dies in it (its row expires with the mark set). */
async function diesRunning(m: Member): Promise<void> {
  expect(await startRun(db.sql, UNIT0, m.leaser.processId)).toBeDefined();
  await expired(m.leaser.processId);
}

const units = () =>
  db.sql<{ shard: number; owner: string | null; crashes: number; quarantines: number; left_ms: number | null }[]>`select
      shard, owner, crashes, quarantines, (extract(epoch from quarantined_until - now()) * 1000)::float8 as left_ms
    from leasehold_units where tenant = 'q' order by shard`;

it('counts a crash only on the unit whose job ran when its owner died, forgets them on a clean run, and quarantines at 3 in a row for a backoff that doubles', async () => {
  await clear(db.sql);
  await putTenantUnits(db.sql, 'q', { job: 'sync', shards: 2 });
  let m = await joined();
  expect(m.rec.owned.size).toBe(2);
  await diesRunning(m);
  m = await joined();
  // Shard 1 was idle when its owner died: no crash.
  expect((await units()).map((u) => [u.crashes, u.owner])).toEqual([
    [1, m.leaser.processId],
    [0, m.leaser.processId],
  ]);
  // A run that ends (returns or throws) forgets the crashes in a row.
  await startRun(db.sql, UNIT0, m.leaser.processId);
  await endRun(db.sql, UNIT0, m.leaser.processId);
  expect((await units())[0].crashes).toBe(0);
  for (let n = 1; n <= 2; n++) {
    await diesRunning(m);
    m = await joined();
    expect((await units())[0]).toMatchObject({ crashes: n, owner: m.leaser.processId });
  }
  // The third crash in a row: quarantined for 2 s, not claimed; the idle unit is.
  await diesRunning(m);
  m = await joined();
  const [q0, q1] = await units();
  expect(q0).toMatchObject({ owner: null, crashes: 3, quarantines: 1 });
  expect(q0.left_ms).toBeGreaterThan(QUARANTINE_MS / 2);
  expect(q0.left_ms).toBeLessThanOrEqual(QUARANTINE_MS);
  expect(q1).toMatchObject({ owner: m.leaser.processId, crashes: 0 });
  expect([...m.rec.owned.keys()]).toEqual(['q/1']);
  // Its quarantine over, it is still not claimed until it is lifted (the scheduler's step).
  await sleep(q0.left_ms! + 100);
  await m.leaser.heartbeat();
  expect((await m.leaser.tick()).claimed).toBe(0);
  expect(await liftQuarantines(db.sql)).toBe(1);
  expect(await liftQuarantines(db.sql)).toBe(0);
  await m.leaser.heartbeat();
  expect((await m.leaser.tick()).claimed).toBe(1);
  // The next crash in a row quarantines it at once, for twice as long.
  await diesRunning(m);
  m = await joined();
  const [again] = await units();
  expect(again).toMatchObject({ owner: null, crashes: 4, quarantines: 2 });
  expect(again.left_ms).toBeGreaterThan(1.5 * QUARANTINE_MS);
  expect(again.left_ms).toBeLessThanOrEqual(2 * QUARANTINE_MS);
  // An explicit release lifts it and forgets both counts: claimable at once.
  expect(await releaseUnit(db.sql, 'q', 0)).toMatchObject({ crashes: 0, quarantines: 0, quarantinedUntil: null });
  await m.leaser.heartbeat();
  expect((await m.leaser.tick()).claimed).toBe(1);
});

it('counts the crash when the sweep frees the units of a process that died in a run, and a registration lifts a quarantine', async () => {
  await clear(db.sql);
  await putTenantUnits(db.sql, 'q', { job: 'sync', shards: 1 });
  for (let n = 1; n <= 3; n++) {
    const m = await joined();
    expect(m.rec.owned.size).toBe(1);
    await diesRunning(m);
    // Nobody is left to claim: the sweep frees the unit (cutoff 0: any expired process).
    expect(await sweep(db.sql, 0, SHORT)).toEqual({ processes: 1, units: 1 });
    expect((await units())[0].crashes).toBe(n);
  }
  expect((await units())[0]).toMatchObject({ owner: null, quarantines: 1 });
  expect((await joined()).rec.owned.size).toBe(0);
  // A registration (the tenant's data or config changed) lifts it and forgets the crashes.
  await putTenantUnits(db.sql, 'q', { job: 'sync', shards: 1 });
  expect((await units())[0]).toMatchObject({ crashes: 0, quarantines: 0, left_ms: null });
  expect((await joined()).rec.owned.size).toBe(1);
});
