// The shape every maintenance service of the scheduler shares, and the loop that runs them in
// order (docs/design.md, "Serverless runtime"): one service per file, each with its own
// defaults, so that a step of the scheduler has one obvious home.
import type { S3Client } from '@aws-sdk/client-s3';
import type { JobRegistry } from '../../jobs/index.js';
import type { Log } from '../../log.js';
import { errorFields } from '../../log.js';
import { isLockTimeout, type Sql } from '../../store/index.js';
import { traced, tracingRegistered } from '../../tracing.js';
import type { Config } from '../config.js';
import type { WorkerDispatcher } from '../dispatch.js';
import type { SendOptions, SendResult } from '../events.js';

/** What every service of one scheduler run is given: the store, the settings and the senders. */
export interface MaintenanceContext {
  sql: Sql;
  config: Config;
  /** Sends workers under the worker limit: the one home of sending them. */
  workers: WorkerDispatcher;
  /** The app's batch jobs, which the deferred trigger firings start with; absent: none are started. */
  jobs?: JobRegistry;
  /** The scheduler's log; absent: the services log nothing. */
  log?: Log;
  /** Sends the Batch Finished events left unsent (see `sendEvents`); absent: none are sent. */
  events?: (options?: SendOptions) => Promise<SendResult>;
  /** The S3 client that writes results still due; absent: the container's (`defaultS3Client`). */
  s3?: () => S3Client;
}

/**
 * One step of the scheduler: `run` does its work once and answers its part of the scheduler's
 * result. With `onLockTimeout`, a lock another session held past the pool's `lock_timeout`
 * makes it give up for this run (docs/design.md, "Database connections": one locked row delays
 * that step, never the scheduler's other work) and report `onLockTimeout(ctx)` instead.
 */
export interface MaintenanceService<N extends string = string, R extends object = object> {
  readonly name: N;
  run(ctx: MaintenanceContext): Promise<R>;
  /** What the service reports when it gave up on a lock timeout; absent: the timeout is its failure. */
  onLockTimeout?(ctx: MaintenanceContext): R;
}

/** What running the services in order gave: their parts merged, and what gave up or failed. */
export interface ServicesOutcome<N extends string> {
  /** The parts the services answered, merged in order. */
  parts: object;
  /** Services that gave up on a lock timeout (see `MaintenanceService.onLockTimeout`). */
  lockTimeouts: N[];
  /** The first error of a service that failed otherwise; the services after it ran all the same. */
  error?: unknown;
}

/**
 * Run `services` one after the other. A service that fails stops none of the others
 * (invariant 7, docs/design.md): a lock timeout it gives up on is recorded in `lockTimeouts`,
 * any other error is logged (`error`, with the service's name) and the first one kept in
 * `error`, for the caller to throw once every service had its turn.
 */
export async function runServices<N extends string>(
  ctx: MaintenanceContext,
  services: readonly MaintenanceService<N>[],
): Promise<ServicesOutcome<N>> {
  const outcome: ServicesOutcome<N> = { parts: {}, lockTimeouts: [] };
  for (const service of services) {
    try {
      // A span per service when tracing (docs/design.md, "Traces").
      const run = () => service.run(ctx);
      const parts = tracingRegistered()
        ? await traced(`scheduler ${service.name}`, { 'leasehold.service': service.name }, run)
        : await run();
      Object.assign(outcome.parts, parts);
    } catch (error) {
      if (service.onLockTimeout && isLockTimeout(error)) {
        outcome.lockTimeouts.push(service.name);
        Object.assign(outcome.parts, service.onLockTimeout(ctx));
        continue;
      }
      ctx.log?.('error', `scheduler service ${service.name} failed; the others ran`, { error: errorFields(error) });
      if (!('error' in outcome)) outcome.error = error;
    }
  }
  return outcome;
}
