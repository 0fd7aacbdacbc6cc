// One process of the fan-out bench (bench/fanout.ts): a Node process with one Runner and its own
// pool, which joins one batch as one of its runs. Started by the bench with FANOUT_URL,
// FANOUT_SCHEMA, FANOUT_BATCH, FANOUT_PARALLEL and FANOUT_WORK (`timer`: each item awaits a
// 20 ms timer; `noop`: nothing); prints `ready` once connected, takes over the
// batch when it reads `go` on stdin, and prints its RunResult (outcome, items, statements) and
// when it joined and ended (ms after `go`) and the CPU time it used meanwhile (ms, user + system) as one JSON line when its run has ended.
import { createInterface } from 'node:readline';
import { Runner, type Executor } from '../src/batch/index.js';
import { connect } from '../src/store/index.js';

const env = (name: string) => {
  const v = process.env[name];
  if (!v) throw new Error(`bench/fanout-child.ts: ${name} is not set`);
  return v;
};
const batchId = env('FANOUT_BATCH');
const parallel = Number(env('FANOUT_PARALLEL'));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const executor: Executor =
  env('FANOUT_WORK') === 'noop' ? { work: async () => null, parallel } : { work: () => sleep(20).then(() => null), parallel };

const sql = connect(env('FANOUT_URL'), { max: 4, schema: env('FANOUT_SCHEMA'), applicationName: 'leasehold-fanbench' });
await sql`select 1`;
// BENCH_FANOUT_QUEUE_DEPTH (inherited from the bench) sets the runner's queueDepth; default its own.
const depth = process.env.BENCH_FANOUT_QUEUE_DEPTH;
const runner = new Runner(sql, { parallel, ...(depth ? { queueDepth: Number(depth) } : {}) });
console.log('ready');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) if (line.trim() === 'go') break;
lines.close();
const go = performance.now();
const cpu0 = process.cpuUsage();
// A takeover may find nothing while other runs join at the same instant (their tenant row is
// held for one statement): try again until taken, or until the batch has ended.
let taken = await runner.takeOver(() => executor, batchId);
for (let i = 0; !taken && i < 50; i++) {
  await sleep(20);
  taken = await runner.takeOver(() => executor, batchId);
}
const takenMs = performance.now() - go;
const result = taken ? await runner.running(batchId)! : undefined;
const endedMs = performance.now() - go;
const cpu = process.cpuUsage(cpu0);
const cpuMs = (cpu.user + cpu.system) / 1000;
console.log(
  JSON.stringify(
    result
      ? { outcome: result.outcome, finishedItems: result.finishedItems, statements: result.statements, takenMs, endedMs, cpuMs }
      : { outcome: 'not-taken', finishedItems: 0, statements: 0, takenMs, endedMs, cpuMs },
  ),
);
await sql.end();
