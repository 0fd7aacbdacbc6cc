// `leasehold dev` as a child process, for tests that run an app the way a user does: started
// with a command, talked to through its API, stopped with Ctrl-C (SIGINT).
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiClient, type ApiBatch } from '../../src/client/index.js';

/** A running `leasehold dev`. */
export interface DevProcess {
  /** The API's base URL, as the stack printed it. */
  url: string;
  api: ApiClient;
  /** What it wrote to stderr so far. */
  stderr(): string;
  /** What it wrote to stdout so far. */
  stdout(): string;
  /** Ctrl-C, then wait for it to exit (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<{ code: number | null; stderr: string; stdout: string }>;
}

const running = new Set<ChildProcess>();

/** Kill what is still running (afterAll). */
export function killDevProcesses(): void {
  for (const child of running) child.kill('SIGKILL');
}

/**
 * Start `command args…` (a `leasehold dev …`) in `cwd` and wait until it prints its API's URL.
 * @throws {Error} it exits or prints nothing usable within `startMs`; the message holds its output.
 */
export async function startDev(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; startMs?: number },
): Promise<DevProcess> {
  const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  let stderr = '';
  let stdout = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      running.delete(child);
      resolve(code);
    }),
  );
  let exitCode: number | null | undefined;
  void exited.then((c) => (exitCode = c));
  const until = Date.now() + (options.startMs ?? 60_000);
  let url: string | undefined;
  while (!url) {
    url = /^\s*api\s+(http:\/\/127\.0\.0\.1:\d+)/m.exec(stderr)?.[1];
    if (url && /serving|demo:/.test(stderr)) break;
    url = undefined;
    if (exitCode !== undefined || Date.now() > until) {
      child.kill('SIGKILL');
      throw new Error(`leasehold dev did not start (exit ${exitCode}):\n${stderr}${stdout}`);
    }
    await sleep(50);
  }
  return {
    url,
    api: new ApiClient(url),
    stderr: () => stderr,
    stdout: () => stdout,
    async stop(timeoutMs = 30_000) {
      child.kill('SIGINT');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return { code, stderr, stdout };
    },
  };
}

/** Poll the batch until it is no longer open (at most `timeoutMs`). */
export async function finishedBatch(api: ApiClient, id: string, timeoutMs = 60_000): Promise<ApiBatch> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const b = await api.getBatch(id);
    if (b.status !== 'open') return b;
    if (Date.now() > until) throw new Error(`batch ${id} still open after ${timeoutMs} ms: ${JSON.stringify(b.counts)}`);
    await sleep(100);
  }
}

/** Every item of the batch: key → output, and the states seen. */
export async function outputs(api: ApiClient, id: string): Promise<{ byKey: Record<string, unknown>; states: Set<string> }> {
  const byKey: Record<string, unknown> = {};
  const states = new Set<string>();
  for await (const item of api.items(id)) {
    byKey[item.key] = item.output;
    states.add(item.state);
  }
  return { byKey, states };
}
