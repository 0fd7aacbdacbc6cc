// Checksum benchmark (part of `npm run bench`; `BENCH_ONLY=checksum` runs only this): 4,000 files
// of 1–64 KiB in a temporary folder (removed after), hashed
//   1. by plain Node, 16 files at a time (`readFile` + SHA-256, no database): the reference;
//   2. by the `checksum` job's item work alone, 16 at a time (no runner, no database);
//   3. by a `checksum` batch through the library, end to end: expand + `createBatch`, then one
//      `Runner` (default options; the job's own `parallel`) from takeover until the batch finishes,
//      in a fresh schema and in the run's lived-in schema (bench/sides.ts), in turn every round.
// Prints the medians of BENCH_ROUNDS rounds (default 3) and 3 as a ratio of 1.
import { createHash, randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Runner, createBatch } from '../src/batch/index.js';
import { checksum, defaultJobContext, defaultRegistry } from '../src/jobs/index.js';
import type { Sql } from '../src/store/index.js';
import { benchSchema } from './schema.js';
import { inTurn, median, perSide, timeLine, type Side } from './sides.js';

// What a job's item gets from its run for heartbeats and checkpoints, when the job is called directly.
const noWait = () => Promise.reject(new Error('the bench item cannot wait'));
const noBeats = {
  heartbeat: () => {},
  checkpoint: async () => {},
  checkpointed: undefined,
  waitForCallback: noWait,
  sleep: noWait,
  sleepUntil: noWait,
  callback: undefined,
  slept: false,
};

const FILES = 4_000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Files per folder: the tree is 40 folders of 100 files. */
const PER_DIR = 100;

const s = (ms: number) => (ms / 1000).toFixed(2);

/** Run `work` over `items`, `n` at a time. */
async function pool<T>(items: T[], n: number, work: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) await work(items[next++]);
    }),
  );
}

/** Write FILES files of 1–64 KiB (sizes from a fixed-seed generator) under `dir`; returns their paths relative to it. */
async function makeFiles(dir: string): Promise<string[]> {
  let seed = 42;
  const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const keys = Array.from(
    { length: FILES },
    (_, i) => `d${String(Math.floor(i / PER_DIR)).padStart(2, '0')}/f${String(i).padStart(4, '0')}.bin`,
  );
  for (let d = 0; d < FILES / PER_DIR; d++) await mkdir(join(dir, `d${String(d).padStart(2, '0')}`));
  const sizes = keys.map(() => 1024 + Math.floor(random() * 63 * 1024));
  await pool(
    keys.map((k, i) => [k, sizes[i]] as const),
    16,
    ([key, size]) => writeFile(join(dir, key), Buffer.alloc(size, key)),
  );
  return keys;
}

/** One `checksum` batch over `keys` under `dir` on `sql`, end to end: ms of the start, ms in all. */
async function batchOnce(
  sql: Sql,
  jobs: ReturnType<typeof defaultRegistry>,
  dir: string,
): Promise<{ start: number; all: number }> {
  const t0 = performance.now();
  const expanded = await jobs.expand('checksum', { dir });
  const { batch } = await createBatch(sql, {
    tenant: 'bench',
    datasource: randomUUID(),
    job: 'checksum',
    params: expanded.params,
    requestKey: randomUUID(),
    items: expanded.items,
  });
  const t1 = performance.now();
  const runner = new Runner(sql);
  await runner.takeOver(jobs.resolve, batch.id);
  const result = await runner.running(batch.id)!;
  const t2 = performance.now();
  await runner.close();
  if (result.outcome !== 'succeeded' || result.finishedItems !== FILES)
    throw new Error(`bench checksum run ended ${result.outcome}`);
  await sql`delete from leasehold_batches where id = ${batch.id}`;
  return { start: t1 - t0, all: t2 - t0 };
}

/** `checksum of 4,000 files: fresh S s; lived-in T s (R× fresh); plain hashing P s (fresh F×, lived-in L×)`, and where its time goes. */
export async function checksumBench(url: string, lived: Side): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-checksum-'));
  const { schema, sql, drop } = await benchSchema(url, 'bench_checksum', 4);
  const sides: readonly [Side, Side] = [{ name: 'fresh', schema, sql }, lived];
  try {
    const keys = await makeFiles(dir);
    const jobs = defaultRegistry(defaultJobContext({ allowedRoots: [dir] }));
    const ctx = jobs.context();
    const plain: number[] = [];
    const itemWork: number[] = [];
    const batchRun = perSide();
    const starts = perSide();
    for (let round = 0; round < ROUNDS; round++) {
      let t0 = performance.now();
      await pool(keys, 16, async (key) =>
        createHash('sha256')
          .update(await readFile(join(dir, key)))
          .digest('hex'),
      );
      plain.push(performance.now() - t0);

      const signal = new AbortController().signal;
      setMaxListeners(0, signal);
      t0 = performance.now();
      await pool(keys, 16, (key) =>
        checksum.run(
          { key, input: null, params: { dir }, attempt: 1, ...noBeats, signal, tenant: 'bench', batchId: 'bench' },
          ctx,
        ),
      );
      itemWork.push(performance.now() - t0);

      for (const side of inTurn(round, sides)) {
        const r = await batchOnce(side.sql, jobs, dir);
        starts[side.name].push(r.start);
        batchRun[side.name].push(r.all);
      }
    }
    const parallel = jobs.get('checksum').parallel;
    const x = (side: 'fresh' | 'lived-in') => (median(batchRun[side]) / median(plain)).toFixed(1);
    console.log(
      timeLine(
        `checksum of ${FILES.toLocaleString('en-US')} files`,
        batchRun,
        's',
        `; plain hashing ${s(median(plain))} s (fresh ${x('fresh')}×, lived-in ${x('lived-in')}× plain hashing)`,
      ),
    );
    const parts = (side: 'fresh' | 'lived-in') =>
      `${side}: start ${s(median(starts[side]))} s, run ${s(median(batchRun[side]) - median(starts[side]))} s`;
    console.log(
      `  checksum parts (library, parallel ${parallel ?? 'default'}, median of ${ROUNDS}): plain hashing 16 at a time ${s(median(plain))} s;` +
        ` the job's item work alone 16 at a time ${s(median(itemWork))} s; ${parts('fresh')}; ${parts('lived-in')}`,
    );
  } finally {
    await drop();
    await rm(dir, { recursive: true, force: true });
  }
}
