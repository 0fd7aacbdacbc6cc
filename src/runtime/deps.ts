import { defaultRegistry, type JobRegistry } from '../jobs/index.js';
import type { Sql } from '../store/index.js';
import { defaultUnitJobs, UnitRunner, type UnitJobRegistry } from '../units/index.js';
import { jsonLog } from './log.js';
import type { UnitReconciler } from './worker.js';
import { loadConfig, type Config } from './config.js';
import { openDatabase } from './db.js';
import { LambdaDispatcher, type Dispatcher } from './dispatch.js';
import type { Log } from './log.js';

/** Everything a function needs, built once per container and reused across invocations. */
export interface RuntimeDeps {
  config: Config;
  sql: Sql;
  jobs: JobRegistry;
  /** Unit jobs, by name (`outbox-delivery` built in). */
  unitJobs: UnitJobRegistry;
  /** Builds the reconciler that runs unit jobs for one worker process, logging to `log`. */
  units: (processId: string, log?: Log, leaseValid?: () => boolean) => UnitReconciler;
  dispatcher: Dispatcher;
}

let cached: RuntimeDeps | undefined;

/**
 * The container's dependencies: configuration from the environment, one small postgres pool
 * (`DATABASE_URL`, or the RDS host with IAM tokens and verified TLS: see {@link openDatabase}),
 * the batch and unit job registries, the unit runner factory and the Lambda dispatcher. Built
 * on first use (the cold start), then reused.
 * @throws {ConfigError} a setting is invalid, or neither `DATABASE_URL` nor `LEASEHOLD_DB_HOST` is set.
 */
export function runtimeDeps(): RuntimeDeps {
  if (cached) return cached;
  const config = loadConfig();
  const sql = openDatabase(config);
  const unitJobs = defaultUnitJobs();
  const unitsLog = jsonLog('units');
  cached = {
    config,
    sql,
    jobs: defaultRegistry({ allowedRoots: config.allowedRoots, maxItems: config.maxItems }),
    unitJobs,
    units: (processId, log = unitsLog, leaseValid) => new UnitRunner({ sql, processId, jobs: unitJobs, log, leaseValid }),
    dispatcher: new LambdaDispatcher(config.workerFunction),
  };
  return cached;
}

/** Forget the cached dependencies, closing the pool (local mode and tests). */
export async function resetRuntimeDeps(): Promise<void> {
  const c = cached;
  cached = undefined;
  await c?.sql.end({ timeout: 5 });
}
