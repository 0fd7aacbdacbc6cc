import { defaultRegistry, type JobRegistry } from '../jobs/index.js';
import { connect, type Sql } from '../store/index.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { LambdaDispatcher, type Dispatcher } from './dispatch.js';

/** Everything a function needs, built once per container and reused across invocations. */
export interface RuntimeDeps {
  config: Config;
  sql: Sql;
  jobs: JobRegistry;
  dispatcher: Dispatcher;
}

let cached: RuntimeDeps | undefined;

/**
 * The container's dependencies: configuration from the environment, one small postgres pool,
 * the job registry and the Lambda dispatcher. Built on first use, then reused.
 * @throws {ConfigError} a setting is invalid or `DATABASE_URL` is missing.
 */
export function runtimeDeps(): RuntimeDeps {
  if (cached) return cached;
  const config = loadConfig();
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL', 'is required');
  cached = {
    config,
    sql: connect(config.databaseUrl, { max: config.dbPoolMax, idleTimeoutS: 60 }),
    jobs: defaultRegistry({ allowedRoots: config.allowedRoots, maxItems: config.maxItems }),
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
