import type { LambdaClient } from '@aws-sdk/client-lambda';
import { sendWorkers, type Dispatcher, type SendWorkersOptions, type WorkerEvent, type WorkerSender } from '../batch/dispatch.js';
import { undispatch } from '../batch/sql/dispatch.js';
import { planInvocations, reserveInvocations, type BatchInvocation, type InvocationPlan } from '../lease/sql/fleet.js';
import type { Sql } from '../store/connect.js';
import type { Config } from './config.js';

/** The worker limit a dispatcher keeps (docs/design.md, "Fan-out"); the runtime passes its config's. */
export type WorkerLimits = Pick<Config, 'maxWorkers' | 'invocationPendingMs'>;

/**
 * The `reserve` of a start (`StartDeps.reserve`): worker events for the batch ids given (one
 * per worker), reserved under the worker limit `config.maxWorkers` with the confirmation window
 * `config.invocationPendingMs` (docs/design.md, "Fan-out").
 */
export function workerReserver(sql: Sql, config: WorkerLimits): (batchIds: string[]) => Promise<BatchInvocation[]> {
  return (batchIds) =>
    reserveInvocations(sql, { batchIds, maxWorkers: config.maxWorkers, pendingMs: config.invocationPendingMs });
}

/** What {@link WorkerDispatcher.sendClaimed} did. */
export interface ClaimedSent {
  /** Batches sent a worker, once per worker. */
  dispatched: string[];
  /** Batches whose invoke failed, once per worker; their dispatch mark stays (retried after the cooldown). */
  failed: string[];
  /** Workers the worker limit had no room for. */
  held: number;
}

/** What {@link WorkerDispatcher.sendFleet} did. */
export interface FleetSent {
  /** The plan of `planInvocations`: desired, live, pending, the invocations and the processes retired. */
  plan: InvocationPlan;
  /** Fleet workers invoked. */
  invoked: number;
  /** The errors of the invokes that failed (each still counts as coming until its window passes). */
  errors: unknown[];
}

/**
 * The one home of sending workers (docs/design.md, "Fan-out"): every worker the runtime sends —
 * a start's, a dispatch's, a continuation's, a fleet invocation — is first reserved (or planned)
 * as an invocation under the worker limit `maxWorkers`, decided one caller at a time, so live
 * workers plus invocations on their way never exceed it (invariant 8); then it is invoked
 * through `dispatcher`. Callers ask for N workers and get those that fit.
 */
export class WorkerDispatcher implements WorkerSender {
  /** Reserves workers under the limit (see {@link workerReserver}); a start's `reserve`. */
  readonly reserve: (batchIds: string[]) => Promise<BatchInvocation[]>;

  constructor(
    private readonly sql: Sql,
    /** Sends each invocation (the Lambda Invoke API; locally the invoke endpoint). */
    readonly dispatcher: Dispatcher,
    private readonly limits: WorkerLimits,
  ) {
    this.reserve = workerReserver(sql, limits);
  }

  /**
   * Send up to `n` workers to the open batch `batchId`, marking it dispatched (see `sendWorkers`):
   * how many were sent.
   * @throws the store's or the dispatcher's first error.
   */
  send(batchId: string, n: number, options?: SendWorkersOptions): Promise<number> {
    return sendWorkers({ sql: this.sql, dispatcher: this.dispatcher, reserve: this.reserve }, batchId, n, options);
  }

  /**
   * Send one worker per entry of `batchIds`, batches the caller has already marked dispatched
   * (the scheduler's `claimDispatch`): those the limit has no room for are unmarked, so a later
   * run dispatches them at once. A failed invoke is reported, never thrown.
   */
  async sendClaimed(batchIds: string[]): Promise<ClaimedSent> {
    const reserved = await this.reserve(batchIds);
    const served = new Set(reserved.map((r) => r.batchId));
    for (const batchId of new Set(batchIds)) if (!served.has(batchId)) await undispatch(this.sql, batchId);
    const dispatched: string[] = [];
    const failed: string[] = [];
    await Promise.all(
      reserved.map(async (event) => {
        try {
          await this.dispatcher.invoke(event);
          dispatched.push(event.batchId);
        } catch {
          failed.push(event.batchId);
        }
      }),
    );
    return { dispatched, failed, held: batchIds.length - reserved.length };
  }

  /**
   * Plan fleet invocations toward the desired count, at most `cap` (see `planInvocations`: the
   * surplus is asked to retire), and invoke them, each continuing `options.chain` when given. A
   * failed invoke is reported in `errors`, never thrown.
   * @throws the store's error of the plan.
   */
  async sendFleet(cap: number, options: SendWorkersOptions = {}): Promise<FleetSent> {
    const within = options.within ?? (<T>(step: Promise<T>) => step);
    const plan = await within(
      planInvocations(this.sql, { cap, pendingMs: this.limits.invocationPendingMs, maxWorkers: this.limits.maxWorkers }),
    );
    const chain = options.chain ? { chain: options.chain } : {};
    const errors: unknown[] = [];
    const sent = await Promise.allSettled(
      plan.invocations.map((invocationId) => within(this.dispatcher.invoke({ invocationId, ...chain }))),
    );
    for (const r of sent) if (r.status === 'rejected') errors.push(r.reason);
    return { plan, invoked: sent.length - errors.length, errors };
  }
}

/**
 * Dispatches through the Lambda Invoke API as asynchronous (`Event`) invocations of the worker
 * function. The endpoint follows the SDK's configuration, so locally `AWS_ENDPOINT_URL_LAMBDA`
 * points it at the local invoke endpoint. `@aws-sdk/client-lambda` is loaded on the first
 * invoke, not when the function's code is (a worker that dispatches nothing never pays for it:
 * docs/design.md, "Serverless runtime"); the default client is created then too, with the SDK's
 * standard retries (3 attempts). A retry may deliver an event whose first try had landed: every
 * event names its invocation, which only one delivery can claim, so the retry's delivery is stale
 * (docs/design.md, "Late and repeated worker events").
 * @throws the SDK's error when the invoke is refused.
 */
export class LambdaDispatcher implements Dispatcher {
  private client: LambdaClient | undefined;

  constructor(
    private readonly functionName: string,
    client?: LambdaClient,
  ) {
    this.client = client;
  }

  async invoke(event: WorkerEvent): Promise<void> {
    const { InvokeCommand, LambdaClient } = await import('@aws-sdk/client-lambda');
    this.client ??= new LambdaClient({});
    const out = await this.client.send(
      new InvokeCommand({
        FunctionName: this.functionName,
        InvocationType: 'Event',
        Payload: new TextEncoder().encode(JSON.stringify(event)),
      }),
    );
    if (out.StatusCode !== 202) throw new Error(`invoke of ${this.functionName} answered ${out.StatusCode}`);
  }
}
