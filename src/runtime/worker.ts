import { randomUUID } from 'node:crypto';
import { Runner, type RunResult, type RunnerEvent } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import type { Sql } from '../store/index.js';
import type { Config } from './config.js';
import { dispatchBatch, type Dispatcher, type WorkerEvent } from './dispatch.js';

const shutdown = new AbortController();

/**
 * Ask every worker invocation in this process to stop now, as if its deadline had come: runs
 * hand off and invocations return owning nothing, without asking for continuations (local
 * mode calls this on Ctrl-C; the scheduler dispatches handed-off batches on the next start).
 */
export function requestWorkerShutdown(): void {
  shutdown.abort();
}

/** The part of a Lambda context a worker needs. */
export interface InvocationContext {
  /** Milliseconds left before the platform ends the invocation. */
  getRemainingTimeInMillis(): number;
}

/** What a worker needs, built once per container. */
export interface WorkerDeps {
  sql: Sql;
  jobs: JobRegistry;
  config: Config;
  dispatcher: Dispatcher;
  /** Structured log sink. Default: none. */
  log?: (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;
}

/** What one worker invocation did. */
export interface WorkerResult {
  processId: string;
  runs: Pick<RunResult, 'batchId' | 'outcome' | 'finishedItems'>[];
  /** Why it returned: deadline reached, or nothing left to run. */
  reason: 'deadline' | 'idle' | 'shutdown';
  /** Batches handed off at the deadline for which a continuation was requested. */
  continued: string[];
}

/**
 * One worker invocation = one process with a fresh id (DESIGN.md, "Serverless runtime"). Runs
 * the batch it was sent, takes over unowned, handed-off and stale batches (up to `maxRuns` at
 * once), and returns when nothing is left for `workerIdleMs` or at
 * `deadline = remaining time − deadlineMarginMs`. At the deadline every run hands off (beat
 * cleared) and a continuation invocation is requested for each, so the worker returns owning
 * nothing (invariant 6). Never throws for a run's failure; throws only if the store is
 * unreachable before anything was taken.
 */
export async function runWorker(event: WorkerEvent, context: InvocationContext, deps: WorkerDeps): Promise<WorkerResult> {
  const { config, jobs, sql } = deps;
  const log = deps.log ?? (() => {});
  const processId = randomUUID();
  const deadline = Date.now() + context.getRemainingTimeInMillis() - config.deadlineMarginMs;
  const runner = new Runner(sql, {
    processId,
    parallel: config.parallel,
    beatMs: config.beatMs,
    staleMs: config.staleMs,
    attempts: config.attempts,
    backoffMs: config.backoffMs,
    moveTries: config.moveTries,
    moveBackoffMs: config.moveBackoffMs,
    maxRuns: config.maxRuns,
    drainMs: config.drainMs,
    onEvent: (e: RunnerEvent) => logEvent(log, processId, e),
  });
  const results: RunResult[] = [];
  const collect = (id: string) => runner.running(id)?.then((r) => results.push(r));

  let reason: WorkerResult['reason'] = 'idle';
  try {
    if (event.batchId && Date.now() < deadline && !shutdown.signal.aborted) {
      const b = await runner.takeOver(jobs.resolve, event.batchId);
      if (b) collect(b.id);
    }
    let idleSince = Date.now();
    while (true) {
      if (shutdown.signal.aborted) {
        reason = 'shutdown';
        break;
      }
      if (Date.now() >= deadline) {
        reason = 'deadline';
        break;
      }
      while (runner.batches().length < config.maxRuns) {
        const b = await runner.takeOver(jobs.resolve);
        if (!b) break;
        collect(b.id);
      }
      if (runner.batches().length > 0) idleSince = Date.now();
      else if (Date.now() - idleSince >= config.workerIdleMs) break;
      const wait = Math.max(0, Math.min(config.workerPollMs, deadline - Date.now()));
      const runs = runner.batches().map((id) => runner.running(id)!);
      await Promise.race([sleep(wait, shutdown.signal), ...runs]);
    }
  } finally {
    const closing = await runner.close();
    for (const r of closing) if (!results.includes(r)) results.push(r);
  }
  // A run may have ended through close() and through collect(): keep one result per run.
  const byRun = new Map(results.map((r) => [r.runId, r]));
  const continued: string[] = [];
  for (const r of byRun.values()) {
    if (r.outcome !== 'handed-off' || reason === 'shutdown') continue;
    try {
      await dispatchBatch(sql, deps.dispatcher, r.batchId);
      continued.push(r.batchId);
    } catch (error) {
      // The scheduler dispatches handed-off batches too; this only makes it sooner.
      log('warn', 'continuation invoke failed', { processId, batchId: r.batchId, error: String(error) });
    }
  }
  const runs = [...byRun.values()].map(({ batchId, outcome, finishedItems }) => ({ batchId, outcome, finishedItems }));
  log('info', 'worker returning', { processId, reason, runs, continued });
  return { processId, runs, reason, continued };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function logEvent(log: NonNullable<WorkerDeps['log']>, processId: string, e: RunnerEvent): void {
  switch (e.type) {
    case 'run-started':
      return log('info', e.takeover ? 'batch taken over' : 'batch started', { processId, batchId: e.batchId, runId: e.runId });
    case 'run-ended':
      return log(e.result.outcome === 'store-error' ? 'error' : 'info', `run ${e.result.outcome}`, {
        processId,
        batchId: e.result.batchId,
        runId: e.result.runId,
        finishedItems: e.result.finishedItems,
        error: e.result.error?.message,
      });
    case 'store-error':
      return log('warn', 'store error', { processId, batchId: e.batchId, tries: e.tries, error: String(e.error) });
    case 'unknown-job':
      return log('error', 'batch has a job this worker does not know', { processId, batchId: e.batchId, job: e.job });
  }
}

/** Make a fresh process id (exported for callers that label invocations). */
export const newProcessId = (): string => randomUUID();
