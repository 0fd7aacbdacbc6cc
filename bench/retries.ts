// Retry-wave benchmark (part of `npm run bench`; `BENCH_ONLY=retries` runs only this): a
// downstream blip fails every item of a batch at once, and the retries come back spread over the
// backoff interval (full jitter: docs/design.md, "Attempts, backoff, failures"). One run, parallel
// 100, over BENCH_RETRY_ITEMS (default 1,000) items whose first attempt fails and whose second
// passes, backoff BENCH_RETRY_BACKOFF_MS (default 10,000 ms), in a fresh schema of its own: the
// spread is the jitter's, and history in the database does not enter it. It prints one wave as the
// downstream saw it: each item's wait from its failure to its retry's arrival, as a histogram over
// the interval in tenths, and the busiest 100 ms of the first wave and of the retries.
import { Runner, createBatch } from '../src/batch/index.js';
import { histogram, histogramLine, mostInWindow } from '../test/support/random.js';
import { batchOf } from './runs.js';
import { benchSchema } from './schema.js';

const ITEMS = Number(process.env.BENCH_RETRY_ITEMS ?? 1_000);
const BACKOFF_MS = Number(process.env.BENCH_RETRY_BACKOFF_MS ?? 10_000);

/** `retry wave, N items failed at once …: waits in tenths of the interval ▁▂…█ counts; …` */
export async function retriesBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_retries', 4);
  try {
    const failedAt = new Map<string, number>();
    const retriedAt = new Map<string, number>();
    const { batch } = await createBatch(sql, batchOf(ITEMS));
    const runner = new Runner(sql, { parallel: 100, attempts: 2, backoffMs: BACKOFF_MS, maxBackoffMs: BACKOFF_MS });
    await runner.takeOver(
      () => ({
        work: async ({ key, attempt }) => {
          if (attempt === 1) {
            failedAt.set(key, performance.now());
            throw new Error('downstream unavailable');
          }
          retriedAt.set(key, performance.now());
          return null;
        },
      }),
      batch.id,
    );
    const result = await runner.running(batch.id)!;
    if (result.outcome !== 'succeeded' || retriedAt.size !== ITEMS) {
      throw new Error(`bench retry wave ended ${result.outcome} with ${retriedAt.size} retries`);
    }
    const failures = [...failedAt.values()];
    const waveMs = Math.max(...failures) - Math.min(...failures);
    const waits = [...retriedAt].map(([key, t]) => t - failedAt.get(key)!);
    const tenths = histogram(waits, BACKOFF_MS, 10);
    const busiest = Math.max(...tenths);
    const fmt = (n: number) => n.toLocaleString('en-US');
    console.log(
      `retry wave, ${fmt(ITEMS)} items failing at once (within ${Math.round(waveMs)} ms), backoff interval ${BACKOFF_MS / 1000} s, ` +
        `full jitter: waits until the retry arrived, in tenths of the interval: ${histogramLine(tenths)}; ` +
        `busiest tenth ${((100 * busiest) / ITEMS).toFixed(1)} % of the wave (even: 10 %); ` +
        `busiest 100 ms: first wave ${fmt(mostInWindow(failures, 100))}, retries ${fmt(mostInWindow([...retriedAt.values()], 100))}`,
    );
  } finally {
    await drop();
  }
}
