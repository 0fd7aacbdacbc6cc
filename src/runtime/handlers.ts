// What each Lambda function does per invocation, given the context the middlewares built.
// functions/*.ts only wrap these in their middy chains.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { handleApi } from '../api/index.js';
import { DEFAULT_MIGRATIONS_DIR, migrate, type Migration, type RuntimeRoleResult } from '../store/index.js';
import { loadConfig, ConfigError, type Config } from './config.js';
import { openDatabase } from './db.js';
import { runtimeDeps } from './deps.js';
import type { Dispatcher, WorkerEvent } from './dispatch.js';
import { recordFleetBalance, workerMetricHooks, type RuntimeMetrics } from './metrics.js';
import { invocationOf } from './middleware.js';
import { runScheduler, type SchedulerResult } from './scheduler.js';
import { handleTrigger, type TriggerResult } from './trigger.js';
import { runWorker, type WorkerResult } from './worker.js';

/** The worker's deadline margin, for the invocation middleware (reads the configuration). */
export function workerMarginMs(): number {
  return runtimeDeps().config.deadlineMarginMs;
}

/**
 * One worker invocation (async `Event` invoke with `{ batchId?, invocationId? }`): a process
 * with the container's dependencies, the invocation's log, the worker metric hooks and the
 * deadline signal. See {@link runWorker}.
 */
export async function workerInvocation(event: WorkerEvent | null | undefined, context: Context): Promise<WorkerResult> {
  const deps = runtimeDeps();
  const { log, metrics, deadline } = invocationOf(context);
  return runWorker(event ?? {}, context, { ...deps, log, hooks: workerMetricHooks(metrics), signal: deadline });
}

/**
 * One scheduler run (every minute): see {@link runScheduler}. Logs the result and records
 * `ProcessesSwept`, `BatchesDispatched`, `DispatchFailures`, `WorkersInvoked`, the levels
 * `LiveProcesses`, `DesiredProcesses`, `PendingInvocations`, and the fleet's balance
 * (`recordFleetBalance`).
 */
export async function schedulerInvocation(_event: unknown, context: Context): Promise<SchedulerResult> {
  const deps = runtimeDeps();
  const { log, metrics } = invocationOf(context);
  const result = await runScheduler(deps);
  log('info', 'scheduler run', { ...result });
  metrics.count('ProcessesSwept', result.swept.processes);
  metrics.count('BatchesDispatched', result.dispatched.length);
  metrics.count('DispatchFailures', result.failed.length);
  metrics.count('WorkersInvoked', result.invoked);
  metrics.level('LiveProcesses', result.fleet.live);
  metrics.level('DesiredProcesses', result.fleet.desired);
  metrics.level('PendingInvocations', result.fleet.pending);
  recordFleetBalance(metrics, result);
  return result;
}

/**
 * One HTTP API request (API Gateway HTTP API, payload 2.0): {@link handleApi} parses, validates
 * and maps errors to statuses itself. Records `BatchesStarted` (a new batch is dispatched at
 * once, so every dispatch of the API is one) and `ServerErrors` (5xx answers).
 */
export async function apiInvocation(event: APIGatewayProxyEventV2, context: Context): Promise<APIGatewayProxyStructuredResultV2> {
  const deps = runtimeDeps();
  const { log, metrics } = invocationOf(context);
  const result = await handleApi(event, { ...deps, log, dispatcher: counting(deps.dispatcher, metrics) });
  if ((result.statusCode ?? 200) >= 500) metrics.count('ServerErrors');
  return result;
}

function counting(dispatcher: Dispatcher, metrics: RuntimeMetrics): Dispatcher {
  return {
    invoke: (e) => {
      if (e.batchId) metrics.count('BatchesStarted');
      return dispatcher.invoke(e);
    },
  };
}

/**
 * One EventBridge event for the trigger: see {@link handleTrigger}. Never throws for an invalid
 * event (it is logged and dropped); a store error is thrown, so EventBridge retries the event.
 */
export async function triggerInvocation(event: unknown, context: Context): Promise<TriggerResult> {
  const deps = runtimeDeps();
  const { log, metrics } = invocationOf(context);
  return handleTrigger(event, { ...deps, log, metrics });
}

/** What the migrate function did. */
export interface MigrateResult {
  /** Migrations applied now, in order; empty when the schema was current. */
  applied: Migration[];
  /** What was done for `LEASEHOLD_DB_IAM_USER`, when set. */
  runtimeRole?: RuntimeRoleResult;
}

/**
 * The migrate function, invoked at deploy time before new code takes traffic: applies every
 * pending migration (`migrate()`, safe when two run at once) and returns them.
 *
 * Connection: like every function (`DATABASE_URL`, else `LEASEHOLD_DB_HOST`/…), but as the user
 * that owns leasehold's tables. For a database the stage created, that is the master user with
 * its password (`LEASEHOLD_DB_USER`, `LEASEHOLD_DB_PASSWORD`, `LEASEHOLD_DB_IAM_AUTH=false`), and
 * `LEASEHOLD_DB_IAM_USER` names the runtime functions' user, which the migration then creates
 * (`login`), grants `rds_iam` (when it exists: on RDS) and row access to leasehold's tables. Only
 * the migrate function gets the master password; the runtime functions authenticate with IAM
 * tokens. For an existing database the migration may connect as the runtime user itself through
 * IAM (`LEASEHOLD_DB_IAM_AUTH=true`), which then owns the tables and needs no grants.
 *
 * Migration files: `LEASEHOLD_MIGRATIONS_DIR`, else `migrations/` next to the code (bundled: next
 * to the function's `.mjs`, where the deploy copies `src/store/migrations`), else
 * `src/store/migrations` under `LAMBDA_TASK_ROOT`. The pool is closed before returning.
 * @throws {ConfigError} a setting is invalid or no migration files are found.
 * @throws the database error of a failing migration (the deploy fails with it).
 */
export async function migrateInvocation(_event: unknown, context: Context): Promise<MigrateResult> {
  const config = loadConfig();
  const dir = migrationsDir(config);
  const sql = openDatabase(config, { max: 1, applicationName: 'leasehold-migrate' });
  try {
    let runtimeRole: RuntimeRoleResult | undefined;
    const applied = await migrate(sql, {
      dir,
      ...(config.db.iamUser ? { runtimeRole: { name: config.db.iamUser } } : {}),
      onRuntimeRole: (r) => (runtimeRole = r),
    });
    invocationOf(context).log('info', 'migrated', { applied: applied.map((m) => m.name), runtimeRole, dir });
    return { applied, ...(runtimeRole ? { runtimeRole } : {}) };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function migrationsDir(config: Pick<Config, 'migrationsDir'>): string {
  const hasSql = (d: string) => existsSync(d) && readdirSync(d).some((n) => /^\d+_.+\.sql$/.test(n));
  if (config.migrationsDir) {
    if (!hasSql(config.migrationsDir)) throw new ConfigError('LEASEHOLD_MIGRATIONS_DIR', `holds no migration files (${config.migrationsDir})`);
    return config.migrationsDir;
  }
  const candidates = [DEFAULT_MIGRATIONS_DIR, join(process.env.LAMBDA_TASK_ROOT ?? process.cwd(), 'src', 'store', 'migrations')];
  const found = candidates.find(hasSql);
  if (!found) {
    throw new ConfigError(
      'LEASEHOLD_MIGRATIONS_DIR',
      `no migration files in ${candidates.join(' or ')}: deploy src/store/migrations next to the function's bundle as migrations/, or set this variable`,
    );
  }
  return found;
}
