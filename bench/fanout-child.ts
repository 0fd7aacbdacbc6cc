// One process of the fan-out bench (bench/fanout.ts): a Node process with one Runner and its own
// pool, which joins one batch as one of its runs. Started by the bench with FANOUT_URL,
// FANOUT_SCHEMA, FANOUT_BATCH, FANOUT_PARALLEL and FANOUT_WORK (`timer`: each item awaits a
// 20 ms timer; `noop`: nothing); prints `ready` once connected, takes over the
// batch when it reads `go` on stdin, and prints its RunResult (outcome, items, statements) and
// when it joined and ended (ms after `go`), the CPU time it used meanwhile (ms, user + system)
// and the statements its pool sent meanwhile by kind as one JSON line when its run has ended.
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
// The statements this process sends after `go`, by kind (postgres.js reads `debug` for every
// statement it sends: connection id, text): the cost line's breakdown.
const kinds: Record<string, number> = {};
let counting = false;
(sql.options as { debug?: unknown }).debug = (_connection: unknown, text: string) => {
  if (!counting) return;
  const kind = kindOf(text);
  kinds[kind] = (kinds[kind] ?? 0) + 1;
};
// BENCH_FANOUT_QUEUE_DEPTH (inherited from the bench) sets the runner's queueDepth; default its own.
const depth = process.env.BENCH_FANOUT_QUEUE_DEPTH;
const runner = new Runner(sql, { parallel, ...(depth ? { queueDepth: Number(depth) } : {}) });
console.log('ready');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) if (line.trim() === 'go') break;
lines.close();
const go = performance.now();
counting = true;
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
counting = false;
console.log(
  JSON.stringify(
    result
      ? {
          outcome: result.outcome,
          finishedItems: result.finishedItems,
          statements: result.statements,
          takenMs,
          endedMs,
          cpuMs,
          kinds,
        }
      : { outcome: 'not-taken', finishedItems: 0, statements: 0, takenMs, endedMs, cpuMs, kinds },
  ),
);
await sql.end();

/**
 * A statement's kind: the move + claim and the beat by name, any other by the table it writes
 * first (else the one it reads) and its first words.
 */
function kindOf(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  if (/\bpicked as \(/.test(t) && /\bmoved as \(/.test(t)) return 'move + claim';
  if (/^update leasehold_runs r set beat_at = now\(\)/.test(t)) return 'beat';
  const write = /\b(?<!for )(update|insert into|delete from) (\w+)/i.exec(t);
  const read = /\bfrom (\w+)/i.exec(t);
  return `${write ? `${write[1]!.toLowerCase()} ${write[2]}` : `read ${read?.[1] ?? '-'}`}: ${t.slice(0, 50)}`;
}
