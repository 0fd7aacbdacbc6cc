// The slots of the local Lambda Invoke API (docs/design.md, "Local mode"): one FIFO queue of
// invocations behind a concurrency limit, the per-function count that reserved concurrency is
// checked against, and one invocation run with its Lambda context, its local timeout and the
// observers' reports. The HTTP side (src/local/invoke-endpoint.ts) only admits and answers.
import type { ClientContext } from 'aws-lambda';
import { createLambdaContext, type LambdaLikeContext, type NowClock } from './context.js';
import { LeaseholdError } from '../errors.js';

/**
 * A function the endpoint can invoke: `(event, context) => result`, usually a middy handler.
 * Declared through a method so that handlers typed for a specific event (`WorkerEvent`) are
 * accepted; the endpoint passes whatever JSON the caller sent.
 */
export type LocalLambdaHandler = {
  bivarianceHack(event: unknown, context: LambdaLikeContext): unknown;
}['bivarianceHack'];

/** How an invocation was requested (`X-Amz-Invocation-Type`). */
export type LocalInvocationType = 'Event' | 'RequestResponse';

/** One invocation, as reported to the observers. */
export interface InvocationInfo {
  functionName: string;
  /** The context's `awsRequestId`, also sent back as `x-amzn-RequestId`. */
  awsRequestId: string;
  invocationType: LocalInvocationType;
  /** Time spent queued behind the concurrency limit, ms. */
  queuedMs: number;
}

/** A finished (or timed-out) invocation, as reported to `onDone`. */
export interface InvocationOutcome extends InvocationInfo {
  /** From handler start to settlement (or to the timeout), ms. */
  durationMs: number;
  /** True when the handler resolved before the timeout. */
  ok: boolean;
  /** True when the handler was still running at `timeoutMs`. */
  timedOut: boolean;
  /** What the handler threw, or the {@link LocalInvocationTimeoutError}. */
  error?: unknown;
}

/** An invocation ran past `timeoutMs`; its handler keeps its slot until it actually settles. */
export class LocalInvocationTimeoutError extends LeaseholdError {
  constructor(
    readonly functionName: string,
    readonly awsRequestId: string,
    readonly timeoutMs: number,
  ) {
    super(
      'invocation_timeout',
      `RequestId: ${awsRequestId} Error: Task timed out after ${(timeoutMs / 1000).toFixed(2)} seconds`,
    );
  }
}

/** One admitted invocation, waiting for a slot or running. */
export interface InvocationJob {
  functionName: string;
  handler: LocalLambdaHandler;
  event: unknown;
  invocationType: LocalInvocationType;
  clientContext?: ClientContext;
  awsRequestId: string;
  enqueuedAtMs: number;
}

/** How a job ended: with the result, the failure, or `dropped` when stopped before it ran. */
export type JobOutcome = { kind: 'ok'; result: unknown } | { kind: 'error'; error: unknown } | { kind: 'dropped' };

/** Settings of an {@link InvocationQueue}: the endpoint's, defaults already applied. */
export interface InvocationQueueOptions {
  /** Invocations running at once. */
  concurrency: number;
  /** Local timeout of every invocation, ms. */
  timeoutMs: number;
  /** The memory size every invocation's context reports, MB. Default 1,024. */
  memoryLimitInMB?: number;
  region?: string;
  clock: NowClock;
  onInvoke?(info: InvocationInfo): void;
  onDone?(outcome: InvocationOutcome): void;
  onError?(error: unknown, info: InvocationInfo): void;
}

interface QueuedJob extends InvocationJob {
  /** Called once, with how the job ended. */
  settle(outcome: JobOutcome): void;
}

/**
 * Runs invocations at most `concurrency` at once, in arrival order, and counts what ran. A
 * handler that outlives its timeout is reported at the timeout but keeps its slot until it
 * settles, since a local handler cannot be stopped.
 */
export class InvocationQueue {
  private readonly jobs: QueuedJob[] = [];
  private active = 0;
  /** Invocations running or queued, by function name (for `reservedConcurrency`). */
  private readonly inFlight = new Map<string, number>();
  private idleWaiters: (() => void)[] = [];
  /** Invocations whose handler resolved in time. */
  completed = 0;
  /** Invocations whose handler threw, rejected or timed out. */
  failed = 0;

  constructor(private readonly options: InvocationQueueOptions) {}

  /** Handlers running now. */
  running(): number {
    return this.active;
  }

  /** Invocations waiting for a slot. */
  queued(): number {
    return this.jobs.length;
  }

  /** Resolves when nothing is running or queued. */
  idle(): Promise<void> {
    return this.active === 0 && this.jobs.length === 0 ? Promise.resolve() : new Promise<void>((r) => this.idleWaiters.push(r));
  }

  /**
   * Queue `job` unless its function already has `reserved` invocations running or queued
   * (undefined: no limit). Checked and counted in one step, so concurrent callers cannot both
   * take the last slot. `settle` is called once, after the function's count is given back.
   * @returns false when refused (nothing queued, `settle` never called).
   */
  enqueue(job: InvocationJob, settle: (outcome: JobOutcome) => void, reserved?: number): boolean {
    const name = job.functionName;
    if (reserved !== undefined && (this.inFlight.get(name) ?? 0) >= reserved) return false;
    this.inFlight.set(name, (this.inFlight.get(name) ?? 0) + 1);
    this.jobs.push({
      ...job,
      settle: (outcome) => {
        this.inFlight.set(name, (this.inFlight.get(name) ?? 1) - 1);
        settle(outcome);
      },
    });
    this.pump();
    return true;
  }

  /** Settle every queued (not yet running) job as `dropped`. */
  dropQueued(): void {
    for (const job of this.jobs.splice(0)) job.settle({ kind: 'dropped' });
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.active === 0 && this.jobs.length === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  private pump(): void {
    while (this.active < this.options.concurrency && this.jobs.length > 0) {
      const job = this.jobs.shift()!;
      this.active++;
      void this.execute(job).finally(() => {
        this.active--;
        this.pump();
        this.checkIdle();
      });
    }
  }

  private async execute(job: QueuedJob): Promise<void> {
    const { clock, timeoutMs } = this.options;
    const startedAtMs = clock.now();
    const info: InvocationInfo = {
      functionName: job.functionName,
      awsRequestId: job.awsRequestId,
      invocationType: job.invocationType,
      queuedMs: Math.max(0, startedAtMs - job.enqueuedAtMs),
    };
    const context = createLambdaContext({
      functionName: job.functionName,
      timeoutMs,
      startedAtMs,
      awsRequestId: job.awsRequestId,
      region: this.options.region,
      memoryLimitInMB: this.options.memoryLimitInMB,
      clientContext: job.clientContext,
      clock,
    });
    let finished = false;
    const finish = (outcome: JobOutcome, timedOut: boolean) => {
      if (finished) return;
      finished = true;
      this.report(outcome, timedOut, info, startedAtMs);
      job.settle(outcome);
    };
    // Lambda would end the invocation here; locally the handler cannot be stopped, so it keeps
    // its slot until it settles, but the caller and the observers learn of the timeout now.
    const timer = setTimeout(
      () =>
        finish({ kind: 'error', error: new LocalInvocationTimeoutError(job.functionName, job.awsRequestId, timeoutMs) }, true),
      timeoutMs,
    );
    timer.unref();
    observe(this.options.onInvoke, info);
    try {
      const result = await Promise.resolve().then(() => job.handler(job.event, context));
      finish({ kind: 'ok', result }, false);
    } catch (error) {
      finish({ kind: 'error', error }, false);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Count the outcome and tell the observers. */
  private report(outcome: JobOutcome, timedOut: boolean, info: InvocationInfo, startedAtMs: number): void {
    const error = outcome.kind === 'error' ? outcome.error : undefined;
    if (outcome.kind === 'ok') this.completed++;
    else {
      this.failed++;
      observe(this.options.onError, error, info);
    }
    observe(this.options.onDone, {
      ...info,
      durationMs: Math.max(0, this.options.clock.now() - startedAtMs),
      ok: outcome.kind === 'ok',
      timedOut,
      ...(error !== undefined ? { error } : {}),
    });
  }
}

function observe<A extends unknown[]>(fn: ((...args: A) => void) | undefined, ...args: A): void {
  try {
    fn?.(...args);
  } catch {
    // an observer's failure must not disturb invocations
  }
}
