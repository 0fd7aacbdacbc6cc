// The live count follows the desired count both ways, with the real scheduler and real workers
// on a real PostgreSQL (short intervals: heartbeats and rebalancing every 200 ms, a scheduler
// run every second): the surplus retires within two scheduler runs, invocations lost on the
// way hold nothing back past their confirmation window, and workers sent for batches own no
// unit and do not count.
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createBatch, getBatch } from '../../src/batch/index.js';
import { planInvocations, putTenantUnits, setDesired } from '../../src/lease/index.js';
import { loadConfig } from '../../src/runtime/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { inProcessFleet, slowJobs, type InProcessFleet } from '../support/fleet.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase({ max: 20 });
beforeEach(async () => {
  for (const t of ['leasehold_units', 'leasehold_processes', 'leasehold_invocations', 'leasehold_items', 'leasehold_batches']) {
    await db.sql`delete from ${db.sql(t)}`;
  }
});

const TICK_MS = 1_000;

const config = (extra: Record<string, string> = {}) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '3000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_SWEEP_CUTOFF_MS: '3000',
    LEASEHOLD_DEADLINE_MARGIN_MS: '1000',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_WORKER_IDLE_MS: '300',
    LEASEHOLD_INVOCATION_PENDING_MS: '1000',
    LEASEHOLD_DISPATCH_COOLDOWN_MS: '500',
    ...extra,
  });

const jobs = slowJobs();

/** Units owned by no live process, and the weight each live fleet process owns. */
async function ownership(): Promise<{ orphaned: number; weights: number[] }> {
  const [r] = await db.sql<{ orphaned: number }[]>`select count(*) as orphaned from leasehold_units u
    where not exists (select 1 from leasehold_processes p where p.id = u.owner and p.expires_at > now())`;
  const rows = await db.sql<
    { weight: number }[]
  >`select (select coalesce(sum(weight), 0) from leasehold_units u where u.owner = p.id)::int as weight
    from leasehold_processes p where p.expires_at > now() and p.role = 'fleet' and not p.retiring`;
  return { orphaned: r.orphaned, weights: rows.map((x) => x.weight) };
}

/** Every unit owned by a live process, each within ±20 % of an even split among `n`. */
const balanced = (n: number, total: number) => async () => {
  const o = await ownership();
  return o.orphaned === 0 && o.weights.length === n && o.weights.every((w) => w >= 0.8 * (total / n) && w <= 1.2 * (total / n));
};

describe('the live count follows the desired count', () => {
  let fleet: InProcessFleet | undefined;
  afterAll(async () => {
    await fleet?.stop();
  });

  it('10 → 3: exactly the surplus retires within two scheduler runs, losing nothing; 3 → 10 likewise', async () => {
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 600 });
    // A batch running across the changes: its runs are handed off and taken over, not lost.
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'follow',
      job: 'slow',
      params: { ms: 100 },
      requestKey: 'follow-1',
      items: Array.from({ length: 60 }, (_, i) => ({ key: `i${i}` })),
    });
    await setDesired(db.sql, 10);
    fleet = inProcessFleet(db.sql, config(), { jobs, drop: (_n, e) => e.batchId !== undefined });
    expect((await fleet.tick()).invoked).toBe(10);
    await waitFor('the units balanced among 10 processes', balanced(10, 600), { timeoutMs: 5_000, everyMs: 50 });

    // Down: the first run asks exactly 7 to retire; by the second, 3 are live.
    await setDesired(db.sql, 3);
    const down = await fleet.tick();
    expect(down.retired).toBe(7);
    expect(down.invoked).toBe(0);
    await sleep(TICK_MS);
    const second = await fleet.tick();
    expect(second.retired).toBe(0);
    expect(await fleet.live()).toEqual({ fleet: 3, retiring: 0, batch: 0 });
    const retired = fleet.returned.filter((r) => r.reason === 'retired');
    expect(retired).toHaveLength(7);
    expect(retired.every((r) => r.role === 'fleet')).toBe(true);
    // Nothing lost: every unit owned again within two rebalancing intervals, evenly.
    await waitFor('the units balanced among 3 processes', balanced(3, 600), { timeoutMs: 2 * 200 + 500, everyMs: 50 });

    // Up: the first run invokes 7; by the second, 10 are live and nothing more is invoked.
    await setDesired(db.sql, 10);
    expect((await fleet.tick()).invoked).toBe(7);
    await sleep(TICK_MS);
    expect((await fleet.tick()).invoked).toBe(0);
    expect(await fleet.live()).toEqual({ fleet: 10, retiring: 0, batch: 0 });
    await waitFor('the units balanced among 10 processes', balanced(10, 600), { timeoutMs: 2_000, everyMs: 50 });

    // The batch ends with every item done once.
    await waitFor('the batch to end', async () => (await getBatch(db.sql, batch.id)).status !== 'open', {
      timeoutMs: 20_000,
      everyMs: 50,
    });
    const b = await getBatch(db.sql, batch.id);
    expect(b.status).toBe('succeeded');
    expect(b.counts.done).toBe(60);
    const results = await fleet.stop();
    fleet = undefined;
    expect(results.filter((r) => r.reason === 'retired')).toHaveLength(7);
    expect((await db.sql`select count(*) as n from leasehold_units where owner is not null`)[0].n).toBe(0);
  }, 60_000);

  it('with every third invocation dropped (answered as sent), live returns to the desired 3 within two scheduler runs', async () => {
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 30 });
    await setDesired(db.sql, 3);
    fleet = inProcessFleet(db.sql, config(), { drop: (n) => n % 3 === 0 });
    expect((await fleet.tick()).invoked).toBe(3);
    expect(fleet.invocations.map((i) => i.dropped)).toEqual([false, false, true]);
    // The lost invocation counts as coming for its confirmation window (1 s) only.
    await sleep(TICK_MS + 100);
    const second = await fleet.tick();
    expect(second.fleet).toEqual({ desired: 3, live: 2, pending: 0 });
    expect(second.invoked).toBe(1);
    await waitFor('three live fleet processes', async () => (await fleet!.live()).fleet === 3, { timeoutMs: 1_000, everyMs: 50 });
    await waitFor('the units balanced among 3 processes', balanced(3, 30), { timeoutMs: 1_000, everyMs: 50 });
    await fleet.stop();
    fleet = undefined;
  }, 30_000);

  it('a batch whose dispatch was dropped is dispatched again on a later scheduler run and finishes', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'dropped',
      job: 'slow',
      params: { ms: 10 },
      requestKey: 'dropped-1',
      items: [{ key: 'a' }, { key: 'b' }],
    });
    fleet = inProcessFleet(db.sql, config(), { jobs, drop: (n) => n === 1 });
    expect((await fleet.tick()).dispatched).toEqual([batch.id]);
    expect(fleet.invocations).toEqual([{ event: { batchId: batch.id, invocationId: expect.any(String) }, dropped: true }]);
    // No unit work: no fleet worker takes it; the cooldown (500 ms) passes and it goes out again.
    await sleep(TICK_MS);
    expect((await fleet.tick()).dispatched).toEqual([batch.id]);
    await waitFor('the batch to succeed', async () => (await getBatch(db.sql, batch.id)).status === 'succeeded', {
      timeoutMs: 5_000,
      everyMs: 50,
    });
    const results = await fleet.stop();
    fleet = undefined;
    expect(results.map((r) => r.role)).toEqual(['batch']);
  }, 30_000);

  it('a worker sent for a batch owns no unit and is not counted against the desired count', async () => {
    await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 12 });
    await setDesired(db.sql, 2);
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'role',
      job: 'slow',
      // 6 items 2 at a time, 1.5 s each: the batch worker still runs (4.5 s) after the waits for
      // the fleet and for the balance below (2 s at most each), so its row is there to read.
      params: { ms: 1_500 },
      requestKey: 'role-1',
      items: Array.from({ length: 6 }, (_, i) => ({ key: `i${i}` })),
    });
    fleet = inProcessFleet(db.sql, config(), { jobs });
    const first = await fleet.tick();
    expect(first.dispatched).toEqual([batch.id]);
    expect(first.invoked).toBe(2);
    await waitFor(
      'one batch worker and two fleet processes',
      async () => (await fleet!.live()).batch === 1 && (await fleet!.live()).fleet === 2,
      { timeoutMs: 2_000, everyMs: 50 },
    );
    await waitFor('the units balanced among 2 processes', balanced(2, 12), { timeoutMs: 2_000, everyMs: 50 });
    const [batchWorker] = await db.sql<
      { units: number }[]
    >`select (select count(*) from leasehold_units u where u.owner = p.id) as units
      from leasehold_processes p where p.role = 'batch'`;
    expect(batchWorker, 'the batch worker is still running').toBeDefined();
    expect(batchWorker.units).toBe(0);
    // Counted apart: the plan sees 2 live, invokes nothing and retires nobody.
    const plan = await planInvocations(db.sql, { cap: 10, pendingMs: 1_000 });
    expect(plan).toMatchObject({ desired: 2, live: 2, invocations: [], retired: [] });
    // Once its batch is done, the batch worker leaves; the fleet stays.
    await waitFor('the batch to succeed', async () => (await getBatch(db.sql, batch.id)).status === 'succeeded', {
      timeoutMs: 10_000,
      everyMs: 50,
    });
    await waitFor('no batch worker left', async () => (await fleet!.live()).batch === 0, { timeoutMs: 2_000, everyMs: 50 });
    expect((await fleet.live()).fleet).toBe(2);
    expect(fleet.returned.map((r) => [r.role, r.reason])).toEqual([['batch', 'idle']]);
    await fleet.stop();
    fleet = undefined;
  }, 30_000);
});
