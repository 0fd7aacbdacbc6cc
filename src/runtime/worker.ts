import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { sleepUntil, systemClock } from '../clock.js';
import { Runner } from '../batch/runner.js';
import type { Dispatcher, WorkerEvent } from '../batch/dispatch.js';
import type { RunResult } from '../batch/types.js';
import type { RunnerEvent } from '../batch/run/types.js';
import type { JobRegistry } from '../jobs/job.js';
import { invocationLive, workerStart, type WorkerStart } from '../lease/sql/fleet.js';
import type { LeaserEvent, Reconciler } from '../lease/leaser.js';
import type { ProcessChain, ProcessRole } from '../lease/sql/ownership.js';
import { checkSchema, isSchemaChangeError, SchemaMismatchError, SUPPORTED_SCHEMA, type SchemaRange } from '../store/schema.js';
import { PoolerModeError } from '../store/errors.js';
import { withTimeout } from '../store/timeout.js';
import type { Sql } from '../store/connect.js';
import type { Config } from './config.js';
import { WorkerDispatcher } from './dispatch.js';
import { ReconnectingLeaser } from './heartbeat.js';
import type { Log } from '../log.js';
import { errorFields } from '../log.js';
import type { WorkerHooks } from './metrics.js';
import { startedLate } from './late-start.js';

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
  /**
   * The function's memory size, MB, as Lambda's context gives it (a string): the size the
   * invocation's usage is counted at (docs/design.md, "Usage and cost"). Absent locally:
   * `LEASEHOLD_WORKER_MEMORY_MB`.
   */
  memoryLimitInMB?: string | number;
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
  /** The schema versions this code supports (docs/design.md, "Schema versions"). Default `SUPPORTED_SCHEMA`. */
  schema?: SchemaRange;
  /**
   * Sends a batch's Batch Finished events (docs/design.md, "Events"): called at once when one of
   * this worker's runs ended its batch, best effort (the scheduler sends what is left); the
   * worker waits for the sends before it returns, at most its store timeout. Default none.
   */
  sendEvents?: (batchId: string) => Promise<unknown>;
}

/** What one worker invocation did. */
export interface WorkerResult {
  processId: string;
  runs: Pick<RunResult, 'batchId' | 'outcome' | 'finishedItems'>[];
  /** `fleet`: counted against the desired count, owned units; `batch`: sent for a batch. */
  role: ProcessRole;
  /**
   * Why it returned: deadline reached, nothing left to run, retired (the scheduler asked: the
   * fleet was above the desired count), shut down (local Ctrl-C), or the database's schema is
   * outside what this code supports (found on its first statement, or after an error of a
   * changed schema: docs/design.md, "Schema versions"), or its event was stale (its invocation no
   * longer pending, or its batch finished: docs/design.md, "Late and repeated worker events"),
   * or it started past its deadline (`late`: see `startedLate`).
   */
  reason: 'deadline' | 'idle' | 'retired' | 'shutdown' | 'schema' | 'stale' | 'late';
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
 * - its role: a worker sent for a batch (`{ batchId }`, with an `invocationId` when it was
 *   reserved under the worker limit: dispatches, starts and continuations) is a `batch` process
 *   — listed, but owning no unit and not counted against the desired count; every other worker
 *   (`{ invocationId }` from the scheduler or a replacement) is a `fleet` process;
 * - a fleet process heartbeats and rebalances its fair share of units through a leaser (their
 *   jobs run through `deps.units`); every process marks its invocation confirmed on its first
 *   heartbeat;
 * - runs the batch it was sent and joins batches below their target and replaces stale runs
 *   (docs/design.md, "Fan-out"; up to
 *   `maxRuns` at once);
 * - returns after `workerIdleMs` with no batch to run when it has no unit work (a batch
 *   process, or no unit with weight); when the scheduler asks it to retire (the fleet is above
 *   the desired count; learnt on its next heartbeat); or at
 *   `deadline = remaining time − deadlineMarginMs`. Then every run hands off (beat cleared;
 *   continuations requested only at the deadline), every unit is released, the process row
 *   deleted, and — at the deadline, when units need processes — a replacement is invoked to
 *   keep the desired count. The worker returns owning nothing (invariant 6).
 * - returns at once, after its one first statement, when its event is stale: an invocation id
 *   no longer pending (confirmed, claimed by another delivery of the same event, or past its
 *   confirmation window) or, sent for a batch alone, a batch no longer open;
 * - checks the schema version first: outside `deps.schema` it returns at once, having acted on
 *   nothing; after an error a changed schema gives (`0A000`, `42P01`, `42703`) it checks again
 *   and, outside the range, stops as at a retirement (runs handed off, units released, row
 *   deleted, no continuation), logging once (docs/design.md, "Schema versions").
 * Never throws for a run's or a unit's failure. Its steps, in order: `openInvocation`,
 * `firstStatement` (return at once?), `startRunner` and `startLeaser`, `work` (the loop),
 * `leave` (release, delete the row) and, at the deadline, `sendSuccessors`.
 */
export async function runWorker(event: WorkerEvent, context: InvocationContext, deps: WorkerDeps): Promise<WorkerResult> {
  // Past its deadline before it began (docs/deploy.md, "Faults and how leasehold answers them").
  if (context.getRemainingTimeInMillis() <= deps.config.deadlineMarginMs || deps.signal?.aborted) {
    return { processId: randomUUID(), role: event.batchId ? 'batch' : 'fleet', ...(await startedLate(event, context, deps)) };
  }
  const inv = openInvocation(event, context, deps);
  const early = await firstStatement(inv);
  if (early) return early;
  const { log } = inv;
  // Batch Finished sends in flight (see WorkerDeps.sendEvents).
  const sends = new Set<Promise<void>>();
  const runner = startRunner(inv, sends);
  // Unit jobs check the lease by the process's own clock before acting (see Leaser.leaseValid).
  let leaseValid = () => false;
  const units = deps.units?.(inv.processId, log, () => leaseValid()) ?? idleUnits;
  const leaser = startLeaser(inv, units);
  leaseValid = () => leaser.leaseValid();
  const leasing = new AbortController();
  const leaseLoop = leaser.run(leasing.signal);

  const results: RunResult[] = [];
  let reason: WorkerResult['reason'];
  try {
    reason = await work(inv, runner, leaser, results);
  } finally {
    inv.detach();
    leasing.abort();
    const [closing] = await Promise.all([runner.close(), leave(inv, leaseLoop, leaser, units)]);
    for (const r of closing) if (!results.includes(r)) results.push(r);
  }
  // A run may have ended through close() and through collect(): keep one result per run.
  const byRun = new Map(results.map((r) => [r.runId, r]));
  const { continued, replacements } = await sendSuccessors(inv, reason, [...byRun.values()], leaser);
  if (sends.size) await inv.bounded(Promise.allSettled([...sends])).catch(() => {});
  const runs = [...byRun.values()].map(({ batchId, outcome, finishedItems }) => ({ batchId, outcome, finishedItems }));
  const changed = inv.schemaMismatch;
  if (changed) {
    log('error', `schema changed under this code; stopped, owning nothing: ${changed.message}`, {
      schemaVersion: changed.version,
      supported: changed.supported,
    });
  }
  log('info', 'worker returning', { role: inv.role, reason, runs, continued, replacements });
  return { processId: inv.processId, role: inv.role, runs, reason, continued, replacements };
}

/** What the steps of one worker invocation share. */
interface Invocation {
  event: WorkerEvent;
  deps: WorkerDeps;
  processId: string;
  role: ProcessRole;
  /** The invocation's log, scoped to its process. */
  log: Log;
  /** Remaining time − `deadlineMarginMs`, ms since the epoch. */
  deadline: number;
  /** The memory size the invocation's usage is counted at, MB (its context's, else the config's). */
  memoryMb: number;
  /** Aborted on shutdown, at the deadline signal, on retirement or a schema mismatch: wakes the loop's waits. */
  stop: AbortSignal;
  /** Set once the database's schema is found outside what this code supports. */
  schemaMismatch?: SchemaMismatchError;
  pastDeadline(): boolean;
  /** Checks the schema again after an error a changed schema gives (see `isSchemaChangeError`). */
  noteError(error: unknown): void;
  /** Bounds a step after the loop by the store timeout and the time left before the platform's deadline. */
  bounded<T>(step: Promise<T>): Promise<T>;
  /** Ms left before the platform's deadline, less a margin for returning. */
  leftMs(): number;
  /** Aborts `stop`: the loop wakes and looks at why. */
  wake(): void;
  /** Removes the listeners on the container's signals (`shutdown` lives as long as the container). */
  detach(): void;
}

/** The invocation's identity, deadline and stop signal, and its check of a schema changed under it. */
function openInvocation(event: WorkerEvent, context: InvocationContext, deps: WorkerDeps): Invocation {
  const { config, sql } = deps;
  const processId = randomUUID();
  const deadline = Date.now() + context.getRemainingTimeInMillis() - config.deadlineMarginMs;
  // Wakes the loop's waits on shutdown, at the deadline signal or on retirement; listeners
  // removed at the end, since `shutdown` lives as long as the container.
  const stopping = new AbortController();
  const onStop = () => stopping.abort();
  for (const s of [shutdown.signal, deps.signal]) {
    if (s?.aborted) stopping.abort();
    else s?.addEventListener('abort', onStop, { once: true });
  }
  // Old code after a migration acts on nothing (docs/design.md, "Schema versions"): the first
  // statement checks the version, and an error a changed schema gives checks it again.
  const schema = deps.schema ?? SUPPORTED_SCHEMA;
  let recheck: Promise<void> | undefined;
  const leftMs = () => context.getRemainingTimeInMillis() - 500;
  const memory = Number(context.memoryLimitInMB);
  const inv: Invocation = {
    memoryMb: Number.isInteger(memory) && memory >= 128 && memory <= 10_240 ? memory : config.runner.memoryMb,
    event,
    deps,
    processId,
    role: event.batchId ? 'batch' : 'fleet',
    log: deps.log.with({ processId }),
    deadline,
    stop: stopping.signal,
    pastDeadline: () => Date.now() >= deadline || deps.signal?.aborted === true,
    noteError: (error) => {
      if (inv.schemaMismatch || recheck || !isSchemaChangeError(error)) return;
      recheck = withTimeout(() => checkSchema(sql, schema), config.runner.storeTimeoutMs).then(
        () => void (recheck = undefined),
        (e: unknown) => {
          recheck = undefined;
          if (!(e instanceof SchemaMismatchError)) return;
          inv.schemaMismatch = e;
          stopping.abort();
        },
      );
    },
    bounded: (step) => withTimeout(step, Math.max(1, Math.min(config.runner.storeTimeoutMs, leftMs()))),
    leftMs,
    wake: onStop,
    detach: () => {
      for (const s of [shutdown.signal, deps.signal]) s?.removeEventListener('abort', onStop);
    },
  };
  return inv;
}

/**
 * One statement before anything: the schema version, the claim of the event's invocation and
 * its batch's status (docs/design.md, "Late and repeated worker events"). Answers the worker's
 * result when it must return at once (a schema outside the range, a stale event), else nothing.
 */
async function firstStatement(inv: Invocation): Promise<WorkerResult | undefined> {
  const { deps, event, log, processId, role } = inv;
  const { sql, config } = deps;
  const schema = deps.schema ?? SUPPORTED_SCHEMA;
  let start: WorkerStart | undefined;
  try {
    start = await withTimeout(() => workerStart(sql, event, config.lease.ttlMs), config.runner.storeTimeoutMs);
  } catch (error) {
    // A pooler that refuses the pool's settings refuses every statement: nothing this invocation
    // could retry would work (docs/deploy.md, "Failures").
    if (error instanceof PoolerModeError) {
      inv.detach();
      log('error', error.message, { code: error.code });
      throw error;
    }
    // A schema older than this code's (a column it reads missing): say so below. Otherwise the
    // store does not answer: the leaser retries its first heartbeat, and an error of a changed
    // schema is checked as it comes.
    if (isSchemaChangeError(error)) {
      const found = await withTimeout(() => checkSchema(sql, schema), config.runner.storeTimeoutMs).catch((e: unknown) => e);
      if (found instanceof SchemaMismatchError) inv.schemaMismatch = found;
    }
  }
  if (start && (start.schemaVersion < schema.min || start.schemaVersion > schema.max)) {
    inv.schemaMismatch = new SchemaMismatchError(start.schemaVersion, schema);
  }
  // A stale event: its invocation no longer pending (confirmed or claimed by another delivery of
  // the same event, or past its confirmation window), or its batch finished.
  const stale =
    start !== undefined &&
    ((event.invocationId !== undefined && !start.claimed) || (event.batchId !== undefined && start.batchStatus !== 'open'));
  if (!inv.schemaMismatch && !stale) return undefined;
  inv.detach();
  const mismatch = inv.schemaMismatch;
  if (mismatch) {
    log('error', `schema version outside what this code supports; returning without acting: ${mismatch.message}`, {
      schemaVersion: mismatch.version,
      supported: mismatch.supported,
    });
    return { processId, role, runs: [], reason: 'schema', continued: [], replacements: 0 };
  }
  log('info', 'stale event: returning at once', { ...event, batchStatus: start?.batchStatus ?? null });
  return { processId, role, runs: [], reason: 'stale', continued: [], replacements: 0 };
}

/** The runner of the process's runs: its events go to the hooks, the log, the schema check and the Batch Finished sends. */
function startRunner(inv: Invocation, sends: Set<Promise<void>>): Runner {
  const { deps, log } = inv;
  const hooks = deps.hooks ?? {};
  const workers = new WorkerDispatcher(deps.sql, deps.dispatcher, deps.config);
  /** A send the worker awaits before it returns (the Batch Finished events, the workers a grown batch wants). */
  const track = (sending: Promise<void>) => {
    const tracked: Promise<void> = sending.finally(() => void sends.delete(tracked));
    sends.add(tracked);
  };
  return new Runner(deps.sql, {
    processId: inv.processId,
    ...deps.config.runner,
    memoryMb: inv.memoryMb,
    // An invocation is billed whole: its time with no run live is charged to its runs.
    chargeIdle: true,
    onEvent: (e: RunnerEvent) => {
      hooks.runner?.(e);
      if (e.type === 'store-error') inv.noteError(e.error);
      else if (e.type === 'run-ended') inv.noteError(e.result.error);
      if (e.type === 'run-ended' && (e.result.outcome === 'succeeded' || e.result.outcome === 'failed') && deps.sendEvents) {
        const batchId = e.result.batchId;
        // A failed send is the scheduler's to redo.
        track(
          deps.sendEvents(batchId).then(undefined, (error: unknown) =>
            log('warn', 'sending the Batch Finished event failed; the scheduler sends it', {
              batchId,
              error: errorFields(error),
            }),
          ),
        );
      }
      // A page of a source batch raised its target: its runs are sent now, not at the scheduler's
      // next pass (a minute on AWS), reserved under the worker limit like every worker.
      if (e.type === 'batch-wants-runs') {
        track(
          workers.send(e.batchId, e.runs, { within: inv.bounded }).then(
            (sent) => log('info', 'workers sent to a source batch that grew', { batchId: e.batchId, wanted: e.runs, sent }),
            (error: unknown) =>
              log('warn', 'sending workers to a source batch that grew failed; the scheduler sends them', {
                batchId: e.batchId,
                error: errorFields(error),
              }),
          ),
        );
      }
      // Item outcomes as the runner stored them: a result whose move never landed is not counted.
      if (e.type === 'item-ended') hooks.item?.(e.outcome);
      else logRunnerEvent(log, e);
    },
  });
}

/** The process's leaser: heartbeats, its fair share of units (fleet), retirement; it never sweeps. */
function startLeaser(inv: Invocation, units: UnitReconciler): ReconnectingLeaser {
  const { deps, log } = inv;
  const hooks = deps.hooks ?? {};
  const leaser = new ReconnectingLeaser(
    deps.sql,
    {
      ...deps.config.lease,
      processId: inv.processId,
      role: inv.role,
      hostname: process.env.AWS_LAMBDA_LOG_STREAM_NAME ?? hostname(),
      version: process.env.AWS_LAMBDA_FUNCTION_VERSION ?? process.env.npm_package_version ?? 'local',
      // The scheduler sweeps; a worker never needs to.
      sweepIntervalMs: 0,
      chain: chainOf(inv.event, log),
    },
    units,
    {
      hooks: hooks.lease,
      onEvent: (e: LeaserEvent) => {
        logLeaserEvent(log, e);
        if (e.type === 'error') inv.noteError(e.error);
        // Wake the loop: a retiring process leaves at once.
        if (e.type === 'retiring') inv.wake();
      },
    },
  );
  leaser.onRetry = (error) => {
    hooks.heartbeatRetried?.();
    log('warn', 'heartbeat failed on a dead connection; retried on another', { error: errorFields(error) });
  };
  return leaser;
}

/**
 * The process's work until it leaves: the batch it was sent for, then batches below their target
 * and stale runs (up to `maxRuns` at once), marking its invocation live on its first heartbeat.
 * Answers why it stopped; the runs it started are collected into `results` as they end.
 */
async function work(
  inv: Invocation,
  runner: Runner,
  leaser: ReconnectingLeaser,
  results: RunResult[],
): Promise<WorkerResult['reason']> {
  const { deps, event, log } = inv;
  const { config, jobs, sql } = deps;
  const resolve = jobs.resolve;
  // A run's promise never rejects (Run.execute settles every outcome into its result), and
  // runner.close() awaits every run still going: collecting needs no await of its own.
  const collect = (id: string) => void runner.running(id)?.then((r) => results.push(r));
  let invocationMarked = !event.invocationId;
  if (event.batchId && !inv.pastDeadline() && !shutdown.signal.aborted) {
    // The batch it was sent for, unless another tenant is served worse (docs/design.md, "Tenant fairness").
    const b = await runner.takeOver(resolve, event.batchId, { orFairer: true }).catch((error) => {
      log('warn', 'takeover of the dispatched batch failed', { batchId: event.batchId, error: errorFields(error) });
      return undefined;
    });
    if (b) collect(b.id);
  }
  let idleSince = Date.now();
  while (true) {
    if (shutdown.signal.aborted) return 'shutdown';
    if (inv.schemaMismatch) return 'schema';
    if (inv.pastDeadline()) return 'deadline';
    if (leaser.retiring()) return 'retired';
    if (!invocationMarked && leaser.ready()) {
      invocationMarked = true;
      await withTimeout(() => invocationLive(sql, event.invocationId!), config.runner.storeTimeoutMs).catch(() => {});
    }
    try {
      while (runner.batches().length < config.runner.maxRuns) {
        const b = await runner.takeOver(resolve);
        if (!b) break;
        collect(b.id);
      }
    } catch (error) {
      log('warn', 'looking for batches failed', { error: errorFields(error) });
      inv.noteError(error);
    }
    // A fleet process stays while units need processes; otherwise it leaves once idle.
    const unitWork =
      inv.role === 'fleet' && ((leaser.share()?.totalWeight ?? 0) > 0 || leaser.owned().length > 0 || !leaser.share());
    if (runner.batches().length > 0 || unitWork) idleSince = Date.now();
    else if (Date.now() - idleSince >= config.workerIdleMs) return 'idle';
    const wait = Math.max(0, Math.min(config.workerPollMs, inv.deadline - Date.now()));
    const runs = runner.batches().map((id) => runner.running(id)!);
    await sleepUntil(systemClock, wait, inv.stop, runs);
  }
}

/** Once the lease loop ended: release every unit, delete the process row, stop the unit jobs. */
async function leave(
  inv: Invocation,
  leaseLoop: Promise<void>,
  leaser: ReconnectingLeaser,
  units: UnitReconciler,
): Promise<void> {
  await leaseLoop;
  try {
    await leaser.release();
    await leaser.deleteProcess();
  } catch (error) {
    // The row expires by itself and the sweep frees its units; nothing is acted on meanwhile.
    inv.log('error', 'release failed', { error: errorFields(error) });
  }
  await units.close();
}

/**
 * At the deadline, while there is time left: a continuation for every run handed off, and a
 * replacement to keep the desired count, each reserved under the worker limit and continuing
 * this process's chain. The scheduler does the same within a minute, and returning before the
 * platform's deadline comes first (invariant 6); failures are logged, never thrown.
 */
async function sendSuccessors(
  inv: Invocation,
  reason: WorkerResult['reason'],
  runs: RunResult[],
  leaser: ReconnectingLeaser,
): Promise<{ continued: string[]; replacements: number }> {
  const { deps, log } = inv;
  const workers = new WorkerDispatcher(deps.sql, deps.dispatcher, deps.config);
  const continued: string[] = [];
  // A retired process's runs are taken over by the processes that stay (and dispatched by the
  // scheduler): a continuation would only add a worker to a fleet that is too large. A process
  // that reached its deadline while the stack stops (local mode's Ctrl-C) leaves no successor:
  // nothing would serve it.
  if (reason !== 'deadline' || shutdown.signal.aborted) return { continued, replacements: 0 };
  for (const r of runs) {
    if (r.outcome !== 'handed-off' || inv.leftMs() <= 0) continue;
    try {
      // A continuation is one more worker: reserved under the worker limit like any other.
      const sent = await workers.send(r.batchId, 1, { chain: leaser.successorChain(), within: inv.bounded });
      if (sent) continued.push(r.batchId);
    } catch (error) {
      // The scheduler dispatches handed-off batches too; this only makes it sooner.
      log('warn', 'continuation invoke failed', { batchId: r.batchId, error: errorFields(error) });
    }
  }
  let replacements = 0;
  if (inv.leftMs() <= 0) return { continued, replacements };
  // This process just left the fleet: keep the desired count without waiting for the scheduler.
  // The replacement continues this process's chain: the fleet reads as chains that go on.
  try {
    const { invoked, errors } = await workers.sendFleet(1, { chain: leaser.successorChain(), within: inv.bounded });
    replacements = invoked;
    if (errors.length) throw errors[0];
  } catch (error) {
    log('warn', 'replacement invoke failed', { error: errorFields(error) });
  }
  return { continued, replacements };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The chain of the event (docs/design.md, "Process chains"), when well formed: a malformed one
 * would fail every heartbeat of the process, so it is logged and the process starts a chain of
 * its own instead.
 */
function chainOf(event: WorkerEvent, log: Log): ProcessChain | undefined {
  const c = event.chain;
  if (c === undefined) return undefined;
  const ok =
    typeof c === 'object' &&
    c !== null &&
    UUID.test(String(c.replaces)) &&
    UUID.test(String(c.id)) &&
    typeof c.startedAt === 'string' &&
    Number.isFinite(Date.parse(c.startedAt)) &&
    Number.isSafeInteger(c.replacements) &&
    c.replacements >= 1;
  if (ok) return { replaces: c.replaces, id: c.id, startedAt: c.startedAt, replacements: c.replacements };
  log('warn', 'ignoring a malformed chain in the event: this process starts a chain of its own', { chain: c });
  return undefined;
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
    case 'call-results-ignored':
      return log('warn', "a batched call's answer held results that match no item of the call; they were ignored", {
        batchId: e.batchId,
        items: e.items,
        strangers: e.strangers,
        keyless: e.keyless,
        keys: e.keys,
      });
  }
}
