// Tenant fairness (docs/design.md, "Tenant fairness"): which batch a takeover chooses, per-tenant
// limits under concurrent takeovers, priorities within a tenant, and time slices.
import { randomUUID } from 'node:crypto';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  Runner,
  cancelBatch,
  claimDispatch,
  createBatch,
  getBatch,
  getTenant,
  setTenantLimit,
  type BatchInfo,
  type Executor,
  type RunnerEvent,
} from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { newBatch, runOf } from './helpers.js';
import { deferred, waitFor } from '../support/waits.js';
import { sleep } from '../support/time.js';

const db = useTestDatabase();

/** Pools of this test's runners, ended after each round and test (the server's connections are shared). */
const pool = usePools(db, 2);
const endPools = pool.endAll;

let tenantSeq = 0;
/** A tenant name no other test uses. */
const tenant = (name: string) => `${name}-${++tenantSeq}-${Math.random().toString(36).slice(2, 6)}`;

/**
 * Cancels every open batch, so one test's waiting batches do not compete in the next: their run
 * rows are deleted first, as a cancel does, so no run of them moves anything after.
 */
async function cancelAllOpen(): Promise<void> {
  await db.sql`with gone as (
      delete from leasehold_runs r using leasehold_batches b where b.id = r.batch_id and b.status = 'open' returning 1
    )
    update leasehold_batches set status = 'cancelled', finished_at = now(), live_runs = 0
    where status = 'open' and (select count(*) from gone) >= 0`;
}

describe('choosing the next batch', () => {
  it('takes the waiting batch of the tenant running the fewest, then by priority and age within the tenant', async () => {
    await cancelAllOpen();
    const big = tenant('big');
    const small = tenant('small');
    const gate = deferred();
    const hold: Executor = { work: () => gate.promise };
    const b1 = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
    const b2 = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
    const b3 = (await createBatch(db.sql, newBatch(1, { tenant: big, priority: 8 }))).batch;
    const s1 = (await createBatch(db.sql, newBatch(1, { tenant: small }))).batch;
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    const taken: BatchInfo[] = [];
    for (let i = 0; i < 4; i++) taken.push((await runner.takeOver(() => hold))!);
    // big first (alphabetical among never-served tenants), its priority-8 batch before older ones;
    // then small (runs none); then big again, oldest first.
    expect(taken.map((b) => b.id)).toEqual([b3.id, s1.id, b1.id, b2.id]);
    expect(await runner.takeOver(() => hold)).toBeUndefined();
    expect(await getTenant(db.sql, big)).toMatchObject({ running: 3, waiting: 0 });
    gate.resolve();
    await runner.close();
  });

  it('never passes over the tenant running the fewest for one running more while another statement holds its row; one running as few may be taken', async () => {
    await cancelAllOpen();
    const big = tenant('big');
    const small = tenant('small');
    // Sorts after small, so it is taken only in small's place.
    const tie = tenant('tie');
    const gate = deferred();
    const hold: Executor = { work: () => gate.promise };
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    // big runs two batches and has a third waiting; small runs none and has one waiting.
    for (let i = 0; i < 2; i++) {
      const b = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
      expect((await runner.takeOver(() => hold, b.id))?.id).toBe(b.id);
    }
    const waitingBig = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
    const waitingSmall = (await createBatch(db.sql, newBatch(1, { tenant: small }))).batch;

    // Another statement holds small's tenant row, as a racing takeover of small's batch does for
    // its statement: a real open transaction, whose lock a NOWAIT lock of the row runs into.
    const locked = deferred();
    const release = deferred();
    const holder = pool(1).begin(async (t) => {
      await t`select 1 from leasehold_tenants where tenant = ${small} for update`;
      locked.resolve();
      await release.promise;
    });
    await locked.promise;
    // Let go whatever the checks below find (a failed one must not leave the row held).
    onTestFinished(async () => {
      release.resolve();
      await holder;
    });
    await expect(db.sql`select 1 from leasehold_tenants where tenant = ${small} for update nowait`).rejects.toMatchObject({
      code: '55P03',
    });
    const args = () => ({ run: randomUUID(), process: randomUUID(), staleMs: 10_000, maxRunning: q.NO_LIMIT });
    // One statement: nothing rather than big's waiting batch (big runs 2, small none), and the
    // runner is told to look again.
    expect((await q.takeOver(db.sql, args()))?.id).toBeUndefined();
    expect(await q.takeoverMayFind(db.sql, { maxRunning: q.NO_LIMIT })).toBe(true);
    expect(await getBatch(db.sql, waitingBig.id)).toMatchObject({ ownerProcess: null, runs: 0 });
    // A tenant running as few (none) is taken in small's place.
    const tied = (await createBatch(db.sql, newBatch(1, { tenant: tie }))).batch;
    const tiedRun = args();
    expect((await q.takeOver(db.sql, tiedRun))?.id).toBe(tied.id);
    expect(await q.handBack(db.sql, tied.id, tiedRun.run)).toBe(true);
    await cancelBatch(db.sql, tied.id);

    // A runner's takeover tries again while the row is held, and takes small's batch once it is let go.
    const taking = runner.takeOver(() => hold);
    await sleep(50);
    release.resolve();
    await holder;
    expect((await taking)?.id).toBe(waitingSmall.id);
    gate.resolve();
    await runner.close();
  });

  it('lets a worker sent for a batch take a waiting batch of a tenant served worse; the sent batch stays dispatchable', async () => {
    await cancelAllOpen();
    const big = tenant('big');
    const small = tenant('small');
    const gate = deferred();
    const hold: Executor = { work: () => gate.promise };
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    const first = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
    expect((await runner.takeOver(() => hold, first.id))?.id).toBe(first.id);
    const sent = (await createBatch(db.sql, newBatch(1, { tenant: big }))).batch;
    const other = (await createBatch(db.sql, newBatch(1, { tenant: small }))).batch;
    await q.markDispatched(db.sql, sent.id);
    // big runs one batch, small none: the worker sent for big's batch runs small's.
    expect((await runner.takeOver(() => hold, sent.id, { orFairer: true }))?.id).toBe(other.id);
    expect(await getBatch(db.sql, sent.id)).toMatchObject({ status: 'open', ownerProcess: null, runs: 0 });
    expect(await claimDispatch(db.sql, { staleMs: 10_000, cooldownMs: 60_000 })).toContain(sent.id);
    // Now both tenants run one: the sent batch is taken.
    await q.markDispatched(db.sql, sent.id);
    expect((await runner.takeOver(() => hold, sent.id, { orFairer: true }))?.id).toBe(sent.id);
    gate.resolve();
    await runner.close();
  });

  it('takes only the named batch when told to run that one (Runner.start), however others fare', async () => {
    await cancelAllOpen();
    const big = tenant('big');
    const small = tenant('small');
    const gate = deferred();
    const hold: Executor = { work: () => gate.promise };
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    await runner.start(newBatch(1, { tenant: big }), {}, hold);
    await createBatch(db.sql, newBatch(1, { tenant: small }));
    const { batch } = await runner.start(newBatch(1, { tenant: big, datasource: 'other' }), {}, hold);
    expect(runner.running(batch.id)).toBeDefined();
    expect(await getTenant(db.sql, small)).toMatchObject({ running: 0, waiting: 1 });
    gate.resolve();
    await runner.close();
  });

  it('counts running and waiting batches per tenant through start, takeover, handoff, finish and cancel', async () => {
    await cancelAllOpen();
    const t = tenant('count');
    const gate = deferred();
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    const a = (await createBatch(db.sql, newBatch(2, { tenant: t }))).batch;
    const b = (await createBatch(db.sql, newBatch(2, { tenant: t, priority: 2 }))).batch;
    expect(await getTenant(db.sql, t)).toMatchObject({ running: 0, waiting: 2, maxRunning: null });
    expect((await runner.takeOver(() => ({ work: () => gate.promise })))?.id).toBe(a.id);
    const info = await getTenant(db.sql, t);
    expect(info).toMatchObject({ running: 1, waiting: 1 });
    expect(info.waitingBatches.map((x) => [x.id, x.priority])).toEqual([[b.id, 2]]);
    expect(info.runningBatches.map((x) => x.id)).toEqual([a.id]);
    expect(info.oldestWaitMs).toBeGreaterThanOrEqual(0);
    await runner.stop(a.id);
    expect(await getTenant(db.sql, t)).toMatchObject({ running: 0, waiting: 2 });
    await db.sql`update leasehold_batches set status = 'cancelled', finished_at = now() where id = ${b.id}`;
    expect(await getTenant(db.sql, t)).toMatchObject({ running: 0, waiting: 1 });
    gate.resolve();
    expect((await runner.takeOver(() => ({ work: async () => 'ok' })))?.id).toBe(a.id);
    await waitFor('the batch to finish', async () => (await getBatch(db.sql, a.id)).status === 'succeeded');
    expect(await getTenant(db.sql, t)).toMatchObject({ running: 0, waiting: 0, oldestWaitMs: null });
    await runner.close();
  });

  it('refuses a priority outside 0–9 and a limit that is not a non-negative integer', async () => {
    await expect(createBatch(db.sql, newBatch(1, { priority: 10 }))).rejects.toThrow(/priority/);
    await expect(createBatch(db.sql, newBatch(1, { priority: 1.5 }))).rejects.toThrow(/priority/);
    await expect(setTenantLimit(db.sql, 'x', -1)).rejects.toThrow(/maxRunning/);
  });
});

describe('takeovers at once', () => {
  it('workers sent at the same moment for batches of one tenant each take theirs (the tenant row one of them holds is tried again), round after round', async () => {
    await cancelAllOpen();
    const t = tenant('burst');
    const work: Executor = { work: async () => null };
    for (let round = 0; round < 5; round++) {
      const runners = Array.from({ length: 6 }, () => new Runner(pool(2), { parallel: 4 }));
      const ids = await Promise.all(
        runners.map(() =>
          createBatch(db.sql, newBatch(5, { tenant: t, datasource: `d-${round}-${Math.random()}` })).then((r) => r.batch.id),
        ),
      );
      const taken = await Promise.all(runners.map((r, i) => r.takeOver(() => work, ids[i])));
      expect(taken.map((b) => b?.id)).toEqual(ids);
      await waitFor('every batch done', async () =>
        (await Promise.all(ids.map((id) => getBatch(db.sql, id)))).every((b) => b.status === 'succeeded'),
      );
      await Promise.all(runners.map((r) => r.close()));
    }
    await endPools();
  });
});

describe('per-tenant limits', () => {
  it('lets exactly one of many concurrent takeovers run a batch of a tenant limited to 1, round after round', async () => {
    for (let round = 0; round < 5; round++) {
      await cancelAllOpen();
      const t = tenant('capped');
      await setTenantLimit(db.sql, t, 1);
      for (let i = 0; i < 5; i++) await createBatch(db.sql, newBatch(1, { tenant: t }), { maxOpen: 100 });
      const gate = deferred();
      const runners = Array.from({ length: 8 }, () => new Runner(pool(1), { beatMs: 1_000, staleMs: 10_000 }));
      const taken = await Promise.all(runners.map((r) => r.takeOver(() => ({ work: () => gate.promise }))));
      expect(taken.filter(Boolean)).toHaveLength(1);
      expect(await getTenant(db.sql, t)).toMatchObject({ running: 1, waiting: 4, maxRunning: 1, effectiveMaxRunning: 1 });
      gate.resolve();
      await Promise.all(runners.map((r) => r.close()));
      await endPools();
    }
  });

  it('leaves a waiting batch of a tenant at its limit out of dispatch until a slot frees', async () => {
    await cancelAllOpen();
    const t = tenant('full');
    await setTenantLimit(db.sql, t, 1);
    const gate = deferred();
    const runner = new Runner(pool(2), { beatMs: 1_000, staleMs: 10_000 });
    const first = (await createBatch(db.sql, newBatch(1, { tenant: t }), { maxOpen: 100 })).batch;
    const second = (await createBatch(db.sql, newBatch(1, { tenant: t }), { maxOpen: 100 })).batch;
    expect((await runner.takeOver(() => ({ work: () => gate.promise })))?.id).toBe(first.id);
    expect(await claimDispatch(db.sql, { staleMs: 10_000, cooldownMs: 0 })).not.toContain(second.id);
    await cancelBatch(db.sql, first.id);
    expect(await claimDispatch(db.sql, { staleMs: 10_000, cooldownMs: 0 })).toContain(second.id);
    gate.resolve();
    await runner.close();
  });

  it('runs one batch at a time with maxRunning 1 and 5 concurrent starts, the rest starting in order as each ends, round after round', async () => {
    // Executions never overlap (`peak`), and batches are taken in the order they were started.
    // Three rounds: the order must hold whichever of the racing runners wins each takeover.
    for (let round = 0; round < 3; round++) {
      await cancelAllOpen();
      const t = tenant('one');
      const started = await Promise.all(
        Array.from({ length: 5 }, () => createBatch(db.sql, newBatch(4, { tenant: t }), { maxOpen: 100 })),
      );
      const order = (
        await db.sql<{ id: string }[]>`select id from leasehold_batches where tenant = ${t} order by created_at, id`
      ).map((r) => r.id);
      expect(order).toHaveLength(5);
      let peak = 0;
      let now = 0;
      const work = async () => {
        now++;
        peak = Math.max(peak, now);
        await sleep(20);
        now--;
        return 'ok';
      };
      // Three workers of two runs each, with the runner's default limit of 1 per tenant.
      const runners = Array.from(
        { length: 3 },
        () => new Runner(pool(2), { beatMs: 200, staleMs: 5_000, maxRuns: 2, maxRunning: 1, parallel: 1 }),
      );
      for (const r of runners) r.watch(() => ({ work }), 10);
      await waitFor(
        'every batch to finish',
        async () => (await Promise.all(started.map((s) => getBatch(db.sql, s.batch.id)))).every((b) => b.status === 'succeeded'),
        { timeoutMs: 30_000, everyMs: 20 },
      );
      await Promise.all(runners.map((r) => r.close()));
      await endPools();
      const rows = await db.sql<
        { id: string; taken_at: Date; finished_at: Date; runs: number }[]
      >`select id, taken_at, finished_at, runs
        from leasehold_batches where tenant = ${t} order by taken_at`;
      expect(rows.map((r) => r.id)).toEqual(order);
      expect(rows.every((r) => r.runs === 1)).toBe(true);
      expect(peak).toBe(1);
    }
  });
});

describe('time slices', () => {
  it('alternates runs between three tenants with 10, 5 and 1 waiting batches on 2 workers; none waits more than 2 slices', async () => {
    await cancelAllOpen();
    const names = [tenant('a'), tenant('b'), tenant('c')];
    const counts = [10, 5, 1];
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < counts[i]; j++) await createBatch(db.sql, newBatch(1_000, { tenant: names[i] }), { maxOpen: 100 });
    }
    // The order of run starts as the database took them (a trigger on the run rows, by
    // clock_timestamp()): the runners' run-started events can come in another order when two
    // takes commit a moment apart (CI showed "a b c a a b" where the rows said otherwise).
    await db.sql`create table if not exists slice_starts (tenant text not null, at timestamptz not null default clock_timestamp())`;
    await db.sql`truncate slice_starts`;
    await db.sql.unsafe(`create or replace function slice_start() returns trigger language plpgsql as $$
      begin
        insert into slice_starts (tenant) select tenant from leasehold_batches where id = new.batch_id;
        return new;
      end $$`);
    await db.sql.unsafe(
      `create or replace trigger slice_start after insert on leasehold_runs for each row execute function slice_start()`,
    );
    const starts: string[] = [];
    const sliced: string[] = [];
    const onEvent = (e: RunnerEvent) => {
      if (e.type === 'run-started') starts.push(e.tenant);
      if (e.type === 'run-ended') sliced.push(e.result.outcome);
    };
    const work = async () => {
      await sleep(10);
      return 'ok';
    };
    const runners = Array.from(
      { length: 2 },
      () => new Runner(pool(3), { beatMs: 100, staleMs: 5_000, maxRuns: 1, parallel: 2, sliceMs: 600, onEvent }),
    );
    // The second worker comes half a slice later, so the two workers' slices end apart (as
    // workers' do when they did not all start at one instant).
    runners[0].watch(() => ({ work }), 10);
    await sleep(300);
    runners[1].watch(() => ({ work }), 10);
    await waitFor('12 runs to start', () => starts.length >= 12, { timeoutMs: 30_000, everyMs: 20 });
    // Sliced runs gave their claimed items back and let running ones finish: no attempt lost.
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items i
      join leasehold_batches b on b.id = i.batch_id where b.tenant in ${db.sql(names)} and i.attempts > 1`;
    await Promise.all(runners.map((r) => r.close()));
    await db.sql`drop trigger slice_start on leasehold_runs`;
    const rows = await db.sql<{ tenant: string; gap_ms: number | null }[]>`select tenant,
        (extract(epoch from at - lag(at) over (order by at)) * 1000)::float8 as gap_ms
      from slice_starts order by at limit 12`;
    const seq = rows.map((r) => r.tenant);
    expect(seq).toHaveLength(12);
    expect(n).toBe(0);
    // Runs ended by slices (or their batch done: the single batch of the third tenant), not by
    // losing their batch or a store error.
    expect(sliced.filter((o) => o === 'sliced' || o === 'succeeded').length, sliced.join(' ')).toBeGreaterThanOrEqual(8);
    expect(
      sliced.filter((o) => o === 'lost' || o === 'store-error'),
      sliced.join(' '),
    ).toEqual([]);
    // Every tenant had a batch waiting throughout: no tenant starts twice in a row, and between
    // two starts of one tenant at most tenants = 3 others start. Tenants − 1 = 2 when the two
    // workers' slices end in the order they began; under load one worker's slice check can come
    // after the other's, whose tenant then started first and is served again before it (CI:
    // a b c b a …), which is one slice's wait all the same.
    // Two takes a few ms apart may both choose from one snapshot, before either committed (the
    // tenant row's lock then only re-checks its limit), and start one tenant twice (CI: "a b c a
    // b b", 2 starts of b in a row at the database): such a pair is allowed, no other repeat.
    const racing = (i: number) => rows[i].gap_ms !== null && rows[i].gap_ms! < 100;
    for (let i = 1; i < seq.length; i++) {
      if (!racing(i)) expect(seq[i], `starts ${seq.join(' ')}`).not.toBe(seq[i - 1]);
    }
    for (const name of names) {
      const at = seq.flatMap((t, i) => (t === name ? [i] : []));
      expect(at[0], `first start of ${name} in ${seq.join(' ')}`).toBeLessThanOrEqual(2);
      for (let k = 1; k < at.length; k++) expect(at[k] - at[k - 1] - 1, `starts ${seq.join(' ')}`).toBeLessThanOrEqual(3);
    }
  });

  it('keeps its batch past the slice while no other tenant waits', async () => {
    await cancelAllOpen();
    const t = tenant('alone');
    const { batch } = await createBatch(db.sql, newBatch(30, { tenant: t }));
    const runner = new Runner(pool(2), { beatMs: 50, staleMs: 5_000, parallel: 1, sliceMs: 60 });
    await runner.takeOver(() => ({ work: async () => (await sleep(10), 'ok') }));
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');
    await runner.close();
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ runs: 1 });
  });
});

describe('the choice statement', () => {
  /**
   * The plan of a takeover (EXPLAIN: nothing is taken) and its estimated total cost. With
   * `indexOnly`, sequential scans are priced out, as the planner itself does once tables grow.
   */
  async function plan(indexOnly: boolean): Promise<{ text: string; cost: number }> {
    const args = {
      run: '00000000-0000-4000-8000-000000000001',
      process: '00000000-0000-4000-8000-000000000002',
      staleMs: 30_000,
      maxRunning: q.NO_LIMIT,
    };
    return db.sql.begin(async (tx) => {
      const t = tx as unknown as typeof db.sql;
      if (indexOnly) await t`set local enable_seqscan = off`;
      const rows = await t<{ 'QUERY PLAN': string }[]>`explain ${q.takeOverStatement(t, args)}`;
      const text = rows.map((r) => r['QUERY PLAN']).join('\n');
      return { text, cost: Number(/cost=[\d.]+\.\.([\d.]+)/.exec(text)![1]) };
    });
  }

  it('reads indexes only and costs no more than twice as much at 10,000 open batches of 1,000 tenants as at 10', async () => {
    await cancelAllOpen();
    const prefix = tenant('plan');
    const open = async (tenants: number, perTenant: number) => {
      await db.sql`insert into leasehold_batches (tenant, datasource, job, params, request_key, total, priority)
        select ${prefix} || '-' || (g / ${perTenant}), 'ds', 'test', '{}'::jsonb, ${prefix} || '-' || g, 1, g % 10
        from generate_series(0, ${tenants * perTenant - 1}) g`;
      await db.sql`analyze leasehold_batches`;
      await db.sql`analyze leasehold_tenants`;
    };
    await open(10, 1);
    const small = await plan(true);
    await cancelAllOpen();
    await db.sql`delete from leasehold_batches where tenant like ${prefix + '-%'}`;
    await open(1_000, 10);
    const large = await plan(false);
    expect(await db.sql`select 1 from leasehold_batches where status = 'open'`).toHaveLength(10_000);
    for (const p of [small, large]) {
      expect(p.text).not.toMatch(/Seq Scan on leasehold_(batches|tenants)/);
      // An index scan or a bitmap index scan (the planner picks either, by the table's stats).
      expect(p.text).toMatch(/Index Scan (using|on) leasehold_tenants_wanting/);
      expect(p.text).toMatch(/leasehold_batches_wanting/);
    }
    expect(large.cost, `plans:\n${small.text}\n---\n${large.text}`).toBeLessThanOrEqual(2 * small.cost);
    await cancelAllOpen();
  });
});
