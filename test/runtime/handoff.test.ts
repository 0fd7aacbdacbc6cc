import { LambdaClient } from '@aws-sdk/client-lambda';
import { describe, expect, it } from 'vitest';
import { createBatch, getBatch } from '../../src/batch/index.js';
import { JobRegistry, defaultJobContext } from '../../src/jobs/index.js';
import { slowJobOf } from '../support/fleet.js';
import { createInvokeEndpoint, type InvocationOutcome } from '../../src/local/invoke-endpoint.js';
import { loadConfig, runScheduler, runWorker, LambdaDispatcher, type WorkerResult } from '../../src/runtime/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { sleep } from '../support/time.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase();

/** Every successful execution of an item, by key, across all invocations. */
const executions = new Map<string, number>();

const slow = slowJobOf({ onDone: (key) => executions.set(key, (executions.get(key) ?? 0) + 1) });

describe('worker handoff through the local invoke endpoint', () => {
  it('a worker with a 10 s local timeout hands off before its deadline and another invocation continues within 2 s, losing nothing', async () => {
    const config = loadConfig({
      DATABASE_URL: db.url,
      LEASEHOLD_DEADLINE_MARGIN_MS: '2500',
      LEASEHOLD_WORKER_IDLE_MS: '500',
      LEASEHOLD_WORKER_POLL_MS: '100',
      LEASEHOLD_BEAT_MS: '1000',
      LEASEHOLD_STALE_MS: '5000',
    });
    const jobs = new JobRegistry([slow], defaultJobContext());
    const outcomes: InvocationOutcome[] = [];
    const starts: number[] = [];
    const results: WorkerResult[] = [];
    // eslint-disable-next-line prefer-const -- assigned once the endpoint listens; its handler reads it
    let dispatcher!: LambdaDispatcher;
    const endpoint = createInvokeEndpoint({
      functions: {
        worker: async (event: unknown, context) => {
          const r = await runWorker(event as { batchId?: string }, context, {
            log: silentLog,
            sql: db.sql,
            jobs,
            config,
            dispatcher,
          });
          results.push(r);
          return r;
        },
      },
      timeoutMs: 10_000,
      concurrency: 4,
      onInvoke: () => starts.push(Date.now()),
      onDone: (o) => outcomes.push(o),
    });
    const { url } = await endpoint.start();
    const client = new LambdaClient({
      endpoint: url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'l', secretAccessKey: 'l' },
    });
    dispatcher = new LambdaDispatcher('worker', client);
    try {
      // 70 items × 250 ms at parallel 2 ≈ 8.75 s of work: more than one 7.5 s invocation holds.
      const items = Array.from({ length: 70 }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` }));
      const { batch } = await createBatch(db.sql, {
        tenant: 't',
        datasource: 'd',
        job: 'slow',
        params: { ms: 250 },
        requestKey: 'handoff',
        items,
      });
      await dispatcher.invoke({ batchId: batch.id });

      const deadline = Date.now() + 40_000;
      while ((await getBatch(db.sql, batch.id)).status === 'open' && Date.now() < deadline) {
        await sleep(200);
      }
      await endpoint.idle();
      const end = await getBatch(db.sql, batch.id);
      expect(end.status).toBe('succeeded');
      expect(end.counts).toEqual({ pending: 0, running: 0, waiting: 0, done: 70, failed: 0 });
      // Nothing lost, nothing done twice.
      expect([...executions.keys()].sort()).toEqual(items.map((i) => i.key));
      expect([...executions.values()].every((n) => n === 1)).toBe(true);

      // The first invocation handed off before its 10 s deadline and asked for a continuation.
      const first = results.find((r) => r.reason === 'deadline');
      expect(first).toBeDefined();
      expect(first!.runs).toEqual([expect.objectContaining({ batchId: batch.id, outcome: 'handed-off' })]);
      expect(first!.continued).toEqual([batch.id]);
      expect(outcomes.every((o) => o.ok && !o.timedOut)).toBe(true);
      const firstOutcome = outcomes[0];
      expect(firstOutcome.durationMs).toBeLessThan(10_000);
      // The continuation started within 2 s of the first invocation's end.
      expect(starts.length).toBeGreaterThanOrEqual(2);
      const firstEnd = starts[0] + firstOutcome.durationMs;
      expect(starts[1] - firstEnd).toBeLessThan(2_000);
      expect(end.runs).toBeGreaterThanOrEqual(2);
    } finally {
      await endpoint.stop({ wait: true });
      client.destroy();
    }
  }, 60_000);

  it('the scheduler dispatches a never-started batch once, however many scheduler runs overlap', async () => {
    const config = loadConfig({ DATABASE_URL: db.url, LEASEHOLD_DISPATCH_COOLDOWN_MS: '60000' });
    const invoked: unknown[] = [];
    const dispatcher = { invoke: async (e: unknown) => void invoked.push(e) };
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'sched',
      job: 'slow',
      params: { ms: 1 },
      requestKey: 'sched',
      items: [{ key: 'a' }],
    });
    const runs = await Promise.all(
      Array.from({ length: 8 }, () => runScheduler({ sql: db.connect({ max: 1 }), config, dispatcher })),
    );
    const dispatched = runs.flatMap((r) => r.dispatched).filter((id) => id === batch.id);
    expect(dispatched).toEqual([batch.id]);
    expect(invoked.filter((e) => (e as { batchId: string }).batchId === batch.id)).toHaveLength(1);
  });
});
