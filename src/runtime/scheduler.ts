import type { S3Client } from '@aws-sdk/client-s3';
import type { Dispatcher } from '../batch/index.js';
import type { JobRegistry } from '../jobs/index.js';
import type { Log } from '../log.js';
import { checkSchema, type SchemaRange, type Sql } from '../store/index.js';
import type { Config } from './config.js';
import { WorkerDispatcher } from './dispatch.js';
import type { SendOptions, SendResult } from './events.js';
import { actionsService, type ActionsPart } from './maintenance/actions.js';
import { balanceService, type BalancePart } from './maintenance/balance.js';
import { deadlinesService, type DeadlinesPart } from './maintenance/deadlines.js';
import { deferredService, type DeferredPart } from './maintenance/deferred.js';
import { dispatchService, type DispatchPart } from './maintenance/dispatch.js';
import { eventsService, type EventsPart } from './maintenance/events.js';
import { fleetService, type FleetPart } from './maintenance/fleet.js';
import { quarantineService, type QuarantinePart } from './maintenance/quarantine.js';
import { resultsService, type ResultsPart } from './maintenance/results.js';
import { retentionService, type RetentionPart } from './maintenance/retention.js';
import { runServices, type MaintenanceContext } from './maintenance/service.js';
import { sweepService, type SweepPart } from './maintenance/sweep.js';
import { waitsService, type WaitsPart } from './maintenance/waits.js';

/**
 * What one scheduler run did: the part each maintenance service answered (see each service's
 * file under `maintenance/`), and `lockTimeouts`, the services that gave up on a lock another
 * session held past the pool's `lock_timeout` (`sweep`, `retention`): this run did the others,
 * the next one tries these again; absent when none.
 */
export type SchedulerResult = SweepPart &
  QuarantinePart &
  DeadlinesPart &
  ActionsPart &
  WaitsPart &
  DeferredPart &
  DispatchPart &
  FleetPart &
  BalancePart &
  ResultsPart &
  EventsPart &
  RetentionPart & { lockTimeouts?: SchedulerServiceName[] };

/** The names of the scheduler's services (`sweep`, `quarantine`, `deferred`, …). */
export type SchedulerServiceName = ReturnType<typeof schedulerServices>[number]['name'];

/** The scheduler's maintenance services, in the order one run runs them, with the settings of `config`. */
export function schedulerServices(config: Config) {
  // Typed by inference: the tuple's names make `SchedulerServiceName`.
  return [
    sweepService(config.lease),
    quarantineService(),
    deadlinesService(),
    actionsService(),
    waitsService(),
    deferredService(),
    dispatchService({
      staleMs: config.runner.staleMs,
      cooldownMs: config.dispatchCooldownMs,
      maxRunning: config.runner.maxRunning,
    }),
    fleetService({ invokeCap: config.invokeCap }),
    balanceService(config.lease),
    resultsService(),
    eventsService(),
    retentionService(config.retention),
  ] as const;
}

/**
 * One scheduler run (EventBridge, every minute; locally a timer), docs/design.md "Serverless
 * runtime". Its first statement checks the schema version against `deps.schema` (default
 * `SUPPORTED_SCHEMA`): old code after a migration does nothing (docs/design.md, "Schema
 * versions"). Then it runs its maintenance services in order (`schedulerServices`): the sweep
 * deletes processes expired past the cutoff and frees their units, and the quarantines that are
 * over are lifted; open batches past their deadline end `failed` (reason `deadline`); the bulk actions the
 * API did not finish are worked on (for at most 10 s); waiting
 * items whose callback timed out or whose sleep ended wake (docs/design.md, "Waiting items"); with `jobs`, the trigger firings deferred at `maxOpen` whose datasource has a
 * free slot start; dispatch sends workers to the open batches below their target or with a stale
 * run, and the fleet's invocations bring the live fleet processes to the desired count (or ask
 * the surplus to retire), both under the worker limit; the fleet's balance and the runs of open
 * batches are read for the metrics; results still due are written and the Batch Finished events
 * left unsent are sent (`deps.events`); retention comes last, so that it never delays the
 * fleet's work.
 *
 * One failing service stops none of the others: the sweep and retention give up on a lock
 * timeout (`lockTimeouts`), and any other failure is logged and thrown once every service ran.
 * A failed invoke is reported, never thrown; nothing depends on a chain of worker invocations
 * (replacements, continuations) that the platform could cut: this run redoes their work.
 * @throws {SchemaMismatchError} the database's schema is outside that range; nothing was done.
 * @throws the first error of a service that failed (not on a lock timeout), after the others ran.
 */
export async function runScheduler(
  deps: {
    sql: Sql;
    config: Config;
    dispatcher: Dispatcher;
    schema?: SchemaRange;
    /** Sends the Batch Finished events left unsent (see `sendEvents`); default none. */
    events?: (options?: SendOptions) => Promise<SendResult>;
    /** The S3 client that writes results still due; default the container's (`defaultS3Client`). */
    s3?: () => S3Client;
  } & ({ jobs?: undefined } | { jobs: JobRegistry; log: Log }),
): Promise<SchedulerResult> {
  await checkSchema(deps.sql, deps.schema);
  const workers = new WorkerDispatcher(deps.sql, deps.dispatcher, deps.config);
  const ctx: MaintenanceContext = deps.jobs ? { ...deps, workers, log: deps.log } : { ...deps, workers, jobs: undefined };
  const { parts, lockTimeouts, error } = await runServices(ctx, schedulerServices(deps.config));
  if (error !== undefined) throw error;
  return { ...(parts as SchedulerResult), ...(lockTimeouts.length ? { lockTimeouts } : {}) };
}
