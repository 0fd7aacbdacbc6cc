import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { systemClock } from '../clock.js';
import { dispatchBatch, Runner, type Dispatcher, type RunResult, type RunnerEvent, type WorkerEvent } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import { invocationLive, planInvocations, type LeaserEvent, type ProcessRole, type Reconciler } from '../lease/index.js';
import { withTimeout, type Sql } from '../store/index.js';
import type { Config } from './config.js';
import { ReconnectingLeaser } from './heartbeat.js';
import type { Log } from '../log.js';
import type { WorkerHooks } from './metrics.js';

const shutdown = new AbortController();

/**
 * Ask every worker invocation in this process to stop now, as if its deadline had come: runs
 * hand off, units are released and invocations return owning nothing, without asking for
 * continuations (local mode calls this on Ctrl-C; the scheduler dispatches handed-off batches
 * and invokes workers again on the next start).
 */
export function requestWorkerShutdown(): void {
  shutdown.abort();
}

/** The part of a Lambda context a worker needs. */
export interface InvocationContext {
  /** Milliseconds left before the platform ends the invocation. */
  getRemainingTimeInMillis(): number;
}

/** What acts on the units a worker process owns; `close()` stops it for good. */
export type UnitReconciler = Reconciler & { close(): Promise<void> };

/** What a worker needs, built once per container. */
export interface WorkerDeps {
  sql: Sql;
  jobs: JobRegistry;
  config: Config;
  dispatcher: Dispatcher;
  /**
   * Builds the reconciler of one process's units (the unit jobs); `log` is the invocation's.
   * Default: units are held, nothing runs.
   */
  units?: (processId: string, log: Log, leaseValid?: () => boolean) => UnitReconciler;
  /** Structured log of the invocation; the worker scopes it to its process (`processId` on every line). */
  log: Log;
  /** Observers of leases, runs and items (metrics). Default: none. */
  hooks?: WorkerHooks;
  /**
   * The invocation's deadline signal (the invocation middleware aborts it at remaining time −
   * margin): when it aborts, the worker stops as at its deadline. The worker computes the same
   * deadline from its context; this lets the caller stop it earlier. Default: none.
   */
  signal?: AbortSignal;
}

/** What one worker invocation did. */
export interface WorkerResult {
  processId: string;
  runs: Pick<RunResult, 'batchId' | 'outcome' | 'finishedItems'>[];
  /** `fleet`: counted against the desired count, owned units; `batch`: sent for a batch. */
  role: ProcessRole;
  /**
   * Why it returned: deadline reached, nothing left to run, retired (the scheduler asked: the
   * fleet was above the desired count), or shut down (local Ctrl-C).
   */
  reason: 'deadline' | 'idle' | 'retired' | 'shutdown';
  /** Batches handed off at the deadline for which a continuation was requested. */
  continued: string[];
  /** Workers invoked at the deadline to keep the desired count of live processes. */
  replacements: number;
}

const idleUnits: UnitReconciler = {
  unitsGained: () => {},
  unitsLost: () => {},
  inFlight: () => 0,
  close: async () => {},
};

/**
 * One worker invocation = one process with a fresh id (docs/design.md, "Serverless runtime"):
 * - its role: a worker sent for a batch (`{ batchId }` without `invocationId`: dispatches and
 *   continuations) is a `batch` process — listed, but owning no unit and not counted against
 *   the desired count; every other worker (`{ invocationId }` from the scheduler or a
 *   replacement) is a `fleet` process;
 * - a fleet process heartbeats and rebalances its fair share of units through a leaser (their
 *   jobs run through `deps.units`), and marks its invocation confirmed on its first heartbeat;
 * - runs the batch it was sent and takes over unowned, handed-off and stale batches (up to
 *   `maxRuns` at once);
 * - returns after `workerIdleMs` with no batch to run when it has no unit work (a batch
 *   process, or no unit with weight); when the scheduler asks it to retire (the fleet is above
 *   the desired count; learnt on its next heartbeat); or at
 *   `deadline = remaining time − deadlineMarginMs`. Then every run hands off (beat cleared;
 *   continuations requested only at the deadline), every unit is released, the process row
 *   deleted, and — at the deadline, when units need processes — a replacement is invoked to
 *   keep the desired count. The worker returns owning nothing (invariant 6).
 * Never throws for a run's or a unit's failure.
 */
export async function runWorker(event: WorkerEvent, context: InvocationContext, deps: WorkerDeps): Promise<WorkerResult> {
  const { config, jobs, sql } = deps;
  const hooks = deps.hooks ?? {};
  const processId = randomUUID();
  const log = deps.log.with({ processId });
  const role: ProcessRole = event.batchId && !event.invocationId ? 'batch' : 'fleet';
  const deadline = Date.now() + context.getRemainingTimeInMillis() - config.deadlineMarginMs;
  // Wakes the loop's waits on shutdown, at the deadline signal or on retirement; listeners
  // removed at the end, since `shutdown` lives as long as the container.
  const stopping = new AbortController();
  const stop = stopping.signal;
  const onStop = () => stopping.abort();
  for (const s of [shutdown.signal, deps.signal]) {
    if (s?.aborted) stopping.abort();
    else s?.addEventListener('abort', onStop, { once: true });
  }
  const pastDeadline = () => Date.now() >= deadline || deps.signal?.aborted === true;
  const resolve = jobs.resolve;
  const runner = new Runner(sql, {
    processId,
    ...config.runner,
    onEvent: (e: RunnerEvent) => {
      hooks.runner?.(e);
      // Item outcomes as the runner stored them: a result whose move never landed is not counted.
      if (e.type === 'item-ended') hooks.item?.(e.outcome);
      else logRunnerEvent(log, e);
    },
  });
  // Unit jobs check the lease by the process's own clock before acting (see Leaser.leaseValid).
  let leaseValid = () => false;
  const units = deps.units?.(processId, log, () => leaseValid()) ?? idleUnits;
  const leaser = new ReconnectingLeaser(
    sql,
    {
      ...config.lease,
      processId,
      role,
      hostname: process.env.AWS_LAMBDA_LOG_STREAM_NAME ?? hostname(),
      version: process.env.AWS_LAMBDA_FUNCTION_VERSION ?? process.env.npm_package_version ?? 'local',
      // The scheduler sweeps; a worker never needs to.
      sweepIntervalMs: 0,
    },
    units,
    {
      hooks: hooks.lease,
      onEvent: (e: LeaserEvent) => {
        logLeaserEvent(log, e);
        // Wake the loop: a retiring process leaves at once.
        if (e.type === 'retiring') stopping.abort();
      },
    },
  );
  leaseValid = () => leaser.leaseValid();
  leaser.onRetry = (error) => {
    hooks.heartbeatRetried?.();
    log('warn', 'heartbeat failed on a dead connection; retried on another', { error: String(error) });
  };
  const leasing = new AbortController();
  const leaseLoop = leaser.run(leasing.signal);

  const results: RunResult[] = [];
  // A run's promise never rejects (Run.execute settles every outcome into its result), and
  // runner.close() below awaits every run still going: collecting needs no await of its own.
  const collect = (id: string) => void runner.running(id)?.then((r) => results.push(r));
  let invocationMarked = !event.invocationId;

  let reason: WorkerResult['reason'] = 'idle';
  try {
    if (event.batchId && !pastDeadline() && !shutdown.signal.aborted) {
      // The batch it was sent for, unless another tenant is served worse (docs/design.md, "Tenant fairness").
      const b = await runner.takeOver(resolve, event.batchId, { orFairer: true }).catch((error) => {
        log('warn', 'takeover of the dispatched batch failed', { batchId: event.batchId, error: String(error) });
        return undefined;
      });
      if (b) collect(b.id);
    }
    let idleSince = Date.now();
    while (true) {
      if (shutdown.signal.aborted) {
        reason = 'shutdown';
        break;
      }
      if (pastDeadline()) {
        reason = 'deadline';
        break;
      }
      if (leaser.retiring()) {
        reason = 'retired';
        break;
      }
      if (!invocationMarked && leaser.ready()) {
        invocationMarked = true;
        await withTimeout(invocationLive(sql, event.invocationId!), config.runner.storeTimeoutMs).catch(() => {});
      }
      try {
        while (runner.batches().length < config.runner.maxRuns) {
          const b = await runner.takeOver(resolve);
          if (!b) break;
          collect(b.id);
        }
      } catch (error) {
        log('warn', 'looking for batches failed', { error: String(error) });
      }
      // A fleet process stays while units need processes; otherwise it leaves once idle.
      const unitWork =
        role === 'fleet' && ((leaser.share()?.totalWeight ?? 0) > 0 || leaser.owned().length > 0 || !leaser.share());
      if (runner.batches().length > 0 || unitWork) idleSince = Date.now();
      else if (Date.now() - idleSince >= config.workerIdleMs) break;
      const wait = Math.max(0, Math.min(config.workerPollMs, deadline - Date.now()));
      const runs = runner.batches().map((id) => runner.running(id)!);
      await Promise.race([systemClock.sleep(wait, stop), ...runs]);
    }
  } finally {
    shutdown.signal.removeEventListener('abort', onStop);
    deps.signal?.removeEventListener('abort', onStop);
    leasing.abort();
    const [closing] = await Promise.all([
      runner.close(),
      (async () => {
        await leaseLoop;
        try {
          await leaser.release();
          await leaser.deleteProcess();
        } catch (error) {
          // The row expires by itself and the sweep frees its units; nothing is acted on meanwhile.
          log('error', 'release failed', { error: String(error) });
        }
        await units.close();
      })(),
    ]);
    for (const r of closing) if (!results.includes(r)) results.push(r);
  }
  // A run may have ended through close() and through collect(): keep one result per run.
  const byRun = new Map(results.map((r) => [r.runId, r]));
  const continued: string[] = [];
  // Continuations and replacements only while there is time left: the scheduler does the same
  // within a minute, and returning before the platform's deadline comes first (invariant 6).
  const leftMs = () => context.getRemainingTimeInMillis() - 500;
  const bounded = <T>(p: Promise<T>) => withTimeout(p, Math.max(1, Math.min(config.runner.storeTimeoutMs, leftMs())));
  for (const r of byRun.values()) {
    // A retired process's runs are taken over by the processes that stay (and dispatched by the
    // scheduler): a continuation would only add a worker to a fleet that is too large.
    if (r.outcome !== 'handed-off' || reason !== 'deadline' || shutdown.signal.aborted || leftMs() <= 0) continue;
    try {
      await bounded(dispatchBatch(sql, deps.dispatcher, r.batchId));
      continued.push(r.batchId);
    } catch (error) {
      // The scheduler dispatches handed-off batches too; this only makes it sooner.
      log('warn', 'continuation invoke failed', { batchId: r.batchId, error: String(error) });
    }
  }
  let replacements = 0;
  // A process that reached its deadline while the stack stops (local mode's Ctrl-C) leaves no
  // replacement: nothing would serve it.
  if (reason === 'deadline' && !shutdown.signal.aborted && leftMs() > 0) {
    // This process just left the fleet: keep the desired count without waiting for the scheduler.
    try {
      const plan = await bounded(planInvocations(sql, { cap: 1, pendingMs: config.invocationPendingMs }));
      for (const invocationId of plan.invocations) {
        await bounded(deps.dispatcher.invoke({ invocationId }));
        replacements++;
      }
    } catch (error) {
      log('warn', 'replacement invoke failed', { error: String(error) });
    }
  }
  const runs = [...byRun.values()].map(({ batchId, outcome, finishedItems }) => ({ batchId, outcome, finishedItems }));
  log('info', 'worker returning', { role, reason, runs, continued, replacements });
  return { processId, role, runs, reason, continued, replacements };
}

function logLeaserEvent(log: Log, e: LeaserEvent): void {
  switch (e.type) {
    case 'error':
      return log('warn', `lease ${e.step} failed`, { error: String(e.error) });
    case 'lapsed':
      return log('warn', 'heartbeat lapsed: ownership re-read', { lost: e.lost });
    case 'swept':
      return log('info', 'swept', { processes: e.processes, units: e.units });
    case 'retiring':
      return log('info', 'retiring: the fleet is above the desired count');
  }
}

function logRunnerEvent(log: Log, e: RunnerEvent): void {
  switch (e.type) {
    case 'run-started':
      return log('info', e.takeover ? 'batch taken over' : 'batch started', { batchId: e.batchId, runId: e.runId });
    case 'run-ended':
      return log(e.result.outcome === 'store-error' ? 'error' : 'info', `run ${e.result.outcome}`, {
        batchId: e.result.batchId,
        runId: e.result.runId,
        finishedItems: e.result.finishedItems,
        error: e.result.error?.message,
      });
    case 'store-error':
      return log('warn', 'store error', { batchId: e.batchId, tries: e.tries, error: String(e.error) });
    case 'unknown-job':
      return log('error', 'batch has a job this worker does not know', { batchId: e.batchId, job: e.job });
  }
}
