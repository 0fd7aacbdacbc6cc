// The one home of sending workers: callers ask the WorkerDispatcher for N workers and get those
// the worker limit has room for (invariant 8: live workers plus invocations on their way never
// exceed it), checked on the database afterwards.
import { beforeEach, expect, it } from 'vitest';
import { createBatch, type WorkerEvent } from '../../src/batch/index.js';
import { setDesired } from '../../src/lease/index.js';
import { WorkerDispatcher } from '../../src/runtime/dispatch.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();
beforeEach(async () => {
  for (const t of ['leasehold_processes', 'leasehold_invocations', 'leasehold_items', 'leasehold_batches']) {
    await db.sql`delete from ${db.sql(t)}`;
  }
});

/** A dispatcher that records what it was asked to invoke. */
const recording = () => {
  const sent: WorkerEvent[] = [];
  return { sent, invoke: async (e: WorkerEvent) => void sent.push(e) };
};

const batch = async (key: string) =>
  (
    await createBatch(db.sql, {
      tenant: 't',
      datasource: `d-${key}`,
      job: 'slow',
      params: {},
      requestKey: key,
      maxConcurrency: 4,
      items: Array.from({ length: 800 }, (_, i) => ({ key: `k${i}` })),
    })
  ).batch;

it('callers asking for workers at once, for batches and the fleet, never pass the worker limit, 5 rounds', async () => {
  await setDesired(db.sql, 10);
  for (let round = 0; round < 5; round++) {
    await db.sql`delete from leasehold_invocations`;
    const batches = await Promise.all([0, 1, 2].map((i) => batch(`r${round}-${i}`)));
    const dispatcher = recording();
    const workers = () => new WorkerDispatcher(db.sql, dispatcher, { maxWorkers: 5, invocationPendingMs: 30_000 });
    const answers = await Promise.all([
      ...batches.map((b) => workers().send(b.id, 4)),
      workers().sendFleet(10),
      workers().send(batches[0].id, 4),
    ]);
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_invocations`;
    expect(n).toBe(5);
    expect(dispatcher.sent).toHaveLength(5);
    const counted = answers.reduce<number>((sum, a) => sum + (typeof a === 'number' ? a : a.invoked), 0);
    expect(counted).toBe(5);
    // Every event sent names an invocation that was reserved.
    const ids = await db.sql<{ id: string }[]>`select id from leasehold_invocations`;
    expect(new Set(dispatcher.sent.map((e) => e.invocationId))).toEqual(new Set(ids.map((r) => r.id)));
  }
});

it('a batch the limit has no room for is sent nothing and not marked dispatched; the scheduler sends it later', async () => {
  const full = await batch('full');
  const left = await batch('left');
  const dispatcher = recording();
  const workers = new WorkerDispatcher(db.sql, dispatcher, { maxWorkers: 2, invocationPendingMs: 30_000 });
  expect(await workers.send(full.id, 4)).toBe(2);
  expect(await workers.send(left.id, 4)).toBe(0);
  const rows = await db.sql<{ id: string; dispatched: boolean }[]>`
    select id, dispatched_at is not null as dispatched from leasehold_batches`;
  expect(Object.fromEntries(rows.map((r) => [r.id, r.dispatched]))).toEqual({ [full.id]: true, [left.id]: false });
  expect(dispatcher.sent.map((e) => e.batchId)).toEqual([full.id, full.id]);
});

it('a failed invoke is thrown after the other workers were sent', async () => {
  const b = await batch('failing');
  let calls = 0;
  const workers = new WorkerDispatcher(
    db.sql,
    {
      invoke: async () => {
        if (calls++ === 0) throw new Error('throttled');
      },
    },
    { maxWorkers: 10, invocationPendingMs: 30_000 },
  );
  await expect(workers.send(b.id, 3)).rejects.toThrow('throttled');
  expect(calls).toBe(3);
});
