// The README's demo twice (part of `npm run bench`; `BENCH_ONLY=demo` runs only this): what
// `npm start` runs (`node scripts/build.mjs --if-stale`, then `leasehold dev --demo node_modules`),
// with `--exit-when-idle` so it ends when its checksum batch has, twice on the same embedded
// database folder (a fresh one in the OS temp dir, removed after), with an `ANALYZE` of that
// database in between: the second demo runs beside the first one's finished batch and the
// statistics it left, as a user's second `npm start` does. Goal: the second at most 1.2× the
// first. The figures are the batch's own time (created to finished, from the demo's JSON summary),
// and the wall time of each `leasehold dev` from spawn to exit. Never uses DATABASE_URL.
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startEmbedded } from '../src/local/embedded/index.js';
import { connect } from '../src/store/index.js';

const ROOT = resolve(import.meta.dirname, '..');

/** Run `node args…` in `cwd`; resolves to its stdout, or rejects with its stderr's tail unless it exits 0. */
function node(args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', fail);
    child.on('exit', (code, signal) =>
      code === 0 ? done(out) : fail(new Error(`node ${args.join(' ')} ended ${code ?? signal}: ${err.slice(-2000)}`)),
    );
  });
}

/** One demo in `dir`: the batch's seconds (from the summary line) and the wall time, ms. */
async function demoOnce(dir: string, env: NodeJS.ProcessEnv): Promise<{ seconds: number; wallMs: number; done: number }> {
  const t0 = performance.now();
  const out = await node(
    [join(ROOT, 'bin', 'leasehold.js'), 'dev', '--demo', join(ROOT, 'node_modules'), '--exit-when-idle', '--port', '0'],
    dir,
    env,
  );
  const wallMs = performance.now() - t0;
  const summary = JSON.parse(out.trim().split('\n').at(-1)!) as { seconds: number; done: number; failed: number };
  if (summary.done === 0) throw new Error(`bench demo: the demo batch did nothing: ${out}`);
  return { seconds: summary.seconds, wallMs, done: summary.done };
}

/** `demo twice: first N s; second M s after ANALYZE (R×; goal ≤ 1.2×)`. */
export async function demoBench(): Promise<void> {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  await node([join(ROOT, 'scripts', 'build.mjs'), '--if-stale'], ROOT, env);
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-demo-'));
  // Run as root, the embedded server runs as OS user postgres, which must be able to enter it.
  await chmod(dir, 0o755);
  try {
    const first = await demoOnce(dir, env);
    // ANALYZE between the two, on the demo's own embedded server (not running now: dev stopped it).
    const db = await startEmbedded({ dir: join(dir, '.leasehold', 'pgdata'), port: 0 });
    try {
      const sql = connect(db.url, { max: 1 });
      await sql`analyze`;
      await sql.end();
    } finally {
      await db.stop();
    }
    const second = await demoOnce(dir, env);
    const s = (x: number) => x.toFixed(1);
    console.log(
      `demo twice: first ${s(first.seconds)} s; second ${s(second.seconds)} s after ANALYZE (${(second.seconds / first.seconds).toFixed(2)}×; goal ≤ 1.2×)` +
        ` (checksum batch of ${first.done.toLocaleString('en-US')} files in node_modules, created to finished; ` +
        `wall time of \`leasehold dev --demo node_modules --exit-when-idle\` ${s(first.wallMs / 1000)} s and ${s(second.wallMs / 1000)} s)`,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
