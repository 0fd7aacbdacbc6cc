// Start benchmark (part of `npm run bench`; `BENCH_ONLY=start` runs only this): `createBatch`
// of 200,000 small items (keys `000000`…, no input) through the library, from the call to its
// answer, in a schema of its own. Prints the median of BENCH_ROUNDS rounds (default 3).
import { randomUUID } from 'node:crypto';
import { createBatch, type NewBatch } from '../src/batch/index.js';
import { benchSchema } from './schema.js';

const ITEMS = 200_000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** `start of 200,000 items: S s`. */
export async function startBench(url: string): Promise<void> {
  const { sql, drop } = await benchSchema(url, 'bench_start', 2);
  try {
    const times: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const batch: NewBatch = {
        tenant: 'bench',
        datasource: randomUUID(),
        job: 'noop',
        params: {},
        requestKey: randomUUID(),
        items: Array.from({ length: ITEMS }, (_, i) => ({ key: String(i).padStart(6, '0') })),
      };
      const t0 = performance.now();
      const { batch: started } = await createBatch(sql, batch);
      times.push(performance.now() - t0);
      if (started.total !== ITEMS) throw new Error(`bench start stored ${started.total} items`);
      // Keep the schema small between rounds.
      await sql`delete from leasehold_batches where id = ${started.id}`;
    }
    const s = (ms: number) => (ms / 1000).toFixed(2);
    console.log(
      `start of ${ITEMS.toLocaleString('en-US')} items: ${s(median(times))} s (createBatch, median of ${ROUNDS}; best ${s(Math.min(...times))} s)`,
    );
  } finally {
    await drop();
  }
}
