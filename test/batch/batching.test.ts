// Item batching (docs/design.md, "Item batching"): an executor with `itemsPerCall` gets its items
// in calls of `workMany`, on the real PostgreSQL; attempts and results stay per item.
import { describe, expect, it } from 'vitest';
import {
  InvalidSettingError,
  PermanentItemError,
  RetryAfterError,
  type ItemCallResult,
  type ItemsCall,
  type ItemsWork,
} from '../../src/index.js';
import { Runner, getBatch, type Executor, type RunnerEvent } from '../../src/batch/index.js';
import { defineJob, JobRegistry } from '../../src/jobs/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { itemRows, newBatch, runOf } from './helpers.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();

/** The keys and attempts of every call, in the order the calls began. */
type Calls = { key: string; attempt: number }[][];

/** A `workMany` that records its calls and answers each item with `answer(item)` (default: its key and attempt). */
function recording(calls: Calls, answer?: (item: ItemsCall['items'][number]) => ItemCallResult): ItemsWork {
  return async (call) => {
    calls.push(call.items.map((i) => ({ key: i.key, attempt: i.attempt })));
    return call.items.map((i) => answer?.(i) ?? { key: i.key, output: { key: i.key, attempt: i.attempt } });
  };
}

/** An executor whose one-item `work` must never run: every item goes through `workMany`. */
function batched(workMany: ItemsWork, extra: Partial<Executor> = {}): Executor {
  return {
    work: async () => {
      throw new Error('one-item work ran in a batched executor');
    },
    workMany,
    itemsPerCall: 100,
    ...extra,
  };
}

const sizes = (calls: Calls) => calls.map((c) => c.length).sort((a, b) => a - b);

describe('item batching', () => {
  it('groups items into calls of up to itemsPerCall, each item once, with its output stored per item', async () => {
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 2, backoffMs: 10 });
    const { batch } = await runner.start(newBatch(250), {}, batched(recording(calls)));
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 250 });
    // 250 items, 2 calls at once: two full calls, then the 50 left in one call after its gather wait.
    expect(sizes(calls)).toEqual([50, 100, 100]);
    const keys = calls.flat().map((i) => i.key);
    expect(new Set(keys).size).toBe(250);
    const items = await itemRows(db.sql, batch.id);
    expect(items).toHaveLength(250);
    for (const i of items)
      expect(i).toMatchObject({ state: 'done', attempts: 1, output: { key: i.key, attempt: 1 }, error: null });
  });

  it('runs at most parallel calls at once', async () => {
    let running = 0;
    let most = 0;
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 3 });
    const work: ItemsWork = async (call) => {
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, 20));
      running--;
      return recording(calls)(call);
    };
    const { batch } = await runner.start(newBatch(200), {}, batched(work, { itemsPerCall: 10 }));
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    expect(most).toBe(3);
    expect(calls.every((c) => c.length <= 10)).toBe(true);
    expect(calls.flat()).toHaveLength(200);
  });

  it('keeps a call within bytesPerCall of { key, input } JSON, and sends an item larger than that alone', async () => {
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 1 });
    // Each `{"key":"k000","input":"xxx…"}` entry is 25 + 100 bytes; 400 bytes take 3 of them.
    const b = newBatch(10, {
      items: [
        ...Array.from({ length: 9 }, (_, i) => ({ key: `k00${i}`, input: 'x'.repeat(100) })),
        { key: 'big', input: 'y'.repeat(1_000) },
      ],
    });
    const { batch } = await runner.start(b, {}, batched(recording(calls), { itemsPerCall: 100, bytesPerCall: 400 }));
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    // Claim order among items due at once is the store's: the big item may split the small ones
    // anywhere, so calls are [3, 3, 3] around it, or one of them split in two.
    const bytes = (key: string) => JSON.stringify(b.items.find((i) => i.key === key)).length;
    for (const c of calls) if (c.length > 1) expect(c.reduce((n, i) => n + bytes(i.key), 0)).toBeLessThanOrEqual(400);
    expect(calls.filter((c) => c.some((i) => i.key === 'big'))).toEqual([[{ key: 'big', attempt: 1 }]]);
    expect(calls.filter((c) => c.length === 3).length).toBeGreaterThanOrEqual(2);
    expect(calls.length).toBeLessThanOrEqual(5);
    expect(calls.flat()).toHaveLength(10);
  });

  it('keeps attempts per item: a failed item of a call is retried alone, and the items that succeeded beside it are done once', async () => {
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 1, attempts: 3, backoffMs: 10 });
    const b = newBatch(20);
    const fails: Record<string, number> = { k003: 1, k011: 2, k017: Infinity };
    const { batch } = await runner.start(
      b,
      {},
      batched(
        recording(calls, (i) =>
          i.attempt <= (fails[i.key] ?? 0)
            ? { key: i.key, error: `${i.key} failed attempt ${i.attempt}` }
            : { key: i.key, output: i.attempt },
        ),
        { itemsPerCall: 20 },
      ),
    );
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed', finishedItems: 20 });

    // The first call holds every item (in claim order, which is not the keys' order).
    expect(calls[0]!.map((i) => i.key).sort()).toEqual(b.items.map((i) => i.key));
    // Later calls hold only items that failed before: the other 17 ran once.
    for (const c of calls.slice(1)) for (const i of c) expect(['k003', 'k011', 'k017']).toContain(i.key);
    const tally = new Map<string, number>();
    for (const i of calls.flat()) tally.set(i.key, (tally.get(i.key) ?? 0) + 1);
    expect(Object.fromEntries([...tally].filter(([, n]) => n > 1))).toEqual({ k003: 2, k011: 3, k017: 3 });

    const items = Object.fromEntries((await itemRows(db.sql, batch.id)).map((i) => [i.key, i]));
    expect(items.k003).toMatchObject({ state: 'done', attempts: 2, output: 2, error: null });
    expect(items.k011).toMatchObject({ state: 'done', attempts: 3, output: 3, error: null });
    expect(items.k017).toMatchObject({ state: 'failed', attempts: 3, output: null, error: 'k017 failed attempt 3' });
    expect(items.k000).toMatchObject({ state: 'done', attempts: 1, output: 1 });
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ counts: { pending: 0, running: 0, done: 19, failed: 1 } });
  });

  it("an item's error is its own: a permanent one fails it at once, a Retry-After one waits without an attempt", async () => {
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 1, attempts: 3, backoffMs: 10 });
    const { batch } = await runner.start(
      newBatch(3, { items: [{ key: 'gone' }, { key: 'later' }, { key: 'fine' }] }),
      {},
      batched(
        recording(calls, (i) => {
          if (i.key === 'gone') return { key: i.key, error: new PermanentItemError('gone for good') };
          if (i.key === 'later' && calls.length === 1) return { key: i.key, error: new RetryAfterError(50) };
          return { key: i.key, output: 'ok' };
        }),
      ),
    );
    await runOf(runner, batch.id);
    const items = Object.fromEntries((await itemRows(db.sql, batch.id)).map((i) => [i.key, i]));
    expect(items.gone).toMatchObject({ state: 'failed', attempts: 1, error: 'gone for good' });
    expect(items.later).toMatchObject({ state: 'done', attempts: 1, output: 'ok' });
    expect(items.fine).toMatchObject({ state: 'done', attempts: 1 });
    expect(calls.map((c) => c.map((i) => i.key).sort())).toEqual([['fine', 'gone', 'later'], ['later']]);
  });

  it('a whole-call failure is a failed attempt of every item in that call, and of no other item', async () => {
    const calls: Calls = [];
    const runner = new Runner(db.sql, { parallel: 1, attempts: 3, backoffMs: 10 });
    const b = newBatch(30);
    const record = recording(calls);
    const { batch } = await runner.start(
      b,
      {},
      batched(
        async (call) => {
          const answer = await record(call);
          // The second call throws: its 10 items fail this attempt; the other calls' items do not.
          if (calls.length === 2) throw new Error('the function crashed');
          return answer;
        },
        { itemsPerCall: 10 },
      ),
    );
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 30 });
    const crashed = new Set(calls[1]!.map((i) => i.key));
    expect(crashed.size).toBe(10);
    const items = await itemRows(db.sql, batch.id);
    for (const i of items) {
      expect(i, i.key).toMatchObject({ state: 'done', attempts: crashed.has(i.key) ? 2 : 1, output: { key: i.key } });
    }
    // Their second attempt came in a later call, each item with its own attempt number.
    const retried = calls
      .slice(2)
      .flat()
      .filter((i) => crashed.has(i.key));
    expect(retried.map((i) => i.attempt)).toEqual(Array(10).fill(2));
  });

  it('a whole-call failure that is permanent fails every item of the call at once, with its message', async () => {
    const runner = new Runner(db.sql, { parallel: 1, attempts: 3 });
    const { batch } = await runner.start(
      newBatch(5),
      {},
      batched(async () => {
        throw new PermanentItemError('the downstream refuses these');
      }),
    );
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed' });
    for (const i of await itemRows(db.sql, batch.id)) {
      expect(i).toMatchObject({ state: 'failed', attempts: 1, error: 'the downstream refuses these' });
    }
  });

  it('bad answers fail the items they get wrong, saying how, and keep the results they get right', async () => {
    const runner = new Runner(db.sql, { parallel: 1, attempts: 1 });
    const b = newBatch(4, { items: [{ key: 'ok' }, { key: 'missing' }, { key: 'twice' }, { key: 'err' }] });
    const { batch } = await runner.start(
      b,
      {},
      batched(async () => [
        { key: 'ok', output: 1 },
        { key: 'twice', output: 2 },
        { key: 'twice', output: 3 },
        { key: 'err', error: { code: 42 } },
        { key: 'stranger', output: 4 },
        { nokey: true } as unknown as ItemCallResult,
      ]),
    );
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed' });
    const items = Object.fromEntries((await itemRows(db.sql, batch.id)).map((i) => [i.key, i]));
    expect(items.ok).toMatchObject({ state: 'done', output: 1 });
    expect(items.twice).toMatchObject({ state: 'failed', error: 'the call of 4 items answered item "twice" more than once' });
    expect(items.missing).toMatchObject({
      state: 'failed',
      error:
        'the call of 4 items answered no result for item "missing"; its results held 1 not in the call ("stranger") and 1 without a string key',
    });
    expect(items.err).toMatchObject({ state: 'failed', error: '{"code":42}' });
  });

  it('results that match no item of a call are said as an event, also when every item got its own', async () => {
    const events: RunnerEvent[] = [];
    const runner = new Runner(db.sql, { parallel: 1, attempts: 1, onEvent: (e) => events.push(e) });
    const { batch } = await runner.start(
      newBatch(2, { items: [{ key: 'a' }, { key: 'b' }] }),
      {},
      batched(async (call) => [
        ...call.items.map((i) => ({ key: i.key, output: i.key })),
        { key: 'x1', output: 0 },
        { key: 'x2', output: 0 },
        { key: 'x3', output: 0 },
        { key: 'x4', output: 0 },
        null as unknown as ItemCallResult,
      ]),
    );
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 2 });
    for (const i of await itemRows(db.sql, batch.id)) expect(i).toMatchObject({ state: 'done', output: i.key });
    expect(events.filter((e) => e.type === 'call-results-ignored')).toEqual([
      { type: 'call-results-ignored', batchId: batch.id, items: 2, strangers: 4, keyless: 1, keys: ['x1', 'x2', 'x3'] },
    ]);
  });

  it('an answer that is not an array fails each item of the call', async () => {
    const runner = new Runner(db.sql, { parallel: 1, attempts: 1 });
    const { batch } = await runner.start(
      newBatch(2),
      {},
      batched(async () => ({ results: [] }) as unknown as ItemCallResult[]),
    );
    await runOf(runner, batch.id);
    for (const i of await itemRows(db.sql, batch.id)) {
      expect(i).toMatchObject({ state: 'failed', error: 'the call of 2 items answered an object, not an array of results' });
    }
  });

  it('items waiting for their call when the run hands off use no attempt, and the next run calls them', async () => {
    const calls: Calls = [];
    // A call is sent only when full (10 items) or after a 10 s gather: the 5 items wait.
    const first = new Runner(db.sql, { parallel: 1 });
    const ex = batched(recording(calls), { itemsPerCall: 10, gatherMs: 10_000 });
    const { batch } = await first.start(newBatch(5), {}, ex);
    await waitFor('the 5 items claimed', async () => (await getBatch(db.sql, batch.id))?.counts.running === 5);
    const stopped = await first.stop(batch.id);
    expect(stopped).toMatchObject({ outcome: 'handed-off', finishedItems: 0 });
    expect(calls).toEqual([]);
    for (const i of await itemRows(db.sql, batch.id)) expect(i).toMatchObject({ state: 'pending', attempts: 0 });

    const second = new Runner(db.sql, { parallel: 1 });
    await second.takeOver(() => ({ ...ex, gatherMs: 0 }), batch.id);
    expect(await runOf(second, batch.id)).toMatchObject({ outcome: 'succeeded' });
    expect(calls.map((c) => c.map((i) => i.attempt))).toEqual([[1, 1, 1, 1, 1]]);
  });

  it('refuses itemsPerCall out of range or without workMany, and a bad bytesPerCall or gatherMs', async () => {
    const runner = new Runner(db.sql);
    const work = async () => null;
    const many: ItemsWork = async () => [];
    for (const [ex, message] of [
      [{ work, workMany: many, itemsPerCall: 0 }, /executor\.itemsPerCall must be a whole number from 1 to 1000 \(got 0\)/],
      [{ work, workMany: many, itemsPerCall: 1_001 }, /itemsPerCall/],
      [{ work, itemsPerCall: 10 }, /executor\.itemsPerCall needs a function that runs a call of items/],
      [{ work, workMany: many, itemsPerCall: 10, bytesPerCall: 0.5 }, /executor\.bytesPerCall/],
      [{ work, workMany: many, itemsPerCall: 10, gatherMs: -1 }, /executor\.gatherMs must be from 0 to 10000 ms/],
    ] as [Executor, RegExp][]) {
      const started = runner.start(newBatch(1), {}, ex);
      await expect(started).rejects.toBeInstanceOf(InvalidSettingError);
      await expect(started).rejects.toThrow(message);
    }
  });

  it('refuses a job that declares itemsPerCall without runMany, or one out of range, where the app is loaded', () => {
    const base = {
      description: 'x',
      params: { safeParse: (v: unknown) => ({ success: true as const, data: v }) } as never,
      expand: async () => ({ items: [] }),
      run: async () => null,
    };
    const registry = (job: object) => () =>
      new JobRegistry([defineJob({ ...base, name: 'j', ...job })], { allowedRoots: [], maxItems: 1 });
    expect(registry({ itemsPerCall: 10 })).toThrow('job "j": itemsPerCall needs runMany, which runs a call of items');
    expect(registry({ itemsPerCall: 0, runMany: async () => [] })).toThrow(
      /job "j": itemsPerCall must be a whole number from 1 to 1000/,
    );
    expect(registry({ itemsPerCall: 10, runMany: async () => [], gatherMs: 20_000 })).toThrow(/job "j": gatherMs/);
    expect(registry({ itemsPerCall: (p: unknown) => (p ? 10 : undefined), runMany: async () => [] })).not.toThrow();
  });
});
