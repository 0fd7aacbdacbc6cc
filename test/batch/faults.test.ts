// Batch faults that deployments of job queues hit: an item value the store cannot hold, retry
// delays that overflow, and a batch whose runs keep failing before they store anything.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { handleApi } from '../../src/api/index.js';
import { defaultJobContext, defineJob, JobRegistry, type Job } from '../../src/jobs/index.js';
import {
  BatchGivenUpError,
  ManualClock,
  Runner,
  createBatch,
  getBatch,
  retryDelayMs,
  backoffIntervalMs,
  type ItemWork,
  type RunResult,
} from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { answer, apiDeps, apiEvent, InvokeEndpoint } from '../support/api.js';
import { itemRows, newBatch, runOf, type ItemRow } from './helpers.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase();

/** Run a batch of `items` with `work` on a fresh runner to its end; its rows by key. */
async function runBatch(
  items: string[],
  work: ItemWork,
  options: ConstructorParameters<typeof Runner>[1] = {},
): Promise<{ result: RunResult; rows: Record<string, ItemRow>; runs: number }> {
  const runner = new Runner(db.sql, { parallel: items.length, attempts: 1, ...options });
  const { batch } = await runner.start(newBatch(items.length, { items: items.map((key) => ({ key })) }), {}, work);
  const result = await runOf(runner, batch.id);
  const rows = Object.fromEntries((await itemRows(db.sql, batch.id)).map((r) => [r.key, r]));
  return { result, rows, runs: (await getBatch(db.sql, batch.id)).runs };
}

describe('an item value the store cannot hold', () => {
  it("fails only its own item; the other item of the same flush lands, with no takeover (the issue's input)", async () => {
    // a returns a lone surrogate, or throws an error whose message holds a NUL; b returns { ok: true }.
    const variants: { name: string; a: () => Promise<unknown>; error: RegExp | string; state: 'failed' }[] = [
      { name: 'lone surrogate output', a: async () => 'x\ud800y', error: /lone surrogate \(\\ud800\)/, state: 'failed' },
      {
        name: 'NUL in the error',
        a: async () => Promise.reject(new Error('bad\u0000byte')),
        error: 'bad\ufffdbyte',
        state: 'failed',
      },
    ];
    for (const v of variants) {
      const { result, rows, runs } = await runBatch(['a', 'b'], async ({ key }) => (key === 'a' ? v.a() : { ok: true }));
      expect(result.outcome, v.name).toBe('failed');
      expect(runs, v.name).toBe(1);
      expect(rows.b, v.name).toMatchObject({ state: 'done', output: { ok: true }, attempts: 1, error: null });
      expect(rows.a, v.name).toMatchObject({ state: v.state, output: null, attempts: 1 });
      if (typeof v.error === 'string') expect(rows.a.error).toBe(v.error);
      else expect(rows.a.error).toMatch(v.error);
      // Both settled at once and were stored by one statement.
      expect(rows.a.updated_at.getTime(), v.name).toBe(rows.b.updated_at.getTime());
    }
  });

  it('covers the whole kind: NUL, lone surrogates, values JSON cannot encode, outputs over the limit', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const outputs: Record<string, unknown> = {
      nulString: 'a\u0000b',
      nulKey: { 'k\u0000': 1 },
      loneLow: ['\udc00'],
      loneHighKey: { 'x\udbff': true },
      bigint: { n: 10n },
      cycle: cyclic,
      toJsonThrows: {
        toJSON: () => {
          throw new Error('no JSON for you');
        },
      },
      tooBig: 'x'.repeat(2_000),
      // Storable: a surrogate pair, and text that only looks like escapes.
      emoji: '😀 ok',
      escapes: '\\u0000 and \\ud800 are just text',
      justUnderLimit: 'y'.repeat(1_000),
    };
    const errors: Record<string, unknown> = {
      errLone: new Error('lone \ud83d here'),
      errThrowingToString: {
        toString: () => {
          throw new Error('nope');
        },
      },
      errLong: new Error('e'.repeat(20_000)),
    };
    const keys = [...Object.keys(outputs), ...Object.keys(errors)];
    const { result, rows, runs } = await runBatch(
      keys,
      async ({ key }) => {
        if (key in errors) throw errors[key];
        return outputs[key];
      },
      { maxOutputBytes: 1_024 },
    );
    expect(result.outcome).toBe('failed');
    expect(runs).toBe(1);
    const failed = (key: string, message: RegExp) =>
      expect(rows[key], key).toMatchObject({ state: 'failed', output: null, error: expect.stringMatching(message) });
    failed('nulString', /NUL character/);
    failed('nulKey', /NUL character/);
    failed('loneLow', /lone surrogate \(\\udc00\)/);
    failed('loneHighKey', /lone surrogate \(\\udbff\)/);
    failed('bigint', /JSON cannot encode it \(.*BigInt/);
    failed('cycle', /JSON cannot encode it \(.*circular/);
    failed('toJsonThrows', /no JSON for you/);
    failed('tooBig', /2002 bytes of JSON, over the limit of 1024 \(maxOutputBytes\)/);
    expect(rows.emoji).toMatchObject({ state: 'done', output: '😀 ok' });
    expect(rows.escapes).toMatchObject({ state: 'done', output: '\\u0000 and \\ud800 are just text' });
    expect(rows.justUnderLimit).toMatchObject({ state: 'done' });
    // Errors are stored sanitised: no lone surrogate, a description for what cannot be printed,
    // and long texts cut.
    expect(rows.errLone).toMatchObject({ state: 'failed', error: 'lone \ufffd here' });
    expect(rows.errThrowingToString).toMatchObject({ state: 'failed', error: '[object Object]' });
    expect(rows.errLong.error).toMatch(/^e{8192}… \(20000 characters, cut\)$/);
  });

  it('stores the others when PostgreSQL refuses a value the checks let through', async () => {
    // A server that cannot encode a character (a LATIN1 database, say) answers 22P05 for the
    // whole statement; this trigger answers the same for one marked output.
    await db.sql.unsafe(`
      create function refuse_value() returns trigger language plpgsql as $$
      begin
        raise exception 'character with byte sequence 0xe2 0x9c 0x93 has no equivalent' using errcode = '22P05';
      end $$;
      create trigger refuse_value before update on leasehold_items
        for each row when (new.output::text like '%refused by the store%') execute function refuse_value();
    `);
    try {
      const { result, rows, runs } = await runBatch(['bad', 'fine1', 'fine2'], async ({ key }) =>
        key === 'bad' ? { note: 'refused by the store ✓' } : key,
      );
      expect(result.outcome).toBe('failed');
      expect(runs).toBe(1);
      expect(rows.bad).toMatchObject({
        state: 'failed',
        output: null,
        attempts: 1,
        error: 'its result cannot be stored: character with byte sequence 0xe2 0x9c 0x93 has no equivalent',
      });
      expect(rows.fine1).toMatchObject({ state: 'done', output: 'fine1' });
      expect(rows.fine2).toMatchObject({ state: 'done', output: 'fine2' });
    } finally {
      await db.sql.unsafe(`drop trigger refuse_value on leasehold_items; drop function refuse_value();`);
    }
  });
});

describe('retry delays', () => {
  it("never overflow: an always failing item at attempt 45 of 100 with the default 5 s backoff waits maxBackoffMs (the issue's input)", async () => {
    const { batch } = await createBatch(db.sql, newBatch(2, { items: [{ key: 'bad' }, { key: 'ok' }] }));
    await db.sql`update leasehold_items set attempts = 44 where batch_id = ${batch.id} and key = 'bad'`;
    const runner = new Runner(db.sql, { parallel: 2, attempts: 100, beatMs: 50, random: () => 0.5 });
    await runner.takeOver(
      () => ({ work: async ({ key }) => (key === 'ok' ? 'ok' : Promise.reject(new Error('always'))) }),
      batch.id,
    );
    await waitFor('both stored', async () => {
      const rows = await itemRows(db.sql, batch.id);
      return (
        rows.some((r) => r.key === 'ok' && r.state === 'done') &&
        rows.some((r) => r.key === 'bad' && r.attempts === 45 && r.state === 'pending')
      );
    });
    const result = await runner.stop(batch.id);
    expect(result).toMatchObject({ outcome: 'handed-off' });
    const rows = Object.fromEntries((await itemRows(db.sql, batch.id)).map((r) => [r.key, r]));
    expect(rows.ok).toMatchObject({ state: 'done', output: 'ok' });
    expect(rows.bad).toMatchObject({ state: 'pending', attempts: 45, error: 'always' });
    const [{ delay_ms }] = await db.sql<{ delay_ms: number }[]>`select
        extract(epoch from run_after - updated_at)::float8 * 1000 as delay_ms
      from leasehold_items where batch_id = ${batch.id} and key = 'bad'`;
    // The interval capped at the default maxBackoffMs (ten minutes; uncapped it would be a day),
    // the delay half of it (random 0.5).
    expect(delay_ms).toBeCloseTo(300_000, 0);
    // The flush that carried it stored the other item too.
    expect(rows.bad.updated_at.getTime()).toBe(rows.ok.updated_at.getTime());
    await db.sql`update leasehold_batches set status = 'cancelled' where id = ${batch.id}`;
  });

  it('are finite and capped for any attempt and setting', () => {
    for (const attempt of [1, 45, 100, 1_000, 1e9]) {
      for (const backoffMs of [0, 1, 5_000, 86_400_000]) {
        const d = retryDelayMs(backoffMs, attempt, Math.random, 600_000);
        expect(Number.isFinite(d), `${backoffMs} ${attempt}`).toBe(true);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(600_000);
      }
    }
    expect(backoffIntervalMs(5_000, 45)).toBe(86_400_000);
    expect(retryDelayMs(5_000, 45, () => 0.5)).toBe(43_200_000);
    expect(backoffIntervalMs(100, 2, 150)).toBe(150);
    expect(retryDelayMs(100, 2, () => 0.5, 150)).toBe(75);
  });

  it('refuses out-of-range retry settings, naming the setting', async () => {
    expect(() => new Runner(db.sql, { attempts: 100_000 })).toThrow(/attempts must be an integer from 1 to 1000 \(got 100000\)/);
    expect(() => new Runner(db.sql, { backoffMs: 1e15 })).toThrow(/backoffMs must be from 0 to 86400000/);
    expect(() => new Runner(db.sql, { maxBackoffMs: Infinity })).toThrow(/maxBackoffMs/);
    expect(() => new Runner(db.sql, { attempts: 0 })).toThrow(/attempts/);
    // A job's own settings: refused before anything is started.
    const runner = new Runner(db.sql);
    const b = newBatch(1);
    await expect(runner.start(b, {}, { work: async () => 1, backoffMs: 1e15 })).rejects.toThrow(
      /executor\.backoffMs must be from 0/,
    );
    await expect(runner.start(b, {}, { work: async () => 1, attempts: 100_000 })).rejects.toThrow(/executor\.attempts/);
    expect((await db.sql`select count(*)::int as n from leasehold_batches where request_key = ${b.requestKey}`)[0].n).toBe(0);
    // A deployment's job with such settings is refused when the registry is built.
    const job = (over: Partial<Job>) =>
      defineJob({
        name: 'j',
        description: 'd',
        params: z.object({}),
        expand: async () => ({ items: [] }),
        run: async () => 1,
        ...over,
      });
    expect(() => new JobRegistry([job({ attempts: 100_000 })], defaultJobContext())).toThrow(
      /job "j": attempts must be an integer from 1 to 1000/,
    );
    expect(() => new JobRegistry([job({ backoffMs: 1e15 })], defaultJobContext())).toThrow(
      /job "j": backoffMs must be from 0 to 86400000/,
    );
    expect(() => new JobRegistry([job({ attempts: 100, backoffMs: 5_000 })], defaultJobContext())).not.toThrow();
  });
});

describe('a batch whose runs keep failing before they store anything', () => {
  it('ends failed after maxStalledRuns such runs (default 10), with a reason GET /batches/{id} shows', async () => {
    // Every finish statement fails: each run ends in a store error before the batch can finish.
    await db.sql.unsafe(`
      create function refuse_finish() returns trigger language plpgsql as $$
      begin raise exception 'finish refused'; end $$;
      create trigger refuse_finish before update on leasehold_batches
        for each row when (old.status = 'open' and new.status = 'succeeded') execute function refuse_finish();
    `);
    const endpoint = await InvokeEndpoint.start();
    try {
      const { batch } = await createBatch(db.sql, newBatch(3));
      const outcomes: string[] = [];
      // Every run: a takeover once the batch is stale, then store errors until it stops.
      for (let i = 0; i < 30 && (await getBatch(db.sql, batch.id)).status === 'open'; i++) {
        const runner = new Runner(db.sql, { beatMs: 20, staleMs: 60, moveTries: 1 });
        await waitFor('takeover', () => runner.takeOver(() => ({ work: async ({ key }) => key }), batch.id), { everyMs: 10 });
        const r = await runOf(runner, batch.id);
        outcomes.push(r.outcome);
        if (r.outcome === 'failed') expect(r.error).toBeInstanceOf(BatchGivenUpError);
      }
      // The first run stored every item, then its finish failed; ten more runs stored nothing;
      // the next gave the batch up.
      expect(outcomes).toEqual([...Array(11).fill('store-error'), 'failed']);
      const after = await getBatch(db.sql, batch.id);
      expect(after).toMatchObject({
        status: 'failed',
        runs: 12,
        ownerProcess: null,
        counts: { pending: 0, running: 0, done: 3, failed: 0 },
      });
      expect(after.reason).toBe('given up: its last 10 runs ended without storing any item result');
      const res = answer(await handleApi(apiEvent('GET', `/batches/${batch.id}`), apiDeps(db.sql, endpoint)));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ status: 'failed', reason: after.reason });
    } finally {
      await endpoint.close();
      await db.sql.unsafe(`drop trigger refuse_finish on leasehold_batches; drop function refuse_finish();`);
    }
  });

  it('gives up a batch whose runs keep dying, failing the items left with the reason', async () => {
    const { batch } = await createBatch(db.sql, newBatch(4));
    const runners: Runner[] = [];
    for (let i = 0; i < 3; i++) {
      // A process that takes the batch, claims its items, then neither beats nor finishes any.
      const clock = new ManualClock();
      clock.freeze();
      const r = new Runner(db.connect({ max: 2 }), { clock, beatMs: 20, staleMs: 60, attempts: 10, maxStalledRuns: 2 });
      await waitFor('takeover', () => r.takeOver(() => ({ work: () => new Promise(() => {}) }), batch.id), { everyMs: 10 });
      runners.push(r);
      if (i < 2) {
        await waitFor('claimed', async () => {
          const [c] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items i
            join leasehold_runs r on r.batch_id = i.batch_id and r.id = i.run_id
            where i.batch_id = ${batch.id} and i.state = 'running'`;
          return c.n === 4;
        });
      }
    }
    const third = await runOf(runners[2], batch.id);
    expect(third.outcome).toBe('failed');
    expect(third.error).toBeInstanceOf(BatchGivenUpError);
    const after = await getBatch(db.sql, batch.id);
    expect(after).toMatchObject({
      status: 'failed',
      runs: 3,
      reason: 'given up: its last 2 runs ended without storing any item result',
      counts: { pending: 0, running: 0, done: 0, failed: 4 },
    });
    for (const row of await itemRows(db.sql, batch.id)) {
      expect(row).toMatchObject({
        state: 'failed',
        attempts: 2,
        error: expect.stringMatching(/^the batch was given up: its last 2 runs/),
      });
    }
  });

  it('counts neither a graceful handoff that stored nothing nor a takeover by a runner that does not know the job', async () => {
    const { batch } = await createBatch(db.sql, newBatch(2));
    for (let round = 0; round < 4; round++) {
      // Work that ignores its signal: the handoff stores no result for it.
      const r = new Runner(db.sql, { beatMs: 20, staleMs: 60, drainMs: 10, attempts: 10, maxStalledRuns: 2 });
      await r.takeOver(() => ({ work: () => new Promise(() => {}) }), batch.id);
      await waitFor('running', async () => (await itemRows(db.sql, batch.id)).every((i) => i.state === 'running'));
      expect(await r.stop(batch.id)).toMatchObject({ outcome: 'handed-off', finishedItems: 0 });
      expect(await new Runner(db.sql, { staleMs: 60, beatMs: 20 }).takeOver(() => undefined, batch.id)).toBeUndefined();
      expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'open', stalledRuns: 0 });
    }
    const last = new Runner(db.sql, { beatMs: 20, staleMs: 60, attempts: 10, maxStalledRuns: 2 });
    await last.takeOver(() => ({ work: async () => 'ok' }), batch.id);
    expect((await runOf(last, batch.id)).outcome).toBe('succeeded');
    expect(await getBatch(db.sql, batch.id)).toMatchObject({ status: 'succeeded', reason: null, runs: 9 });
  });
});
