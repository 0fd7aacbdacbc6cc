// The flusher's linger (docs/design.md, "The pipelined run"): items of a run that settle a few
// ms apart are moved by one statement, which also claims the next items.
import { beforeAll, describe, expect, it } from 'vitest';
import { Runner, createBatch, type ItemWork } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { deferred, waitFor, type Deferred } from '../support/waits.js';
import { installAudit, itemChanges, newBatch, runOf, tally } from './helpers.js';

const db = useTestDatabase();

beforeAll(async () => {
  await installAudit(db.sql);
});

describe("a run's flusher", () => {
  it('moves 4 items that settle within a few ms in one statement, which claims the next 4 (default queue)', async () => {
    const waves = 3;
    const parallel = 4;
    const gates: Deferred<void>[] = [];
    const started: string[] = [];
    const work: ItemWork = async ({ key }) => {
      const gate = deferred<void>();
      gates.push(gate);
      started.push(key);
      await gate.promise;
      return key;
    };
    const { batch } = await createBatch(db.sql, newBatch(waves * parallel));
    // The default queue: as many items claimed ahead as run.
    const runner = new Runner(db.sql, { parallel, beatMs: 1_000, staleMs: 60_000 });
    await runner.takeOver(() => ({ work }), batch.id);
    for (let wave = 0; wave < waves; wave++) {
      await waitFor(`wave ${wave} started`, () => started.length === (wave + 1) * parallel);
      // The items run a while, then settle one event-loop turn apart. The linger is scaled by
      // how long items take: with the default queue (1 item left when 3 of 4 settled) it keeps
      // waiting only while the last statement's round trip stays under (2,000 / 4 - 1) / 1.5 =
      // 333 ms; at 1 s it was 166 ms, which a first claim under CI load once took (the wave
      // split 3 + 1). Settling 3 ms apart by timers let a descheduled test process stretch a
      // gap past the linger's 50 ms.
      await sleep(2_000);
      for (const gate of gates.slice(wave * parallel, (wave + 1) * parallel)) {
        gate.resolve();
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    expect((await runOf(runner, batch.id)).outcome).toBe('succeeded');

    const changes = await itemChanges(db.sql, batch.id);
    const done = changes.filter((c) => c.state === 'done');
    expect(done).toHaveLength(waves * parallel);
    // One transaction (one statement) per wave of moves…
    const moveXids = [...tally(done.map((c) => c.xid)).entries()];
    expect(moveXids.map(([, n]) => n)).toEqual(Array(waves).fill(parallel));
    // …and each claimed the next items: 4 while any are left (the first claim took 8, the
    // slots' and the queue's).
    const claims = changes.filter((c) => c.old_state === 'pending' && c.state === 'running');
    const claimed = moveXids.map(([xid]) => claims.filter((c) => c.xid === xid).length);
    expect(claimed).toEqual(
      moveXids.map((_, w) => Math.max(0, Math.min(parallel, waves * parallel - 2 * parallel - w * parallel))),
    );
  });
});
