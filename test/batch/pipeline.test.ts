// The pipelined run: claims ahead into a local queue, one flusher, retries started when due.
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, Runner, createBatch, getBatch, type ItemWork, type RunnerEvent } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { installAudit, replacements, itemChanges, itemCounts, itemRows, newBatch, runOf } from './helpers.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor, type Deferred } from '../support/waits.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

describe('a pipelined run', () => {
  it('claims a retry that falls due while a long item runs ahead of its due time, and starts it when due', async () => {
    for (const backoffMs of [150, 300, 600]) {
      const started: Record<string, number[]> = { long: [], flaky: [] };
      let longEnded = 0;
      const work: ItemWork = async ({ key, attempt }) => {
        started[key].push(Date.now());
        if (key === 'long') {
          await sleep(backoffMs + 1_500);
          longEnded = Date.now();
          return 'long';
        }
        if (attempt === 1) throw new Error('first try fails');
        return 'flaky';
      };
      // Two slots: the long item holds one the whole time, so the retry never waits for a slot.
      // An interval of twice backoffMs and random 0.5: the retry is due backoffMs later.
      const runner = new Runner(db.sql, { parallel: 2, attempts: 3, backoffMs: 2 * backoffMs, random: () => 0.5 });
      const { batch } = await runner.start(newBatch(2, { items: [{ key: 'long' }, { key: 'flaky' }] }), {}, work);
      expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');

      const retry = (await itemChanges(db.sql, batch.id)).find(
        (c) => c.key === 'flaky' && c.state === 'pending' && c.old_state === 'running',
      );
      expect(retry).toBeDefined();
      expect(started.flaky).toHaveLength(2);
      // Claimed ahead of its due time (database clock), so a local timer, not a claim's round
      // trip, starts it when due…
      const claim = (await itemChanges(db.sql, batch.id)).find(
        (c) => c.key === 'flaky' && c.state === 'running' && c.old_state === 'pending' && c.seq > retry!.seq,
      );
      expect(claim).toBeDefined();
      expect(claim!.updated_at.getTime()).toBeLessThan(retry!.run_after.getTime());
      // …once due (same machine), and long before the run's next wake-up without it (its beat,
      // 5 s): how late a timer fires is up to the machine's load (50 ms here at a CI's load).
      const lateMs = started.flaky[1] - retry!.run_after.getTime();
      expect(lateMs).toBeGreaterThanOrEqual(-5);
      expect(lateMs).toBeLessThan(1_000);
      // …while the long item was still running.
      expect(started.flaky[1]).toBeLessThan(longEnded);
    }
  });

  it('gives claimed but never started items back to pending on handoff, their attempts unchanged', async () => {
    for (let round = 0; round < 3; round++) {
      const events: RunnerEvent[] = [];
      const executing: string[] = [];
      const work: ItemWork = async ({ key, signal }) => {
        executing.push(key);
        await new Promise((_, reject) =>
          signal.addEventListener('abort', () => reject(new Error('interrupted')), { once: true }),
        );
      };
      const { batch } = await createBatch(db.sql, newBatch(12));
      // Items with earlier attempts: the attempt a handoff gives back is the one its claim took.
      await db.sql`update leasehold_items set attempts = 2 where batch_id = ${batch.id} and key in ('k001', 'k003', 'k005')`;
      const parallel = 2 + round;
      const runner = new Runner(db.sql, { parallel, attempts: 5, beatMs: 50, staleMs: 60_000, onEvent: (e) => events.push(e) });
      await runner.takeOver(() => ({ work }), batch.id);
      // Its slots full and as many items again claimed ahead.
      await waitFor(
        'queue full',
        async () => executing.length === parallel && (await itemCounts(db.sql, batch.id)).running === 2 * parallel,
      );
      const held = (await itemRows(db.sql, batch.id)).filter((i) => i.state === 'running');
      const queued = held.filter((i) => !executing.includes(i.key));
      expect(queued).toHaveLength(parallel);

      const result = await runner.stop(batch.id);
      expect(result).toMatchObject({ outcome: 'handed-off', finishedItems: 0 });
      const rows = await itemRows(db.sql, batch.id);
      for (const q of queued) {
        const before = q.attempts - 1;
        expect(rows.find((r) => r.key === q.key)).toMatchObject({ state: 'pending', attempts: before, error: null });
      }
      // The started ones used their attempt (interrupted), and every item is pending again.
      for (const key of executing) {
        const r = rows.find((x) => x.key === key)!;
        expect(r).toMatchObject({ state: 'pending', error: 'interrupted' });
        expect(r.attempts).toBe(['k001', 'k003', 'k005'].includes(key) ? 3 : 1);
      }
      expect(await itemCounts(db.sql, batch.id)).toEqual({ pending: 12, running: 0, done: 0, failed: 0 });
      const given = events.flatMap((e) => (e.type === 'item-ended' && e.outcome === 'given-back' ? [e.key] : []));
      expect(given.sort()).toEqual(queued.map((q) => q.key).sort());
      // A graceful handoff is no stalled run.
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ stalledRuns: 0, ownerProcess: null });
      await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
    }
  });

  it('gives a retry claimed shortly before it is due back on handoff with its attempts and due time unchanged', async () => {
    const started: string[] = [];
    const work: ItemWork = async ({ key, attempt, signal }) => {
      started.push(`${key}/${attempt}`);
      if (key === 'flaky') throw new Error('fails');
      await new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('interrupted')), { once: true }));
    };
    const runner = new Runner(db.sql, {
      parallel: 2,
      attempts: 3,
      // Due 1 s after its failure (half the interval of 2 s).
      backoffMs: 2_000,
      random: () => 0.5,
      beatMs: 50,
      staleMs: 60_000,
    });
    const { batch } = await runner.start(newBatch(2, { items: [{ key: 'flaky' }, { key: 'long' }] }), {}, work);
    // flaky failed once, is due 1 s later, and is claimed (running, attempt 2) before that.
    await waitFor('retry claimed ahead', async () => {
      const flaky = (await itemRows(db.sql, batch.id)).find((r) => r.key === 'flaky')!;
      return flaky.state === 'running' && flaky.attempts === 2;
    });
    const retry = (await itemChanges(db.sql, batch.id)).find((c) => c.key === 'flaky' && c.state === 'pending')!;
    expect(Date.now()).toBeLessThan(retry.run_after.getTime());
    expect(started).not.toContain('flaky/2');
    expect((await runner.stop(batch.id))?.outcome).toBe('handed-off');
    const flaky = (await itemRows(db.sql, batch.id)).find((r) => r.key === 'flaky')!;
    expect(flaky).toMatchObject({ state: 'pending', attempts: 1, error: 'fails' });
    expect(started).not.toContain('flaky/2');
    const [{ run_after }] = await db.sql<{ run_after: Date }[]>`select run_after from leasehold_items
      where batch_id = ${batch.id} and key = 'flaky'`;
    expect(run_after.getTime()).toBe(retry.run_after.getTime());
    await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
  });

  it('never has two item statements of one run in flight at once', async () => {
    // Every item write records its transaction and the database's clock, after a short sleep per
    // row: statements that overlapped in time would show as overlapping intervals.
    await db.sql.unsafe(`
      create table flight_log (txid bigint, run_id uuid, at timestamptz);
      create function flight_log() returns trigger language plpgsql as $$
      begin
        perform pg_sleep(0.0002);
        insert into flight_log values (txid_current(), new.run_id, clock_timestamp());
        return null;
      end $$;
      create trigger flight_log after update on leasehold_items for each row execute function flight_log();
    `);
    try {
      for (let round = 0; round < 4; round++) {
        const runner = new Runner(db.connect({ max: 8 }), { parallel: 8, backoffMs: 1, attempts: 3 });
        const { batch } = await runner.start(newBatch(240), {}, async ({ key, attempt }) => {
          await sleep(Math.random() * 3);
          if (attempt === 1 && key.endsWith('7')) throw new Error('again');
          return key;
        });
        const result = await runOf(runner, batch.id);
        expect(result.outcome).toBe('succeeded');
        const spans = await db.sql<{ txid: string; first: Date; last: Date }[]>`select txid, min(at) as first, max(at) as last
          from flight_log where run_id = ${result.runId} group by txid order by min(at)`;
        expect(spans.length).toBeGreaterThan(10);
        for (let i = 1; i < spans.length; i++) expect(spans[i].first.getTime()).toBeGreaterThan(spans[i - 1].last.getTime());
        // Each statement carried several moves: the flusher batches what settled meanwhile.
        const [{ statements }] = await db.sql<{ statements: number }[]>`select count(distinct txid)::int as statements
          from flight_log where run_id = ${result.runId}`;
        expect(statements).toBeLessThan(240);
      }
    } finally {
      await db.sql.unsafe(`drop trigger flight_log on leasehold_items; drop function flight_log(); drop table flight_log;`);
    }
  });

  it('starts nothing more after a lost move, and its queued items are neither moved by it nor lost', async () => {
    for (let round = 0; round < 3; round++) {
      const gates = new Map<string, Deferred<void>>();
      const signals = new Map<string, AbortSignal>();
      const startedA: string[] = [];
      // A: the first three items it starts (claims of equal due time come in no set order) wait
      // for the test, ignoring their signal; any other takes 150 ms. The third waits too, so that
      // however long the move that learns of the loss takes (a loaded machine: over 150 ms), no
      // slot frees before A knows of it: a third item that ended first would rightly let its
      // slot start the fourth (seen once in CI).
      const workA: ItemWork = async ({ key, signal }) => {
        startedA.push(key);
        signals.set(key, signal);
        if (startedA.length <= 3) gates.set(key, deferred());
        const gate = gates.get(key);
        await (gate ? gate.promise : sleep(150));
        return 'A';
      };
      const byB: string[] = [];
      const workB: ItemWork = async ({ key }) => {
        byB.push(key);
        return 'B';
      };
      // A never beats (its clock never moves): its batch turns stale while its items wait.
      const a = new Runner(db.connect({ max: 3 }), {
        clock: new ManualClock(),
        parallel: 2,
        beatMs: 50,
        staleMs: 200,
        backoffMs: 0,
      });
      const { batch } = await createBatch(db.sql, newBatch(8));
      await a.takeOver(() => ({ work: workA }), batch.id);
      const runA = runOf(a, batch.id);
      // Two in flight, two claimed ahead.
      await waitFor('A full', async () => startedA.length === 2 && (await itemCounts(db.sql, batch.id)).running === 4);

      const b = new Runner(db.connect({ max: 3 }), { beatMs: 50, staleMs: 200 });
      await waitFor('takeover by B', () => b.takeOver(() => ({ work: workB }), batch.id), { everyMs: 20 });
      const runB = runOf(b, batch.id);
      const takeovers = await replacements(db.sql, batch.id);
      expect(takeovers).toHaveLength(1);
      const [takeover] = takeovers;
      expect((await runB).outcome).toBe('succeeded');

      // A's first item returns; the move carrying it finds the batch lost and A tells its items
      // to stop. What A started until then it could not know better; after that, nothing.
      const [first, second] = startedA;
      gates.get(first)!.resolve();
      await waitFor('A learns of the loss', () => signals.get(second)!.aborted);
      const startedBeforeLoss = [...startedA];
      // The first item's slot started the next queued item before that move came back; the last queued
      // one was still waiting when A learned of the loss.
      expect(startedBeforeLoss).toHaveLength(3);
      gates.get(second)!.resolve();
      gates.get(startedBeforeLoss[2])!.resolve();
      const resultA = await runA;
      expect(resultA.outcome).toBe('lost');
      // Both of A's slots freed after the loss (the second and the third item now): neither
      // started the queued item.
      await sleep(200);
      expect(startedA).toEqual(startedBeforeLoss);

      // A wrote nothing after the takeover; every item, A's queued ones included, ended done by B.
      expect((await itemChanges(db.sql, batch.id)).filter((c) => c.seq > takeover.seq && c.run_id === resultA.runId)).toEqual([]);
      const rows = await itemRows(db.sql, batch.id);
      expect(rows.every((r) => r.state === 'done' && r.output === 'B')).toBe(true);
      expect([...byB].sort()).toEqual(rows.map((r) => r.key));
      await b.close();
    }
  });
});
