// Item heartbeats and checkpoints (docs/design.md, "Item heartbeats and checkpoints"), on a real
// PostgreSQL: an item that checkpoints goes on from its checkpoint across handoffs using no
// attempt for them; a frozen item whose run keeps beating is recovered after itemStaleMs; one that
// keeps beating is left alone; a checkpoint past its limit is refused and stores nothing.
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CheckpointTooLargeError,
  ItemStaleError,
  MAX_CHECKPOINT_BYTES,
  Runner,
  UnstorableStateError,
  getBatch,
  type Executor,
  type ItemWork,
  type RunnerEvent,
} from '../../src/batch/index.js';
import { InvalidSettingError } from '../../src/errors.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { never, sleep } from '../support/time.js';
import { deferred } from '../support/waits.js';
import { installAudit, itemChanges, itemRows, newBatch, runOf } from './helpers.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

/** Resolve after `ms`, or reject with `interrupted` once `signal` aborts. */
function step(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Error('interrupted'));
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), reject(new Error('interrupted'))), { once: true });
  });
}

/** The item's stored heartbeat columns. */
async function beatColumns(batchId: string, key: string) {
  const [r] = await db.sql<{ heartbeat_at: Date | null; progress: unknown; checkpoint: unknown }[]>`
    select heartbeat_at, progress, checkpoint from leasehold_items where batch_id = ${batchId} and key = ${key}`;
  return r;
}

describe('checkpoints', () => {
  it('an item that checkpoints every second and takes 3 invocations ends done, having used 1 attempt', async () => {
    // attempts: 1, so an interruption that counted its attempt would fail the item for good, as
    // it does for k001, which never checkpoints.
    const seen: { key: string; attempt: number; from: number }[] = [];
    // Resolved once the attempt of the current invocation stored its second checkpoint.
    let twoSteps = deferred();
    const work: ItemWork = async (item) => {
      if (item.key === 'k001') return step(60_000, item.signal);
      const from = (item.checkpointed as { step: number } | undefined)?.step ?? 0;
      seen.push({ key: item.key, attempt: item.attempt, from });
      for (let n = from + 1; n <= 5; n++) {
        await step(1_000, item.signal);
        await item.checkpoint({ step: n });
        if (n - from === 2) twoSteps.resolve();
      }
      return { steps: 5, resumedFrom: seen.map((s) => s.from) };
    };
    const executor: Executor = { work, attempts: 1 };
    const options = { beatMs: 200, staleMs: 10_000, drainMs: 3_000 };
    // Each invocation hands off (as a worker does at its deadline) once the item stored its
    // second checkpoint there: its next step is interrupted.
    const invocations: string[] = [];
    const first = new Runner(db.sql, options);
    const { batch } = await first.start(newBatch(2), {}, executor);
    let runner = first;
    let outcome: string | undefined;
    for (let i = 0; i < 6 && outcome !== 'failed' && outcome !== 'succeeded'; i++) {
      if (i > 0) {
        runner = new Runner(db.sql, options);
        expect(await runner.takeOver(() => executor, batch.id)).toBeDefined();
      }
      const done = runOf(runner, batch.id);
      const ended = await Promise.race([done.then(() => true), twoSteps.promise.then(() => false)]);
      if (!ended) await runner.close();
      twoSteps = deferred();
      const r = await done;
      invocations.push(r.outcome);
      outcome = r.outcome;
      await runner.close();
    }
    // Two handoffs, then the third invocation finished the batch (failed: k001 did).
    expect(invocations).toEqual(['handed-off', 'handed-off', 'failed']);
    const [k000, k001] = await itemRows(db.sql, batch.id);
    expect(k000).toMatchObject({ state: 'done', attempts: 1, output: { steps: 5, resumedFrom: [0, 2, 4] }, error: null });
    // Every invocation ran attempt 1, each from the previous one's last checkpoint.
    expect(seen).toEqual([
      { key: 'k000', attempt: 1, from: 0 },
      { key: 'k000', attempt: 1, from: 2 },
      { key: 'k000', attempt: 1, from: 4 },
    ]);
    // Each handoff put it back to pending with its attempt given back (0 used), in the store.
    const back = (await itemChanges(db.sql, batch.id)).filter((c) => c.key === 'k000' && c.state === 'pending');
    expect(back.map((c) => [c.old_state, c.attempts])).toEqual([
      ['running', 0],
      ['running', 0],
    ]);
    expect((await beatColumns(batch.id, 'k000')).checkpoint).toEqual({ step: 5 });
    // The item that stored no checkpoint used its one attempt at the first handoff, as before.
    expect(k001).toMatchObject({ state: 'failed', attempts: 1, error: 'interrupted' });
  }, 60_000);

  it('hands the last checkpoint to the next attempt after a failure, which still counts', async () => {
    const runner = new Runner(db.sql, { attempts: 3, backoffMs: 0 });
    const got: unknown[] = [];
    const work: ItemWork = async (item) => {
      got.push(item.checkpointed);
      await item.checkpoint({ attempt: item.attempt });
      if (item.attempt < 3) throw new Error(`failed at ${item.attempt}`);
      return 'ok';
    };
    const { batch } = await runner.start(newBatch(1), {}, { work });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    expect(got).toEqual([undefined, { attempt: 1 }, { attempt: 2 }]);
    expect((await itemRows(db.sql, batch.id))[0]).toMatchObject({ state: 'done', attempts: 3 });
    await runner.close();
  });

  it('refuses a checkpoint over 64 KiB (or progress over 8 KiB) clearly, storing nothing, and takes one within it', async () => {
    const runner = new Runner(db.sql, { attempts: 1 });
    const work: ItemWork = async (item) => {
      const errors: unknown[] = [];
      await item.checkpoint({ small: 1 });
      await item.checkpoint({ data: 'x'.repeat(MAX_CHECKPOINT_BYTES) }).catch((e: unknown) => errors.push(e));
      await item.checkpoint({ bad: 10n }).catch((e: unknown) => errors.push(e));
      try {
        item.heartbeat({ data: 'y'.repeat(9_000) });
      } catch (e) {
        errors.push(e);
      }
      return errors.map((e) => ({
        large: e instanceof CheckpointTooLargeError,
        unstorable: e instanceof UnstorableStateError,
        message: (e as Error).message,
      }));
    };
    const { batch } = await runner.start(newBatch(1), {}, { work });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    const [item] = await itemRows(db.sql, batch.id);
    expect(item.output).toEqual([
      {
        large: true,
        unstorable: false,
        message: `the checkpoint is ${MAX_CHECKPOINT_BYTES + 11} bytes of JSON, over the limit of 65536 bytes: nothing was stored (store a cursor or an offset, not the data)`,
      },
      {
        large: false,
        unstorable: true,
        message: expect.stringMatching(/^the checkpoint cannot be stored: JSON cannot encode it/),
      },
      {
        large: true,
        unstorable: false,
        message:
          'the progress is 9011 bytes of JSON, over the limit of 8192 bytes: nothing was stored (store a cursor or an offset, not the data)',
      },
    ]);
    // The refused ones stored nothing: the small checkpoint stands, and no progress.
    expect(await beatColumns(batch.id, 'k000')).toMatchObject({ checkpoint: { small: 1 }, progress: null });
    await runner.close();
  });
});

describe('heartbeats', () => {
  it('recovers a frozen item whose run keeps beating once its heartbeat is older than itemStaleMs', async () => {
    const events: RunnerEvent[] = [];
    const runner = new Runner(db.sql, {
      beatMs: 200,
      staleMs: 20_000,
      attempts: 2,
      backoffMs: 0,
      onEvent: (e) => events.push(e),
    });
    const reasons: unknown[] = [];
    const work: ItemWork = async (item) => {
      if (item.attempt > 1) return { attempt: item.attempt };
      item.signal.addEventListener('abort', () => reasons.push(item.signal.reason), { once: true });
      for (let i = 1; i <= 3; i++) {
        item.heartbeat({ step: i });
        await sleep(300);
      }
      // Frozen: it never settles, ignores its signal and beats no more.
      return never();
    };
    const { batch } = await runner.start(newBatch(1), {}, { work, itemStaleMs: 1_500 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded', finishedItems: 1 });
    // Its run recovered it (an item-ended event of outcome stale), aborting its signal with the reason.
    const recovered = events.find((e) => e.type === 'item-ended' && e.outcome === 'stale');
    expect(recovered).toMatchObject({ key: 'k000', attempt: 1 });
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(ItemStaleError);
    // In the store: one run worked the batch (it was never stale nor taken over); the item went
    // back to pending with attempt 1 counted, at least itemStaleMs after its last heartbeat (the
    // database's clock), then ran again and ended done.
    const b = await getBatch(db.sql, batch.id);
    expect(b?.runs).toBe(1);
    const [item] = await itemRows(db.sql, batch.id);
    expect(item).toMatchObject({ state: 'done', attempts: 2, output: { attempt: 2 } });
    const { heartbeat_at, progress } = await beatColumns(batch.id, 'k000');
    expect(progress).toEqual({ step: 3 });
    const back = (await itemChanges(db.sql, batch.id)).filter((c) => c.old_state === 'running' && c.state === 'pending');
    expect(back).toHaveLength(1);
    expect(back[0].attempts).toBe(1);
    const quietMs = back[0].updated_at.getTime() - heartbeat_at!.getTime();
    expect(quietMs).toBeGreaterThanOrEqual(1_500);
    // …and long before its run could have gone stale.
    expect(quietMs).toBeLessThan(20_000);
    await runner.close();
  }, 30_000);

  it('fails a frozen item on its last attempt with the reason, and the batch still ends', async () => {
    const runner = new Runner(db.sql, { beatMs: 200, staleMs: 20_000, attempts: 1 });
    const work: ItemWork = ({ key }) => (key === 'k000' ? never() : Promise.resolve(key));
    const { batch } = await runner.start(newBatch(2), {}, { work, itemStaleMs: 500 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'failed', finishedItems: 2 });
    const [k000, k001] = await itemRows(db.sql, batch.id);
    expect(k000).toMatchObject({
      state: 'failed',
      attempts: 1,
      error: 'no heartbeat within itemStaleMs (500 ms; attempt 1 of 1)',
    });
    expect(k001).toMatchObject({ state: 'done', output: 'k001' });
    await runner.close();
  }, 30_000);

  it('leaves an item that keeps beating alone, however long it runs past itemStaleMs', async () => {
    const events: RunnerEvent[] = [];
    const runner = new Runner(db.sql, { beatMs: 100, staleMs: 20_000, attempts: 1, onEvent: (e) => events.push(e) });
    const work: ItemWork = async (item) => {
      for (let i = 0; i < 16; i++) {
        item.heartbeat({ i });
        await sleep(250);
      }
      return 'done';
    };
    // 4 s of work, twice itemStaleMs, beating every 250 ms.
    const { batch } = await runner.start(newBatch(1), {}, { work, itemStaleMs: 2_000 });
    expect(await runOf(runner, batch.id)).toMatchObject({ outcome: 'succeeded' });
    expect((await itemRows(db.sql, batch.id))[0]).toMatchObject({ state: 'done', attempts: 1, output: 'done' });
    expect(events.filter((e) => e.type === 'item-ended' && e.outcome === 'stale')).toEqual([]);
    await runner.close();
  }, 30_000);

  it('refuses an itemStaleMs out of range', async () => {
    const runner = new Runner(db.sql);
    for (const itemStaleMs of [0, 99, 900_001, 1.5]) {
      await expect(runner.start(newBatch(1), {}, { work: async () => null, itemStaleMs })).rejects.toThrow(InvalidSettingError);
    }
    await runner.close();
  });
});
