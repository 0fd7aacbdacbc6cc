// The worker's pass-throughs for the middlewares: the deadline signal and the metric hooks.
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { cancelBatch, createBatch, getBatch, PermanentItemError } from '../../src/batch/index.js';
import { defaultJobContext, defineJob, JobRegistry } from '../../src/jobs/index.js';
import { loadConfig, runWorker } from '../../src/runtime/index.js';
import { type Dispatcher, type WorkerEvent } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase();

const slow = defineJob({
  name: 'slow',
  description: 'waits ms per item, or fails as told',
  params: z.object({ ms: z.number() }),
  parallel: 4,
  attempts: 2,
  backoffMs: 0,
  async expand() {
    return { items: [] };
  },
  async run(item) {
    if (item.key.startsWith('bad')) throw new PermanentItemError('bad item');
    if (item.key.startsWith('flaky') && item.attempt === 1) throw new Error('first attempt fails');
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => (clearTimeout(t), reject(new Error('aborted')));
      const t = setTimeout(() => (item.signal.removeEventListener('abort', onAbort), resolve()), item.params.ms);
      item.signal.addEventListener('abort', onAbort, { once: true });
    });
    return {};
  },
});
const jobs = new JobRegistry([slow], defaultJobContext());
const config = () =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_DEADLINE_MARGIN_MS: '1000',
    LEASEHOLD_DRAIN_MS: '200',
    LEASEHOLD_WORKER_POLL_MS: '50',
    LEASEHOLD_WORKER_IDLE_MS: '200',
  });
const recording = (): Dispatcher & { events: WorkerEvent[] } => {
  const events: WorkerEvent[] = [];
  return { events, invoke: async (e) => void events.push(e) };
};
const context = (ms: number) => {
  const start = Date.now();
  return { getRemainingTimeInMillis: () => ms - (Date.now() - start) };
};

describe('runWorker', () => {
  it('stops as at its deadline when the deadline signal aborts, handing off and asking for a continuation', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'signal',
      job: 'slow',
      params: { ms: 60_000 },
      requestKey: 'signal-1',
      items: [{ key: 'a' }, { key: 'b' }],
    });
    const deadline = new AbortController();
    setTimeout(() => deadline.abort(), 300);
    const dispatcher = recording();
    const t0 = Date.now();
    const r = await runWorker({ batchId: batch.id }, context(60_000), {
      log: silentLog,
      sql: db.sql,
      jobs,
      config: config(),
      dispatcher,
      signal: deadline.signal,
    });
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(r.reason).toBe('deadline');
    expect(r.runs).toEqual([expect.objectContaining({ batchId: batch.id, outcome: 'handed-off' })]);
    expect(r.continued).toEqual([batch.id]);
    expect(dispatcher.events).toContainEqual(expect.objectContaining({ batchId: batch.id }));
    expect((await getBatch(db.sql, batch.id)).ownerProcess).toBeNull();
    await cancelBatch(db.sql, batch.id);
  });

  it('reports runs, items (done, retried, failed for good) and lease ticks to its hooks', async () => {
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'hooks',
      job: 'slow',
      params: { ms: 10 },
      requestKey: 'hooks-1',
      items: [{ key: 'ok1' }, { key: 'ok2' }, { key: 'flaky' }, { key: 'bad' }],
    });
    const items: string[] = [];
    const runs: string[] = [];
    const ticks: number[] = [];
    // A fleet worker (from the scheduler): it rebalances units and takes over the open batch.
    // A worker sent for the batch would not tick: it owns no units.
    const r = await runWorker({}, context(30_000), {
      log: silentLog,
      sql: db.sql,
      jobs,
      config: config(),
      dispatcher: recording(),
      hooks: {
        item: (o) => items.push(o),
        // Run events only: item outcomes arrive through `item` too.
        runner: (e) => e.type !== 'item-ended' && runs.push(e.type === 'run-ended' ? `ended:${e.result.outcome}` : e.type),
        lease: { rebalanced: (ms) => ticks.push(ms) },
      },
    });
    expect(r.runs).toEqual([expect.objectContaining({ batchId: batch.id, outcome: 'failed' })]);
    expect(items.sort()).toEqual(['done', 'done', 'done', 'failed', 'retry']);
    expect(runs).toEqual(['run-started', 'ended:failed']);
    expect(ticks.length).toBeGreaterThan(0);
  });
});
