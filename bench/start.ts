// Start benchmark (part of `npm run bench`; `BENCH_ONLY=start` runs only this): `createBatch`
// of 200,000 small items (keys `000000`…, no input) through the library, from the call to its
// answer, in a fresh schema of its own and in the run's lived-in schema (bench/sides.ts), the two
// in turn in every round. Prints the medians of BENCH_ROUNDS rounds (default 3) on one line.
import { randomUUID } from 'node:crypto';
import { createBatch, type NewBatch } from '../src/batch/index.js';
import type { Sql } from '../src/store/index.js';
import { benchSchema } from './schema.js';
import { inTurn, perSide, timeLine, type Side } from './sides.js';

const ITEMS = 200_000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

/** One start of ITEMS items on `sql`: ms from the call to its answer; the batch is deleted after. */
async function startOnce(sql: Sql): Promise<number> {
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
  const t = performance.now() - t0;
  if (started.total !== ITEMS) throw new Error(`bench start stored ${started.total} items`);
  // Keep the schema small between rounds.
  await sql`delete from leasehold_batches where id = ${started.id}`;
  return t;
}

/** `start of 200,000 items: fresh S s; lived-in T s (R× fresh)`; `lived` is the run's lived-in schema. */
export async function startBench(url: string, lived: Side): Promise<void> {
  const { schema, sql, drop } = await benchSchema(url, 'bench_start', 2);
  const sides: readonly [Side, Side] = [{ name: 'fresh', schema, sql }, lived];
  try {
    const times = perSide();
    for (let round = 0; round < ROUNDS; round++) {
      for (const side of inTurn(round, sides)) times[side.name].push(await startOnce(side.sql));
    }
    console.log(timeLine(`start of ${ITEMS.toLocaleString('en-US')} items`, times, 's', ` (createBatch, median of ${ROUNDS})`));
  } finally {
    await drop();
  }
}
