import { JobRegistry, type Job } from '../jobs/job.js';
import type { Sql } from '../store/connect.js';
import { UnitJobRegistry, type UnitJob } from '../units/job.js';
import { UnitRunner } from '../units/runner.js';
import type { UnitReconciler } from './worker.js';
import { loadConfig, type Config } from './config.js';
import { openDatabase, prepareDatabase } from './db.js';
import type { Dispatcher, WorkerEvent } from '../batch/dispatch.js';
import { LambdaDispatcher, workerReserver } from './dispatch.js';
import type { Log } from '../log.js';
// Types only: the events module (the outbound HTTP client's address policy, ipaddr.js, the
// events' SQL) is imported on the first send, not at every cold start.
import type { EventPublisher, SendOptions, SendResult } from './events.js';

/** Everything a function needs, built once per container and reused across invocations. */
export interface RuntimeDeps {
  config: Config;
  sql: Sql;
  /** The app's batch jobs. */
  jobs: JobRegistry;
  /** The app's unit jobs, by name. */
  unitJobs: UnitJobRegistry;
  /** Builds the reconciler that runs unit jobs for one worker process, logging to `log`. */
  units: (processId: string, log: Log, leaseValid?: () => boolean) => UnitReconciler;
  dispatcher: Dispatcher;
  /** Reserves the workers a start sends under the worker limit ({@link workerReserver}). */
  reserve: (batchIds: string[]) => Promise<WorkerEvent[]>;
  /**
   * Sends due Batch Finished events (docs/design.md, "Events"): to `LEASEHOLD_EVENT_BUS` with
   * PutEvents, webhooks signed with `LEASEHOLD_WEBHOOK_SECRET`; see `sendEvents`.
   */
  sendEvents: (log: Log, options?: SendOptions) => Promise<SendResult>;
}

/** The jobs an app runs: what `createHandlers` (`leasehold/lambda`) is given. */
export interface AppJobs {
  /** Batch jobs (`defineJob`), unique by name. */
  jobs: readonly Job<unknown, unknown>[];
  /** Unit jobs (`defineUnitJob`), unique by name. */
  unitJobs: readonly UnitJob<unknown>[];
}

/**
 * One app's runtime in a container: its dependencies are built on first use (the cold start)
 * from the environment and the app's jobs, then reused by every invocation.
 */
export interface Runtime {
  /**
   * The container's dependencies: configuration from the environment, one small postgres pool
   * (`DATABASE_URL`, or the RDS host with IAM tokens and verified TLS: see {@link openDatabase}),
   * the app's job registries (jobs see `LEASEHOLD_ALLOWED_ROOTS`, `LEASEHOLD_MAX_ITEMS` and
   * `LEASEHOLD_INVOKABLE`), the unit runner factory and the Lambda dispatcher.
   * @throws {ConfigError} a setting is invalid, or neither `DATABASE_URL` nor `LEASEHOLD_DB_HOST` is set.
   */
  deps(): RuntimeDeps;
  /**
   * Loads what {@link Runtime.deps} needs and a cold start does not load (the RDS certificate
   * authorities, for TLS `rds`: see `prepareDatabase`); `deps()` throws for such a connection
   * until this has settled. The handlers' middleware awaits it before each invocation.
   * @throws {ConfigError} a setting is invalid.
   */
  prepare(): Promise<void>;
  /** Forget the dependencies, closing the pool; the next {@link Runtime.deps} builds them again. */
  reset(): Promise<void>;
}

const runtimes = new Set<Runtime>();

/**
 * The runtime of an app with these jobs (see {@link Runtime}).
 * @throws {Error} two batch jobs or two unit jobs share a name.
 */
export function createRuntime(app: AppJobs): Runtime {
  const jobs = app.jobs;
  const unitJobs = new UnitJobRegistry([...app.unitJobs]);
  // Checked now, so a duplicate name fails where the app is loaded, not at the first invocation.
  new JobRegistry([...jobs], { allowedRoots: [], maxItems: 1 });
  let cached: RuntimeDeps | undefined;
  const runtime: Runtime = {
    async prepare() {
      if (!cached) await prepareDatabase(loadConfig());
    },
    deps() {
      if (cached) return cached;
      const config = loadConfig();
      const sql = openDatabase(config);
      let publisher: EventPublisher | undefined;
      cached = {
        config,
        sql,
        jobs: new JobRegistry([...jobs], {
          allowedRoots: config.allowedRoots,
          maxItems: config.maxItems,
          invokable: config.invokable,
        }),
        unitJobs,
        units: (processId, log, leaseValid) => new UnitRunner({ sql, processId, jobs: unitJobs, log, leaseValid }),
        dispatcher: new LambdaDispatcher(config.workerFunction),
        reserve: workerReserver(sql, config),
        sendEvents: async (log, options) => {
          const events = await import('./events.js');
          if (config.events.bus) publisher ??= new events.EventBridgePublisher(config.events.bus);
          return events.sendEvents(
            { sql, publisher, webhookSecret: config.events.webhookSecret, prices: config.prices, log },
            options,
          );
        },
      };
      return cached;
    },
    async reset() {
      const c = cached;
      cached = undefined;
      await c?.sql.end({ timeout: 5 });
    },
  };
  runtimes.add(runtime);
  return runtime;
}

/** Forget the dependencies of every runtime of this process, closing their pools (local mode and tests). */
export async function resetRuntimeDeps(): Promise<void> {
  await Promise.all([...runtimes].map((r) => r.reset()));
}
