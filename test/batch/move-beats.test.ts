// A move that beats (docs/design.md, "Batches"): a run whose moves land often lets them carry its
// beat (the fence already updates the run's row) and sends no beat of its own; a pause set
// meanwhile is still heard through them, and a run with nothing to move beats by itself.
import { beforeAll, describe, expect, it } from 'vitest';
import { Runner, createBatch, getBatch, pauseBatch, type Executor } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

beforeAll(async () => {
  // Every update of a run's row: a beat alone changes beat_at only, a move its settled count.
  await db.sql.unsafe(`
    create table run_updates (seq bigserial primary key, id uuid, moved boolean, beat boolean);
    create function run_updates() returns trigger language plpgsql as $$
    begin
      insert into run_updates (id, moved, beat)
      values (new.id, new.settled <> old.settled, new.beat_at is distinct from old.beat_at);
      return null;
    end $$;
    create trigger run_updates after update on leasehold_runs for each row execute function run_updates();`);
});

/** A run's updates of its own row: beats sent alone, and moves that beat. */
async function beats(run: string) {
  const [r] = await db.sql<{ alone: number; moving: number; moves: number }[]>`select
      count(*) filter (where beat and not moved)::int as alone,
      count(*) filter (where beat and moved)::int as moving,
      count(*) filter (where moved)::int as moves
    from run_updates where id = ${run}`;
  return r;
}

const working = (ms: number): Executor => ({ work: () => sleep(ms).then(() => ({ ok: true })) });

let tenants = 0;
const ownTenant = () => `beats-${process.pid}-${++tenants}`;

/** A batch of `n` items of `ms` each, run to its end by one runner at `parallel` (beats due every 200 ms); answers its run's id. */
async function runToEnd(n: number, ms: number, parallel: number): Promise<string> {
  const { batch } = await createBatch(db.sql, newBatch(n, { tenant: ownTenant() }));
  const runner = new Runner(db.sql, { parallel, beatMs: 200, staleMs: 5_000 });
  try {
    expect(await runner.takeOver(() => working(ms), batch.id)).toBeTruthy();
    const result = await runner.running(batch.id)!;
    expect(result.outcome).toBe('succeeded');
    return result.runId;
  } finally {
    await runner.close();
  }
}

describe('a run whose moves land often', () => {
  it('beats through its moves and sends (almost) no beat of its own', async () => {
    // 200 items of 30 ms at parallel 4: ~1.5 s of moves every ~30 ms, beats due every 200 ms.
    const b = await beats(await runToEnd(200, 30, 4));
    // About one move in seven beats (one per half beatMs); the beat loop, put off by each, sent
    // next to none itself. Before moves beat, every beat was one alone (about 7 here) and no
    // move set beat_at.
    expect(b.moves).toBeGreaterThan(10);
    expect(b.moving).toBeGreaterThanOrEqual(3);
    expect(b.alone).toBeLessThan(b.moving);
  });

  it('hears a pause through a move that beats, and hands off using no attempt', async () => {
    const { batch } = await createBatch(db.sql, newBatch(400, { tenant: ownTenant() }));
    const runner = new Runner(db.sql, { parallel: 4, beatMs: 300, staleMs: 5_000 });
    try {
      expect(await runner.takeOver(() => working(30), batch.id)).toBeTruthy();
      const run = runner.running(batch.id)!;
      await waitFor('some items done', async () => ((await getBatch(db.sql, batch.id)).counts.done ?? 0) >= 20);
      await pauseBatch(db.sql, batch.id);
      const result = await run;
      expect(result.outcome).toBe('drained');
    } finally {
      await runner.close();
    }
    const b = await getBatch(db.sql, batch.id);
    expect(b.status).toBe('open');
    expect(b.counts.running ?? 0).toBe(0);
    // No item used an attempt it did not start: every item is done once or pending at 0.
    const [{ odd }] = await db.sql<{ odd: number }[]>`select count(*)::int as odd from leasehold_items
      where batch_id = ${batch.id} and not ((state = 'done' and attempts = 1) or (state = 'pending' and attempts = 0))`;
    expect(odd).toBe(0);
  });
});

describe('a run with nothing to move', () => {
  it('beats by itself', async () => {
    // Items of 1.2 s at parallel 2: no move for a second at a time, beats due every 200 ms.
    expect((await beats(await runToEnd(2, 1_200, 2))).alone).toBeGreaterThanOrEqual(3);
  });
});
