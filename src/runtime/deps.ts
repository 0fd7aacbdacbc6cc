import { defaultRegistry, type JobRegistry } from '../jobs/index.js';
import { connect, type Sql } from '../store/index.js';
import { defaultUnitJobs, UnitRunner, type UnitJobRegistry } from '../units/index.js';
import { jsonLog } from './log.js';
import type { UnitReconciler } from './worker.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { LambdaDispatcher, type Dispatcher } from './dispatch.js';

/** Everything a function needs, built once per container and reused across invocations. */
export interface RuntimeDeps {
  config: Config;
  sql: Sql;
  jobs: JobRegistry;
  /** Unit jobs, by name (`outbox-delivery` built in). */
  unitJobs: UnitJobRegistry;
  /** Builds the reconciler that runs unit jobs for one worker process. */
  units: (processId: string) => UnitReconciler;
  dispatcher: Dispatcher;
}

let cached: RuntimeDeps | undefined;

/**
 * The container's dependencies: configuration from the environment, one small postgres pool,
 * the batch and unit job registries, the unit runner factory and the Lambda dispatcher. Built on first use, then reused.
 * @throws {ConfigError} a setting is invalid or `DATABASE_URL` is missing.
 */
export function runtimeDeps(): RuntimeDeps {
  if (cached) return cached;
  const config = loadConfig();
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL', 'is required');
  const sql = connect(config.databaseUrl, { max: config.dbPoolMax, idleTimeoutS: 60 });
  const unitJobs = defaultUnitJobs();
  const log = jsonLog('units');
  cached = {
    config,
    sql,
    jobs: defaultRegistry({ allowedRoots: config.allowedRoots, maxItems: config.maxItems }),
    unitJobs,
    units: (processId) => new UnitRunner({ sql, processId, jobs: unitJobs, log }),
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
