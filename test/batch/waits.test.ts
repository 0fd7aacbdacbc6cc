// Waiting items (docs/design.md, "Waiting items: callbacks and sleeps"), on a real PostgreSQL: an
// item that waits for a callback parks with no run, the batch holds no run while only waiting
// items remain, a completion wakes it and its next run reads the answer; timeouts fail the attempt
// by the job's policy; sleeps wake by time; and the races each have one answer: a completion
// racing the timeout, the same completion twice, a completion for a cancelled batch, one that
// comes before the item parked, one during a takeover, a forged or replayed token.
import { describe, expect, it } from 'vitest';
import {
  BatchFinishedError,
  CallbackCompletedError,
  CallbackNotFoundError,
  CallbackTimeoutError,
  InvalidCallbackTokenError,
  Runner,
  cancelBatch,
  completeCallback,
  expireWaits,
  getBatch,
  itemsPage,
  type Executor,
  type ItemContext,
} from '../../src/batch/index.js';
import type { Clock } from '../../src/clock.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never, sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { itemCounts, itemRows, newBatch as baseBatch, runOf } from './helpers.js';

/** A batch of `n` items on a datasource of its own (batches here stay open, parked). */
const newBatch = (n: number) => baseBatch(n, { datasource: `waits-${Math.random().toString(36).slice(2)}` });

const db = useTestDatabase();

const options = { beatMs: 100, staleMs: 2_000, backoffMs: 0 };

/** A work that waits for a callback on its first run and answers what the callback said. */
function approvalGate(tokens: Map<string, string>, wait: Partial<Parameters<ItemContext['waitForCallback']>[0]> = {}): Executor {
  return {
    work: async (item) => {
      if (item.callback?.status === 'succeeded') return { approved: item.callback.result, attempt: item.attempt };
      if (item.callback?.status === 'failed') throw new Error(`refused: ${item.callback.error}`);
      const { token } = await item.waitForCallback({ timeoutMs: 60_000, ...wait });
      tokens.set(item.key, token);
    },
  };
}

async function batchRow(id: string) {
  const [r] = await db.sql<{ target: number; live_runs: number; status: string }[]>`
    select target, live_runs, status from leasehold_batches where id = ${id}`;
  return r;
}

describe('callbacks', () => {
  it('an item that waits parks with no run; a completion wakes it and its next run reads the answer', async () => {
    const tokens = new Map<string, string>();
    const executor = approvalGate(tokens);
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(3), {}, executor);
    const ended = await runOf(runner, batch.id);
    // Only waiting items were left: the last run parked the batch.
    expect(ended.outcome).toBe('parked');
    expect(await itemCounts(db.sql, batch.id)).toMatchObject({ waiting: 3, pending: 0, running: 0 });
    expect(await batchRow(batch.id)).toEqual({ target: 0, live_runs: 0, status: 'open' });
    expect((await getBatch(db.sql, batch.id))?.counts.waiting).toBe(3);
    // Nothing takes a parked batch over: no run, no invocation while it waits.
    expect(await new Runner(db.sql, options).takeOver(() => executor, batch.id)).toBeUndefined();

    const answers = [];
    for (const [key, token] of tokens)
      answers.push(await completeCallback(db.sql, token, { action: 'succeed', result: { by: key } }));
    expect(answers.map((a) => a.outcome)).toEqual(['completed', 'completed', 'completed']);
    expect(answers.every((a) => a.woken)).toBe(true);
    expect(answers[0].unparked).toBe(true);
    expect((await batchRow(batch.id)).target).toBe(1);

    const second = new Runner(db.sql, options);
    expect(await second.takeOver(() => executor, batch.id)).toBeDefined();
    expect((await runOf(second, batch.id)).outcome).toBe('succeeded');
    const rows = await itemRows(db.sql, batch.id);
    // The run after the wait is the same attempt going on: 1 attempt used.
    expect(rows.map((r) => [r.key, r.state, r.attempts, r.output])).toEqual(
      [...tokens.keys()].sort().map((k) => [k, 'done', 1, { approved: { by: k }, attempt: 1 }]),
    );
  });

  it('the same completion twice answers repeated; another answer gets callback_completed; the first stands', async () => {
    const tokens = new Map<string, string>();
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(1), {}, approvalGate(tokens));
    await runOf(runner, batch.id);
    const token = tokens.get('k000')!;
    expect((await completeCallback(db.sql, token, { action: 'succeed', result: { a: 1, b: 2 } })).outcome).toBe('completed');
    // The same JSON, keys in another order: the same answer.
    expect((await completeCallback(db.sql, token, { action: 'succeed', result: { b: 2, a: 1 } })).outcome).toBe('repeated');
    await expect(completeCallback(db.sql, token, { action: 'succeed', result: { a: 2 } })).rejects.toBeInstanceOf(
      CallbackCompletedError,
    );
    await expect(completeCallback(db.sql, token, { action: 'fail', error: 'no' })).rejects.toBeInstanceOf(CallbackCompletedError);
    const [r] = await db.sql<{ woke: { status: string; result: unknown } }[]>`
      select woke from leasehold_items where batch_id = ${batch.id}`;
    expect(r.woke).toMatchObject({ status: 'succeeded', result: { a: 1, b: 2 } });
  });

  it('a forged or altered token is refused before anything is read; a token of an earlier wait matches nothing', async () => {
    const tokens = new Map<string, string>();
    const executor = approvalGate(tokens);
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(1), {}, executor);
    await runOf(runner, batch.id);
    const token = tokens.get('k000')!;
    const [payload, sig] = token.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as unknown[];
    const otherPayload = Buffer.from(JSON.stringify([claims[0], 'k001', claims[2], claims[3]])).toString('base64url');
    for (const forged of [`${otherPayload}.${sig}`, `${payload}.${sig.slice(0, -2)}AA`, 'x', `${payload}.${sig}.x`, '']) {
      await expect(completeCallback(db.sql, forged, { action: 'succeed', result: 1 })).rejects.toBeInstanceOf(
        InvalidCallbackTokenError,
      );
    }
    expect(await itemCounts(db.sql, batch.id)).toMatchObject({ waiting: 1 });
    // Failed by the callback: the work throws, the attempt fails and is retried; the retry
    // starts over and waits again with a new token.
    await completeCallback(db.sql, token, { action: 'fail', error: 'denied' });
    const second = new Runner(db.sql, { ...options, attempts: 3 });
    await second.takeOver(() => executor, batch.id);
    expect((await runOf(second, batch.id)).outcome).toBe('parked');
    expect(tokens.get('k000')).not.toBe(token);
    // The old token replayed: its wait is gone, replaced by the new one; nothing changes.
    await expect(completeCallback(db.sql, token, { action: 'succeed', result: 1 })).rejects.toBeInstanceOf(CallbackNotFoundError);
    const [row] = await itemRows(db.sql, batch.id);
    // Attempt 1 failed ("refused: denied"); attempt 2 waits, its attempt given back meanwhile.
    expect([row.state, row.attempts]).toEqual(['waiting', 1]);
  });

  it('a completion for a cancelled batch gets batch_finished and stores nothing', async () => {
    const tokens = new Map<string, string>();
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(1), {}, approvalGate(tokens));
    await runOf(runner, batch.id);
    await cancelBatch(db.sql, batch.id);
    await expect(completeCallback(db.sql, tokens.get('k000')!, { action: 'succeed', result: 1 })).rejects.toBeInstanceOf(
      BatchFinishedError,
    );
    const [w] = await db.sql<{ answer: unknown }[]>`select answer from leasehold_waits where batch_id = ${batch.id}`;
    expect(w.answer).toBeNull();
    expect(await itemCounts(db.sql, batch.id)).toMatchObject({ waiting: 1 });
  });

  it('a completion that comes before the item parked wakes it once its move lands', async () => {
    const seen: unknown[] = [];
    const executor: Executor = {
      work: async (item) => {
        if (item.callback) return seen.push(item.callback);
        const { token } = await item.waitForCallback({ timeoutMs: 60_000 });
        // The outside world answers at once, while this attempt still runs.
        const a = await completeCallback(db.sql, token, { action: 'succeed', result: 'fast' });
        expect([a.outcome, a.woken]).toEqual(['completed', false]);
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(5), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');
    expect(seen).toEqual(Array(5).fill({ status: 'succeeded', result: 'fast' }));
    expect((await itemRows(db.sql, batch.id)).map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1]);
  });

  it('a completion while another run of the batch is taken over wakes its item, and the takeover runs it', async () => {
    const tokens = new Map<string, string>();
    const gate = approvalGate(tokens);
    // k000 waits; k001 hangs in a run whose process dies (it stops beating).
    const hanging: Executor = { work: (item) => (item.key === 'k001' ? never() : gate.work(item)) };
    // Beats once a minute, so its beat, set an hour back below, stays old until the takeover: at
    // a 3 s beat one could land between the two under load and the takeover find nothing stale
    // (seen once in CI).
    // Its own pool: the process dies by losing it below.
    const firstSql = db.connect({ max: 2 });
    const first = new Runner(firstSql, { ...options, beatMs: 60_000, staleMs: 120_000 });
    const { batch } = await first.start(newBatch(2), {}, hanging);
    await waitFor('k000 waiting', async () => (await itemCounts(db.sql, batch.id)).waiting === 1);
    // The process dies: it writes nothing more (its connections are gone) and its beats stop (its
    // run is left stale, k001 running). Its beat alone set back, a run still alive claimed k000
    // once the completion woke it (its own view of its lease was good), lost it to the takeover
    // with that attempt counted, and the attempt after no longer read the answer (seen in CI).
    await firstSql.end({ timeout: 0 });
    await db.sql`update leasehold_runs set beat_at = now() - interval '1 hour' where batch_id = ${batch.id}`;
    const second = new Runner(db.sql, { ...options, staleMs: 400 });
    const [answer, taken] = await Promise.all([
      completeCallback(db.sql, tokens.get('k000')!, { action: 'succeed', result: 'ok' }),
      second.takeOver(() => gate, batch.id),
    ]);
    expect(answer).toMatchObject({ outcome: 'completed', woken: true });
    expect(taken).toBeDefined();
    // k001's attempt counted (its run died); it waits in its second attempt now. k000 is done.
    // k000 ends first; k001's second attempt parks a moment later (waiting on k000 alone raced it).
    // When the wake commits after the takeover's run has claimed, that run may park before it sees
    // k000 due (seen in CI): as the API's completion route and the scheduler then do, a worker is
    // sent for the batch (a takeover; none while this runner still runs it).
    await waitFor('k000 done, k001 waiting', async () => {
      await second.takeOver(() => gate, batch.id);
      const [a, b] = await itemRows(db.sql, batch.id);
      return a.state === 'done' && b.state === 'waiting';
    });
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.map((r) => [r.key, r.state, r.attempts])).toEqual([
      ['k000', 'done', 1],
      ['k001', 'waiting', 1],
    ]);
    await second.close();
    // Its run hands nothing off (its connections are gone): it ends.
    await first.close();
  });
});

describe('an answered wait and a crash', () => {
  it('an attempt going on after its callback that dies with its run hands the answer to the next attempt', async () => {
    const tokens = new Map<string, string>();
    let resumed = 0;
    // k000 waits; once answered, the attempt going on with the answer hangs in a process that dies.
    const dying: Executor = {
      work: async (item) => {
        if (item.callback) {
          resumed++;
          return never();
        }
        const { token } = await item.waitForCallback({ timeoutMs: 60_000 });
        tokens.set(item.key, token);
      },
    };
    const firstSql = db.connect({ max: 2 });
    const first = new Runner(firstSql, { ...options, beatMs: 60_000, staleMs: 120_000 });
    const { batch } = await first.start(newBatch(1), {}, dying);
    expect((await runOf(first, batch.id)).outcome).toBe('parked');
    expect(await completeCallback(db.sql, tokens.get('k000')!, { action: 'succeed', result: 'approved' })).toMatchObject({
      outcome: 'completed',
      woken: true,
    });
    await first.takeOver(() => dying, batch.id);
    await waitFor('the answer read', () => resumed === 1);
    // The process dies: it writes nothing more, and its beats stop.
    await firstSql.end({ timeout: 0 });
    await db.sql`update leasehold_runs set beat_at = now() - interval '1 hour' where batch_id = ${batch.id}`;

    const seen: { attempt: number; callback: unknown }[] = [];
    const second = new Runner(db.sql, { ...options, staleMs: 400 });
    await waitFor('the takeover', () =>
      second.takeOver(
        () => ({
          work: async (item) => {
            seen.push({ attempt: item.attempt, callback: item.callback });
            return 'ran';
          },
        }),
        batch.id,
      ),
    );
    expect((await runOf(second, batch.id)).outcome).toBe('succeeded');
    // The attempt that died counted; the next one read the answer rather than wait again.
    expect(seen).toEqual([{ attempt: 2, callback: { status: 'succeeded', result: 'approved' } }]);
    const [row] = await itemRows(db.sql, batch.id);
    expect([row.state, row.attempts]).toEqual(['done', 2]);
    await second.close();
    await first.close();
  });
});

describe('timeouts', () => {
  it('a callback not completed within timeoutMs fails its attempt, retried by policy, then failed', async () => {
    const tokens = new Map<string, string>();
    const executor = { ...approvalGate(tokens, { timeoutMs: 50 }), attempts: 2 };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(1), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    const first = tokens.get('k000')!;
    await sleep(80);
    expect((await expireWaits(db.sql, 100)).woken).toBe(1);
    // Too late: the timeout came first.
    await expect(completeCallback(db.sql, first, { action: 'succeed', result: 1 })).rejects.toBeInstanceOf(CallbackTimeoutError);
    // The next run fails attempt 1 without running it, retries it (attempt 2 waits again).
    const second = new Runner(db.sql, options);
    await second.takeOver(() => executor, batch.id);
    expect((await runOf(second, batch.id)).outcome).toBe('parked');
    let [row] = await itemRows(db.sql, batch.id);
    expect([row.state, row.attempts]).toEqual(['waiting', 1]);
    await sleep(80);
    await expireWaits(db.sql, 100);
    const third = new Runner(db.sql, options);
    await third.takeOver(() => executor, batch.id);
    expect((await runOf(third, batch.id)).outcome).toBe('failed');
    [row] = await itemRows(db.sql, batch.id);
    expect([row.state, row.attempts]).toEqual(['failed', 2]);
    expect(row.error).toMatch(/not completed within its timeoutMs/);
  });

  it('a callback not heartbeated within heartbeatTimeoutMs times out; heartbeats keep it', async () => {
    const tokens = new Map<string, string>();
    // 2 s: the run's park and each heartbeat's round trip under CI load stay far below it (at
    // 300 ms, k000's first heartbeat, sent once the run had parked, once came too late).
    const executor = { ...approvalGate(tokens, { timeoutMs: 60_000, heartbeatTimeoutMs: 2_000 }), attempts: 1 };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(2), {}, executor);
    await runOf(runner, batch.id);
    // k000 is heartbeated every 100 ms until k001, never heartbeated, has timed out; k000 not.
    for (let i = 0; ; i++) {
      expect((await completeCallback(db.sql, tokens.get('k000')!, { action: 'heartbeat' })).outcome).toBe('heartbeat');
      await sleep(100);
      await expireWaits(db.sql, 100);
      const [k001] = await db.sql<
        { state: string }[]
      >`select state from leasehold_items where batch_id = ${batch.id} and key = 'k001'`;
      if (k001.state !== 'waiting') break;
      if (i === 300) throw new Error('k001 did not time out in 30 s of heartbeats of k000');
    }
    const woke = await db.sql<{ key: string; state: string; woke: { status: string; reason: string } | null }[]>`
      select key, state, woke from leasehold_items where batch_id = ${batch.id} order by key`;
    expect(woke.map((w) => [w.key, w.state, w.woke?.status, w.woke?.reason])).toEqual([
      ['k000', 'waiting', undefined, undefined],
      ['k001', 'pending', 'timedOut', 'heartbeat'],
    ]);
  });

  it('a callback withdrawn before the work returns: the item does not park, and its token finds nothing', async () => {
    const tokens = new Map<string, string>();
    const executor: Executor = {
      work: async (item) => {
        const handle = await item.waitForCallback({ timeoutMs: 60_000 });
        tokens.set(item.key, handle.token);
        if (item.key === 'k000') return 'kept waiting';
        await handle.cancel();
        return 'answered at once';
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(2), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.map((r) => [r.key, r.state, r.output])).toEqual([
      ['k000', 'waiting', null],
      ['k001', 'done', 'answered at once'],
    ]);
    await expect(completeCallback(db.sql, tokens.get('k001')!, { action: 'succeed', result: 1 })).rejects.toBeInstanceOf(
      CallbackNotFoundError,
    );
  });

  it('one expiry statement wakes a waiting item, defers a wait whose attempt still runs, drops a stale one', async () => {
    const tokens = new Map<string, string>();
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(3), {}, approvalGate(tokens));
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    // k001's attempt still runs (its move to waiting not landed); k002 ended without waiting, its
    // wait answered meanwhile; all three due.
    await db.sql`update leasehold_items set state = 'running', attempts = attempts + 1 where batch_id = ${batch.id} and key = 'k001'`;
    await db.sql`update leasehold_items set state = 'done' where batch_id = ${batch.id} and key = 'k002'`;
    await db.sql`update leasehold_waits set answer = '{"status":"succeeded","result":7}' where batch_id = ${batch.id} and key = 'k002'`;
    await db.sql`update leasehold_waits set wake_at = now() - interval '1 second' where batch_id = ${batch.id}`;
    // (The pass is across batches: earlier tests' waits may be due too.)
    const r = await expireWaits(db.sql, 100);
    expect(r.woken).toBeGreaterThanOrEqual(1);
    expect(r.deferred).toBeGreaterThanOrEqual(1);
    expect(r.dropped).toBeGreaterThanOrEqual(1);
    expect(r.unparked).toContain(batch.id);
    const waits = await db.sql<{ key: string; later: boolean }[]>`
      select key, wake_at > now() + interval '30 seconds' as later from leasehold_waits where batch_id = ${batch.id} order by key`;
    expect(waits).toEqual([{ key: 'k001', later: true }]);
    const rows = await itemRows(db.sql, batch.id);
    expect(rows.map((x) => x.state)).toEqual(['pending', 'running', 'done']);
    const [k002] = await db.sql<{ woke: { status: string; result: number } }[]>`
      select woke from leasehold_items where batch_id = ${batch.id} and key = 'k002'`;
    expect([k002.woke.status, k002.woke.result]).toEqual(['succeeded', 7]);
  });

  it('the expiry pass wakes what is due a page at a time, soonest first', async () => {
    const tokens = new Map<string, string>();
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(5), {}, approvalGate(tokens));
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    // Due in key order, k004 not yet; a day ago, so before any other test's wait (the pass is across batches).
    await db.sql`update leasehold_waits set wake_at = now() - interval '1 day' + (substr(key, 2)::int * interval '1 second')
      where batch_id = ${batch.id} and key <> 'k004'`;
    const woken: string[][] = [];
    for (let i = 0; i < 3; i++) {
      const before = new Set((await itemRows(db.sql, batch.id)).filter((x) => x.state === 'pending').map((x) => x.key));
      await expireWaits(db.sql, 2);
      woken.push((await itemRows(db.sql, batch.id)).filter((x) => x.state === 'pending' && !before.has(x.key)).map((x) => x.key));
    }
    expect(woken).toEqual([['k000', 'k001'], ['k002', 'k003'], []]);
    expect((await itemRows(db.sql, batch.id)).find((x) => x.key === 'k004')?.state).toBe('waiting');
  });

  it('a page of waiting items shows each wait with its deadlines; other items show none', async () => {
    const executor: Executor = {
      work: async (item) => {
        if (item.callback || item.slept) return null;
        if (item.key === 'k000') await item.waitForCallback({ timeoutMs: 3_600_000, heartbeatTimeoutMs: 60_000 });
        else if (item.key === 'k001') await item.waitForCallback({ timeoutMs: 7_200_000 });
        else if (item.key === 'k002') await item.sleep(600_000);
        return null;
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(4), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    const [{ now }] = await db.sql<{ now: Date }[]>`select now()`;
    const inMs = (d: Date | null | undefined) => (d ? Math.round((d.getTime() - now.getTime()) / 60_000) * 60_000 : d);
    const { items } = await itemsPage(db.sql, batch.id, { state: 'waiting' });
    expect(
      items.map((i) => [i.key, i.wait?.kind, inMs(i.wait?.wakeAt), inMs(i.wait?.timeoutAt), inMs(i.wait?.heartbeatBy)]),
    ).toEqual([
      ['k000', 'callback', 60_000, 3_600_000, 60_000],
      ['k001', 'callback', 7_200_000, 7_200_000, null],
      ['k002', 'sleep', 600_000, null, null],
    ]);
    // A page of every state: the done item shows no wait.
    const all = await itemsPage(db.sql, batch.id, {});
    expect(all.items.map((i) => [i.key, i.state, i.wait?.kind ?? null])).toEqual([
      ['k000', 'waiting', 'callback'],
      ['k001', 'waiting', 'callback'],
      ['k002', 'waiting', 'sleep'],
      ['k003', 'done', null],
    ]);
  });

  it('a completion racing the timeout: exactly one wins, and the loser is told which', async () => {
    const tokens = new Map<string, string>();
    const n = 40;
    const runner = new Runner(db.sql, { ...options, parallel: n });
    const { batch } = await runner.start(newBatch(n), {}, approvalGate(tokens, { timeoutMs: 100 }));
    await runOf(runner, batch.id);
    await sleep(90);
    // Completions and two expiry passes at once, the completions spread around the timeout.
    const results = await Promise.all([
      ...[...tokens].map(async ([key, token], i) => {
        await sleep(i % 20);
        return completeCallback(db.sql, token, { action: 'succeed', result: key }).then(
          () => [key, 'completed'] as const,
          (e: unknown) => [key, e instanceof CallbackTimeoutError ? 'timedOut' : String(e)] as const,
        );
      }),
      (async () => {
        for (let i = 0; i < 10; i++)
          await Promise.all([expireWaits(db.sql, 1000), expireWaits(db.sql, 1000)]).then(() => sleep(3));
        return ['expiry', 'done'] as const;
      })(),
    ]);
    await expireWaits(db.sql, 1000);
    const rows = await db.sql<{ key: string; state: string; woke: { status: string } }[]>`
      select key, state, woke from leasehold_items where batch_id = ${batch.id} order by key`;
    const said = new Map(results.filter(([k]) => k !== 'expiry'));
    for (const r of rows) {
      expect(r.state).toBe('pending');
      expect(said.get(r.key)).toBe(r.woke.status === 'succeeded' ? 'completed' : 'timedOut');
    }
    expect(await db.sql`select 1 from leasehold_waits where batch_id = ${batch.id}`).toHaveLength(0);
  });
});

describe('sleeps and the parked batch', () => {
  it('an item that sleeps parks and its next run has slept; the batch then finishes', async () => {
    const executor: Executor = {
      work: async (item) => {
        if (item.slept) return 'awake';
        // Both longer than a beat (100 ms): the run parks rather than wake them itself.
        await item.sleep(item.key === 'k000' ? 5_000 : 60_000);
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(2), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('parked');
    await db.sql`update leasehold_waits set wake_at = now() where batch_id = ${batch.id} and key = 'k000'`;
    // (The pass is across batches: earlier tests' waits may be due too.)
    expect((await expireWaits(db.sql, 100)).woken).toBeGreaterThanOrEqual(1);
    expect((await itemRows(db.sql, batch.id)).map((r) => r.state)).toEqual(['pending', 'waiting']);
    const second = new Runner(db.sql, options);
    await second.takeOver(() => executor, batch.id);
    // k001 sleeps on: the batch parks again rather than finishing.
    expect((await runOf(second, batch.id)).outcome).toBe('parked');
    await db.sql`update leasehold_waits set wake_at = now() where batch_id = ${batch.id}`;
    await expireWaits(db.sql, 100);
    const third = new Runner(db.sql, options);
    await third.takeOver(() => executor, batch.id);
    expect((await runOf(third, batch.id)).outcome).toBe('succeeded');
    expect((await itemRows(db.sql, batch.id)).map((r) => [r.output, r.attempts])).toEqual([
      ['awake', 1],
      ['awake', 1],
    ]);
  });

  it('a live run wakes its own sleep due within a beat and runs it, with no expiry pass', async () => {
    const slept: number[] = [];
    const executor: Executor = {
      work: async (item) => {
        if (item.slept) return slept.push(item.attempt);
        await item.sleep(300);
      },
    };
    // A beat of 2 s: the 300 ms sleep is due within it, so the run stays rather than park.
    const runner = new Runner(db.sql, { ...options, beatMs: 2_000, staleMs: 10_000 });
    const { batch } = await runner.start(newBatch(3), {}, executor);
    // No expiry pass runs in this test: the run woke its items itself and finished the batch.
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');
    expect(slept).toEqual([1, 1, 1]);
    expect((await itemRows(db.sql, batch.id)).map((r) => [r.state, r.attempts])).toEqual(Array(3).fill(['done', 1]));
    expect(await db.sql`select 1 from leasehold_waits where batch_id = ${batch.id}`).toHaveLength(0);
  });

  it('a run working other items wakes its sleeps when they come due, longer than a beat too', async () => {
    // k000 sleeps 300 ms (three beats); k001 runs until k000 has run again (at most 30 s).
    let awake!: () => void;
    const k000Awake = new Promise<void>((resolve) => (awake = resolve));
    const executor: Executor = {
      work: async (item) => {
        if (item.key === 'k001') {
          const saw = await Promise.race([k000Awake.then(() => 'saw k000 awake'), sleep(30_000).then(() => 'gave up')]);
          return saw;
        }
        if (item.slept) return awake();
        await item.sleep(300);
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(2), {}, executor);
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');
    expect((await itemRows(db.sql, batch.id)).map((r) => [r.key, r.state, r.output])).toEqual([
      ['k000', 'done', null],
      ['k001', 'done', 'saw k000 awake'],
    ]);
  });

  it('a run waking its own sleeps and expiry passes at once wake each sleep once', async () => {
    const n = 30;
    const woke = new Map<string, number>();
    const executor: Executor = {
      work: async (item) => {
        if (item.slept) {
          woke.set(item.key, (woke.get(item.key) ?? 0) + 1);
          return null;
        }
        await item.sleep(item.key.endsWith('0') ? 0 : 20 + (Number(item.key.slice(1)) % 7) * 10);
      },
      parallel: 8,
    };
    const runner = new Runner(db.sql, { ...options, beatMs: 2_000, staleMs: 10_000 });
    const { batch } = await runner.start(newBatch(n), {}, executor);
    const ended = runOf(runner, batch.id);
    let passes = 0;
    for (let done = false; !done; passes++) {
      await expireWaits(db.sql, 1000);
      done = await Promise.race([ended.then(() => true), sleep(1).then(() => false)]);
    }
    expect((await ended).outcome).toBe('succeeded');
    expect(passes).toBeGreaterThan(1);
    expect([...woke.values()]).toEqual(Array(n).fill(1));
    expect((await itemRows(db.sql, batch.id)).every((r) => r.state === 'done' && r.attempts === 1)).toBe(true);
  });

  it('a wake racing the park never leaves a due item in a batch with no run and no target', async () => {
    // Moves to waiting and the completion's commit each take 0-4 ms more, at random, so the
    // completion lands on every side of the move, the run's wake of answered items and the park.
    const undo = await slowDown(0.004, 0.004, true);
    try {
      await wakesRacingThePark();
    } finally {
      await undo();
    }
  });

  it('a completion landing as the live run is about to park: the run claims the woken item at once', async () => {
    // The completion sends no worker (the batch has a live run), so the run must claim the item
    // itself: the park, seeing it due, keeps the run, which then claims it now. Its clock is
    // frozen (its timers never fire): a run that waited for its next beat to claim never would.
    for (let round = 0; round < 40; round++) {
      let completion: Promise<{ unparked: boolean }> | undefined;
      let k000: string | undefined;
      const executor: Executor = {
        work: async (item) => {
          if (item.callback) return 'ok';
          const { token } = await item.waitForCallback({ timeoutMs: 60_000 });
          if (item.key === 'k000') return void (k000 = token);
          // k001 waits too, once k000 waits in the store: k000's completion then lands around
          // the run's wait state and park, 0-15 ms later.
          await waitFor('k000 waiting', async () => (await itemCounts(db.sql, item.batch.id)).waiting === 1);
          completion = sleep(round % 16).then(() => completeCallback(db.sql, k000!, { action: 'succeed', result: 1 }));
        },
        parallel: 1,
      };
      const runner = new Runner(db.sql, { ...options, clock: frozenClock });
      const { batch } = await runner.start(newBatch(2), {}, executor);
      // A guard against a hung round only (each takes milliseconds).
      const ended = await Promise.race([runOf(runner, batch.id).then((r) => r.outcome), sleep(20_000).then(() => 'hung')]);
      const answer = await completion!;
      const [k] = await itemRows(db.sql, batch.id);
      // Either the run saw k000 due and ran it, or it had parked and the completion unparked the
      // batch (the API's route then sends a worker).
      const seen = ended === 'parked' && (k.state === 'done' || (k.state === 'pending' && answer.unparked));
      expect(seen, `round ${round}: run ${ended}, k000 ${k.state}, unparked ${answer.unparked}`).toBe(true);
      if (ended === 'hung') await cancelBatch(db.sql, batch.id);
      await runner.close();
    }
  });

  it('an answer committed after the move and before the wake of answered items still wakes the item', async () => {
    // The interleaving forced: the move to waiting takes 300 ms, so the completion's wake reads
    // the item still running and wakes nothing; its commit then takes 600 ms, so the move lands,
    // and the run's wake of answered items runs, while the answer is stored but not committed.
    const undo = await slowDown(0.3, 0.6, false);
    try {
      let completion: Promise<unknown> = Promise.resolve();
      const executor: Executor = {
        work: async (item) => {
          if (item.callback) return 'ok';
          const { token } = await item.waitForCallback({ timeoutMs: 60_000 });
          completion = completeCallback(db.sql, token, { action: 'succeed', result: 1 });
        },
      };
      const runner = new Runner(db.sql, options);
      const { batch } = await runner.start(newBatch(1), {}, executor);
      const ended = await runOf(runner, batch.id);
      await completion;
      const [item] = await itemRows(db.sql, batch.id);
      const waits = await db.sql`select answer from leasehold_waits where batch_id = ${batch.id}`;
      const where = `item ${item.state}, wait ${JSON.stringify(waits)}, batch ${JSON.stringify(await batchRow(batch.id))}`;
      // The run woke the item (it waited for the completion in flight) and ran it again.
      expect([ended.outcome, item.state, item.output], where).toEqual(['succeeded', 'done', 'ok']);
      await runner.close();
    } finally {
      await undo();
    }
  });
});

/** A clock whose time stands still: its sleeps end only when aborted (no timer of a run fires). */
const frozenClock: Clock = {
  now: () => 1_000_000,
  sleep: (_ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      signal?.addEventListener('abort', () => resolve(), { once: true });
    }),
};

/** The rounds of the wake racing the park: a callback completed around the moment the run parks. */
async function wakesRacingThePark() {
  for (let round = 0; round < 15; round++) {
    let completion: Promise<unknown> = Promise.resolve();
    const executor: Executor = {
      work: async (item) => {
        if (item.callback) return 'ok';
        const { token } = await item.waitForCallback({ timeoutMs: 60_000 });
        // Completed from outside, around the moment the run parks the batch.
        completion = sleep(round % 5).then(() => completeCallback(db.sql, token, { action: 'succeed', result: 1 }));
      },
    };
    const runner = new Runner(db.sql, options);
    const { batch } = await runner.start(newBatch(1), {}, executor);
    await runOf(runner, batch.id);
    await completion;
    const [b] = await db.sql<{ status: string; target: number; live_runs: number; pending: number }[]>`
      select status, target, live_runs,
        (select count(*)::int from leasehold_items where batch_id = b.id and state in ('pending', 'waiting')) as pending
      from leasehold_batches b where id = ${batch.id}`;
    // Either the batch finished, or whatever is left to do is wanted by a target above 0. The
    // message says where the item and its wait row were when it did not.
    const [item] = await db.sql<{ state: string; attempts: number; woke: unknown }[]>`
      select state, attempts, woke from leasehold_items where batch_id = ${batch.id}`;
    const waits = await db.sql<{ attempt: number; answer: unknown; due: boolean }[]>`
      select attempt, answer, wake_at <= now() as due from leasehold_waits where batch_id = ${batch.id}`;
    const where = `round ${round}: batch ${JSON.stringify(b)}, item ${JSON.stringify(item)}, wait ${JSON.stringify(waits)}`;
    if (b.status === 'open') expect([b.pending > 0, b.target > 0], where).toEqual([true, true]);
    else expect(b.status).toBe('succeeded');
    await runner.close();
  }
}

/**
 * Slow down, in this file's schema, each move of an item from running to waiting by `moveS`
 * seconds and the commit of each answer stored by `commitS` seconds (`jitter`: a random part of
 * each): triggers, a deferred one for the commit, reading the delays from a table of their own.
 * Answers what drops them.
 */
async function slowDown(moveS: number, commitS: number, jitter: boolean): Promise<() => Promise<void>> {
  await db.sql.unsafe(`
    create table t_slow (move_s float8 not null, commit_s float8 not null, jitter boolean not null);
    create function t_slow_move() returns trigger language plpgsql as $$ begin
      perform pg_sleep((select move_s * case when jitter then random() else 1 end from t_slow)); return new; end $$;
    create function t_slow_answer() returns trigger language plpgsql as $$ begin
      perform pg_sleep((select commit_s * case when jitter then random() else 1 end from t_slow)); return null; end $$;
    create trigger t_slow_move before update on leasehold_items for each row
      when (old.state = 'running' and new.state = 'waiting') execute function t_slow_move();
    create constraint trigger t_slow_answer after update on leasehold_waits deferrable initially deferred
      for each row when (old.answer is null and new.answer is not null) execute function t_slow_answer();`);
  await db.sql`insert into t_slow values (${moveS}, ${commitS}, ${jitter})`;
  return async () => {
    await db.sql.unsafe(`drop trigger t_slow_move on leasehold_items; drop trigger t_slow_answer on leasehold_waits;
      drop function t_slow_move(); drop function t_slow_answer(); drop table t_slow;`);
  };
}
