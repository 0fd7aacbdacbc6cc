// Finish to event (issue 21's goal: the event arrives within 1 s of the finish, locally): on a
// fresh schema of its own, batches of 10 no-op items, each run by a Runner whose run-ended hook
// sends the batch's events at once as a worker does (runWorker's `sendEvents`: sendEvents with
// the batch id), through the real @aws-sdk/client-eventbridge to leasehold dev's local PutEvents
// endpoint (AWS_ENDPOINT_URL_EVENTBRIDGE). The figure: arrival at the endpoint (this process's
// clock) minus the batch's finished_at (the database's clock, the same machine), median and
// worst of BENCH_EVENTS_BATCHES (default 20) batches one after the other.
import { randomUUID } from 'node:crypto';
import { Runner, getBatch, type BatchFinishedDetail } from '../src/batch/index.js';
import { createEventsEndpoint, localEventsEnv } from '../src/local/index.js';
import { EventBridgePublisher, sendEvents } from '../src/runtime/events.js';
import { silentLog } from '../src/log.js';
import { connect, migrate } from '../src/store/index.js';
import { median } from './sides.js';

const BATCHES = Number(process.env.BENCH_EVENTS_BATCHES ?? 20);

export async function eventsBench(url: string): Promise<void> {
  const schema = `bench_events_${process.pid}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create schema if not exists ${schema}`);
  const sql = connect(url, { schema, max: 6 });
  const arrived = new Map<string, number>();
  const bus = await createEventsEndpoint({
    deliver: async () => undefined,
    onEvent: (event) => arrived.set((event.detail as BatchFinishedDetail).batchId, Date.now()),
  });
  Object.assign(process.env, localEventsEnv(bus.url));
  // The SDK's notice that its 2027 releases need Node 22 is noise here.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  try {
    await migrate(sql);
    const publisher = new EventBridgePublisher('leasehold-bench');
    const sends: Promise<unknown>[] = [];
    const runner = new Runner(sql, {
      parallel: 4,
      onEvent: (e) => {
        if (e.type === 'run-ended' && (e.result.outcome === 'succeeded' || e.result.outcome === 'failed')) {
          sends.push(sendEvents({ sql, publisher, webhookSecret: undefined, log: silentLog }, { batchId: e.result.batchId }));
        }
      },
    });
    // One batch first, unmeasured: the SDK's first load and connection.
    const lags: number[] = [];
    for (let i = 0; i <= BATCHES; i++) {
      const items = Array.from({ length: 10 }, (_, k) => ({ key: `k${k}`, input: {} }));
      const { batch } = await runner.start(
        { tenant: 'bench', datasource: 'events', job: 'noop', params: {}, requestKey: randomUUID(), items },
        {},
        async () => null,
      );
      await runner.running(batch.id);
      const until = Date.now() + 10_000;
      while (!arrived.has(batch.id) && Date.now() < until) await new Promise((r) => setTimeout(r, 1));
      const finished = (await getBatch(sql, batch.id))!.finishedAt!.getTime();
      const at = arrived.get(batch.id);
      if (at === undefined) throw new Error(`no event for batch ${batch.id} within 10 s`);
      if (i > 0) lags.push(at - finished);
    }
    await Promise.allSettled(sends);
    await runner.close();
    const worst = Math.max(...lags);
    console.log(
      `finish to event (real SDK client, local PutEvents): median ${median(lags).toFixed(0)} ms, worst ${worst.toFixed(0)} ms over ${lags.length} batches; goal ≤ 1,000 ms`,
    );
  } finally {
    await bus.close();
    await sql.end({ timeout: 5 });
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}
