// Tracing's cost (issue 41's goal: a run's no-op throughput with tracing on, spans going to a
// no-op exporter, within 10 % of tracing off): on a fresh schema of its own, one run, parallel
// 64, over BENCH_TRACES_ITEMS no-op items (default 25,000), with no tracer provider registered
// and with the SDK's BasicTracerProvider registered (a batch span processor with its defaults, as
// a deployed app has, over an exporter that drops every span). One pair of runs, on and off, is
// a warm-up and is not counted; then BENCH_TRACES_PAIRS pairs (default 8), their order alternating
// (off then on, on then off) so that a drift of the machine's load weighs on both sides alike.
// Each pair gives a ratio (on / off − 1); the figure is the median ratio with its spread
// (min–max) over the pairs, beside the medians of each side's items/s and of the Node CPU time
// each item cost (user + system, this process: the runner and its client; the database's is not
// in it). About 30 s at 17,000 items/s a side. BENCH_TRACES_CONTEXT=1 registers a context manager
// on the on side as well (leasehold's AsyncLocalStorage one, as `leasehold dev` does and as the ADOT
// layer registers its own), so each attempt's work runs with its span active.
// Prints `tracing on: R items/s, off: R items/s (P %)`.
import { randomUUID } from 'node:crypto';
import { context, trace } from '@opentelemetry/api';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { Runner, createBatch } from '../src/batch/index.js';
import { LocalContextManager } from '../src/local/trace-context.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { batchOf } from './runs.js';

const ITEMS = Number(process.env.BENCH_TRACES_ITEMS ?? 25_000);
const PAIRS = Number(process.env.BENCH_TRACES_PAIRS ?? 8);
const CONTEXT = process.env.BENCH_TRACES_CONTEXT === '1';

/** Drops every span: what tracing costs leasehold, without an exporter's own work. */
const dropAll: SpanExporter = {
  export: (_spans, done) => done({ code: 0 }),
  shutdown: async () => undefined,
};

/** One run's throughput (items/s) and Node CPU time per item (µs), from takeover to finish. */
interface Measure {
  rate: number;
  cpuUs: number;
}

/** One run over ITEMS no-op items. */
async function oneRun(sql: Sql): Promise<Measure> {
  const { batch } = await createBatch(sql, batchOf(ITEMS));
  const runner = new Runner(sql, { parallel: 64 });
  const cpu = process.cpuUsage();
  const t1 = performance.now();
  await runner.takeOver(() => ({ work: async () => null, parallel: 64 }), batch.id);
  const result = await runner.running(batch.id)!;
  const ms = performance.now() - t1;
  const used = process.cpuUsage(cpu);
  if (result.outcome !== 'succeeded') throw new Error(`bench run ended ${result.outcome}`);
  await sql`delete from leasehold_batches where id = ${batch.id}`;
  await sql`vacuum leasehold_items`.catch(() => undefined);
  return { rate: ITEMS / (ms / 1000), cpuUs: (used.user + used.system) / ITEMS };
}

/** The median of `xs`: the mean of the middle two for an even count. */
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const pct = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)}`;

/** Print `tracing on: R items/s, off: R items/s (P %)`. */
export async function tracesBench(url: string): Promise<void> {
  const schema = `bench_traces_${process.pid}_${randomUUID().slice(0, 8)}`;
  const admin = connect(url, { max: 1 });
  await admin.unsafe(`create schema if not exists ${schema}`);
  const sql = connect(url, { schema, max: 4 });
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropAll)] });
  const run = async (traced: boolean): Promise<Measure> => {
    trace.disable();
    context.disable();
    if (traced) trace.setGlobalTracerProvider(provider);
    if (traced && CONTEXT) context.setGlobalContextManager(new LocalContextManager());
    try {
      return await oneRun(sql);
    } finally {
      trace.disable();
      context.disable();
    }
  };
  const on: Measure[] = [];
  const off: Measure[] = [];
  const ratios: number[] = [];
  try {
    await migrate(sql);
    // The warm-up pair: JIT, the pool's connections, the table's first pages.
    await run(false);
    await run(true);
    for (let pair = 0; pair < PAIRS; pair++) {
      const onFirst = pair % 2 === 1;
      const first = await run(onFirst);
      const second = await run(!onFirst);
      const [a, b] = onFirst ? [first, second] : [second, first];
      on.push(a);
      off.push(b);
      ratios.push(a.rate / b.rate - 1);
    }
    const [r1, r0] = [median(on.map((m) => m.rate)), median(off.map((m) => m.rate))];
    const [c1, c0] = [median(on.map((m) => m.cpuUs)), median(off.map((m) => m.cpuUs))];
    console.log(
      `tracing on: ${Math.round(r1)} items/s, off: ${Math.round(r0)} items/s (${pct(median(ratios))} %, ` +
        `pairs ${pct(Math.min(...ratios))} to ${pct(Math.max(...ratios))} %; Node CPU ${c1.toFixed(1)} µs/item on, ` +
        `${c0.toFixed(1)} off; one run, parallel 64, ${ITEMS} no-op items, spans to a no-op exporter` +
        `${CONTEXT ? ', a context manager' : ''}; ` +
        `medians of ${PAIRS} on/off pairs after a warm-up pair; goal within 10 %)`,
    );
  } finally {
    trace.disable();
    context.disable();
    await sql.end();
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}
