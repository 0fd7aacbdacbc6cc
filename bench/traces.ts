// Tracing's cost (issue 41's goal: a run's no-op throughput with tracing on, spans going to a
// no-op exporter, within 10 % of tracing off): on a fresh schema of its own, one run, parallel
// 64, over BENCH_ITEMS no-op items (as the batch part's first figure), with no tracer provider
// registered and with the SDK's BasicTracerProvider (a batch span processor, as in production, over an exporter
// that drops every span) registered, in turn in every round; medians of BENCH_ROUNDS rounds.
// Prints `tracing on: R items/s, off: R items/s (P %)`.
import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { Runner, createBatch } from '../src/batch/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';
import { median } from './sides.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** Drops every span: what tracing costs leasehold, without an exporter's own work. */
const dropAll: SpanExporter = {
  export: (_spans, done) => done({ code: 0 }),
  shutdown: async () => undefined,
};

/** One run over ITEMS no-op items: items/s from takeover to finish. */
async function oneRun(sql: Sql): Promise<number> {
  const { batch } = await createBatch(sql, batchOf(ITEMS));
  const runner = new Runner(sql, { parallel: 64 });
  const t1 = performance.now();
  await runner.takeOver(() => ({ work: async () => null, parallel: 64 }), batch.id);
  const result = await runner.running(batch.id)!;
  const rate = ITEMS / ((performance.now() - t1) / 1000);
  if (result.outcome !== 'succeeded') throw new Error(`bench run ended ${result.outcome}`);
  await sql`delete from leasehold_batches where id = ${batch.id}`;
  await sql`vacuum leasehold_items`.catch(() => undefined);
  return rate;
}

/** Print `tracing on: R items/s, off: R items/s (P %)`. */
export async function tracesBench(url: string): Promise<void> {
  const schema = `bench_traces_${process.pid}_${randomUUID().slice(0, 8)}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create schema if not exists ${schema}`);
  const sql = connect(url, { schema, max: 4 });
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropAll)] });
  const on: number[] = [];
  const off: number[] = [];
  try {
    await migrate(sql);
    for (let round = 0; round < ROUNDS; round++) {
      trace.disable();
      off.push(await oneRun(sql));
      trace.setGlobalTracerProvider(provider);
      on.push(await oneRun(sql));
      trace.disable();
    }
    const [r1, r0] = [median(on), median(off)];
    console.log(
      `tracing on: ${Math.round(r1)} items/s, off: ${Math.round(r0)} items/s (${(((r1 - r0) / r0) * 100).toFixed(1)} %; ` +
        `one run, parallel 64, ${ITEMS} no-op items, spans to a no-op exporter; medians of ${ROUNDS} rounds; goal within 10 %)`,
    );
  } finally {
    trace.disable();
    await sql.end();
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}
