// What each Lambda function does per invocation, given the app's runtime dependencies and the
// context the middlewares built. createHandlers (src/lambda.ts) wraps these in their middy chains.
//
// The five functions run one handler file (an app's runner exports all five), so whatever this
// module imports statically every function loads at its cold start. Only the worker's path is
// imported here; the API, the scheduler, the trigger and the migration are imported by their own
// handler on its first invocation (a worker, the function started most often, never loads them).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { checkSchema, SchemaMismatchError, type SchemaRange } from '../store/schema.js';
import type { Migration } from '../store/migrate.js';
import type { RuntimeRoleResult } from '../store/roles.js';
import { loadConfig, ConfigError, type Config } from './config.js';
import { openDatabase, prepareDatabase, retryRefusedConnection } from './db.js';
import type { RuntimeDeps } from './deps.js';
import { WorkerDispatcher } from './dispatch.js';
import type { Dispatcher, WorkerEvent } from '../batch/dispatch.js';
import {
  recordFleetBalance,
  recordRetention,
  recordRuns,
  recordUnconfirmed,
  workerMetricHooks,
  type RuntimeMetrics,
} from './metrics.js';
import { invocationOf } from './middleware.js';
import type { SchedulerResult } from './scheduler.js';
import type { TriggerResult } from '../trigger/trigger.js';
import { runWorker, type WorkerResult } from './worker.js';
import { errorFields, type Log } from '../log.js';

/**
 * One worker invocation (async `Event` invoke with `{ batchId?, invocationId? }`): a process
 * with the container's dependencies, the invocation's log, the worker metric hooks and the
 * deadline signal. See {@link runWorker}.
 */
export async function workerInvocation(
  deps: RuntimeDeps,
  event: WorkerEvent | null | undefined,
  context: Context,
): Promise<WorkerResult> {
  const { log, metrics, deadline } = invocationOf(context);
  return runWorker(event ?? {}, context, {
    ...deps,
    log,
    hooks: workerMetricHooks(metrics),
    signal: deadline,
    sendEvents: (batchId) => deps.sendEvents(log, { batchId, budgetMs: deps.config.runner.storeTimeoutMs }),
  });
}

/** What a scheduler invocation answers when the schema is outside what this code supports: it did nothing. */
export interface SchemaSkipped {
  skipped: 'schema';
  schemaVersion: number;
  supported: SchemaRange;
}

/**
 * One scheduler run (every minute): see {@link runScheduler}. Logs the result and records
 * `ProcessesSwept`, `BatchesDispatched`, `DispatchFailures`, `WorkersInvoked`, the levels
 * `LiveProcesses`, `DesiredProcesses`, `PendingInvocations`, the invocations unconfirmed
 * (`recordUnconfirmed`), the fleet's balance
 * (`recordFleetBalance`), the runs of open batches (`recordRuns`) and what retention deleted
 * (`recordRetention`). When the schema is outside what this code supports it does nothing, logs
 * one line and answers {@link SchemaSkipped}.
 */
export async function schedulerInvocation(
  deps: RuntimeDeps,
  _event: unknown,
  context: Context,
): Promise<SchedulerResult | SchemaSkipped> {
  const { log, metrics, deadlineAt } = invocationOf(context);
  const { runScheduler } = await import('./scheduler.js');
  // The fleet may hold every connection its budget allows: a refused connection is retried
  // within the invocation (see retryRefusedConnection).
  let result: SchedulerResult;
  try {
    result = await retryRefusedConnection(() => runScheduler({ ...deps, log, events: (o) => deps.sendEvents(log, o) }), {
      untilMs: Math.min(deadlineAt, Date.now() + deps.config.db.connectRetryMs),
      onRetry: (e, waitMs) => log('warn', 'database connection refused; retrying', { error: errorFields(e), waitMs }),
    });
  } catch (error) {
    // Old code after a migration (or new code before it): the next run, of the right code, does the work.
    if (!(error instanceof SchemaMismatchError)) throw error;
    log('error', `scheduler did nothing: ${error.message}`, { schemaVersion: error.version, supported: error.supported });
    return { skipped: 'schema', schemaVersion: error.version, supported: error.supported };
  }
  log('info', 'scheduler run', { ...result });
  metrics.count('ProcessesSwept', result.swept.processes);
  metrics.count('BatchesDispatched', result.dispatched.length);
  metrics.count('DispatchFailures', result.failed.length);
  metrics.count('WorkersInvoked', result.invoked);
  metrics.level('LiveProcesses', result.fleet.live);
  metrics.level('DesiredProcesses', result.fleet.desired);
  metrics.level('PendingInvocations', result.fleet.pending);
  recordUnconfirmed(metrics, result);
  recordFleetBalance(metrics, result);
  recordRetention(metrics, result);
  recordRuns(metrics, result);
  return result;
}

/**
 * One HTTP API request (API Gateway HTTP API, payload 2.0): {@link handleApi} parses, validates
 * and maps errors to statuses itself. Records `BatchesStarted` (a new batch is dispatched at
 * once, so every dispatch of the API is one) and `ServerErrors` (5xx answers). A database whose
 * schema is outside what this code supports is answered 503 `schema_mismatch` (checked first).
 */
export async function apiInvocation(
  deps: RuntimeDeps,
  event: APIGatewayProxyEventV2,
  context: Context,
): Promise<APIGatewayProxyStructuredResultV2> {
  const { log, metrics, deadlineAt } = invocationOf(context);
  const { handleApi } = await import('../api/router.js');
  // Old code after a migration answers nothing it would have to act on (docs/design.md, "Schema versions").
  // The first statement opens the connection: a refused login is retried within the request.
  const mismatch = await firstStatement(deps, log, deadlineAt).then(
    () => undefined,
    (e: unknown) => (e instanceof SchemaMismatchError ? e : undefined),
  );
  if (mismatch) {
    log('error', `api answered 503: ${mismatch.message}`, { schemaVersion: mismatch.version, supported: mismatch.supported });
    metrics.count('ServerErrors');
    return {
      statusCode: 503,
      headers: { 'content-type': 'application/json', 'retry-after': '5' },
      body: JSON.stringify({ error: { code: mismatch.code, message: mismatch.message } }),
    };
  }
  const result = await handleApi(event, {
    ...deps,
    log,
    workers: new WorkerDispatcher(deps.sql, counting(deps.dispatcher, metrics), deps.config),
    sendEvents: (batchId) => deps.sendEvents(log, { batchId, budgetMs: 5_000 }),
  });
  if ((result.statusCode ?? 200) >= 500) metrics.count('ServerErrors');
  return result;
}

/**
 * The schema check an API request or a trigger event starts with, retrying a refused connection
 * (an IAM login refused for its rate, a full server: `isConnectionRefused`) with full jitter
 * until `LEASEHOLD_DB_CONNECT_RETRY_MS` or 1 s before the deadline, as the scheduler does; once
 * it is answered the pool holds an open connection for the rest of the invocation.
 */
function firstStatement(deps: RuntimeDeps, log: Log, deadlineAt: number): Promise<void> {
  return retryRefusedConnection(async () => void (await checkSchema(deps.sql)), {
    untilMs: Math.min(deadlineAt - 1_000, Date.now() + deps.config.db.connectRetryMs),
    onRetry: (e, waitMs) => log('warn', 'database connection refused; retrying', { error: errorFields(e), waitMs }),
  });
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
 * @throws {SchemaMismatchError} the database's schema is outside what this code supports (checked
 *   first; nothing started): the event is retried.
 */
export async function triggerInvocation(deps: RuntimeDeps, event: unknown, context: Context): Promise<TriggerResult> {
  const { log, metrics, deadlineAt } = invocationOf(context);
  const { handleTrigger } = await import('../trigger/trigger.js');
  // Old code after a migration starts nothing: thrown, so Lambda retries the event (on new code).
  await firstStatement(deps, log, deadlineAt).catch((e: unknown) => {
    if (e instanceof SchemaMismatchError) log('error', `trigger did nothing: ${e.message}`, { schemaVersion: e.version });
    throw e;
  });
  return handleTrigger(event, { ...deps, log, metrics, rules: deps.config.events.rules });
}

/** What the migrate function did. */
export interface MigrateResult {
  /** Migrations applied now, in order; empty when the schema was current. */
  applied: Migration[];
  /** What was done for `LEASEHOLD_DB_IAM_USER`, when set (its `connectionLimit` is the runtime's budget). */
  runtimeRole?: RuntimeRoleResult;
  /** What was done for `LEASEHOLD_DB_SCHEDULER_USER`, when set. */
  schedulerRole?: RuntimeRoleResult;
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
  const { DEFAULT_MIGRATIONS_DIR, migrate } = await import('../store/migrate.js');
  const dir = migrationsDir(config, DEFAULT_MIGRATIONS_DIR);
  await prepareDatabase(config);
  const sql = openDatabase(config, { max: 1, applicationName: 'leasehold-migrate' });
  try {
    let runtimeRole: RuntimeRoleResult | undefined;
    let schedulerRole: RuntimeRoleResult | undefined;
    const { iamUser, schedulerUser, runtimeConnections, reservedConnections } = config.db;
    const { log, deadlineAt } = invocationOf(context);
    const applied = await retryRefusedConnection(
      () =>
        migrate(sql, {
          dir,
          // The runtime's connection budget: the database's limit less a reserve it never takes.
          ...(iamUser
            ? { runtimeRole: { name: iamUser, connectionLimit: runtimeConnections ?? { reserve: reservedConnections } } }
            : {}),
          ...(schedulerUser ? { schedulerRole: { name: schedulerUser } } : {}),
          onRuntimeRole: (r) => (r.name === iamUser ? (runtimeRole = r) : (schedulerRole = r)),
          // Lock timeouts are retried until shortly before the invocation's deadline.
          lockRetryMs: Math.max(0, deadlineAt - Date.now() - 5_000),
          onLockWait: ({ tries, waitMs, elapsedMs, error }) =>
            log('warn', 'migration waited for a lock past its lock_timeout; rolled back, retrying', {
              tries,
              waitMs,
              elapsedMs: Math.round(elapsedMs),
              error: errorFields(error),
            }),
        }),
      {
        untilMs: Math.min(deadlineAt, Date.now() + config.db.connectRetryMs),
        onRetry: (e, waitMs) => log('warn', 'database connection refused; retrying', { error: errorFields(e), waitMs }),
      },
    );
    log('info', 'migrated', { applied: applied.map((m) => m.name), runtimeRole, schedulerRole, dir });
    return { applied, ...(runtimeRole ? { runtimeRole } : {}), ...(schedulerRole ? { schedulerRole } : {}) };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function migrationsDir(config: Pick<Config, 'migrationsDir'>, defaultDir: string): string {
  const hasSql = (d: string) => existsSync(d) && readdirSync(d).some((n) => /^\d+_.+\.sql$/.test(n));
  if (config.migrationsDir) {
    if (!hasSql(config.migrationsDir))
      throw new ConfigError('LEASEHOLD_MIGRATIONS_DIR', `holds no migration files (${config.migrationsDir})`);
    return config.migrationsDir;
  }
  const candidates = [defaultDir, join(process.env.LAMBDA_TASK_ROOT ?? process.cwd(), 'src', 'store', 'migrations')];
  const found = candidates.find(hasSql);
  if (!found) {
    throw new ConfigError(
      'LEASEHOLD_MIGRATIONS_DIR',
      `no migration files in ${candidates.join(' or ')}: deploy src/store/migrations next to the function's bundle as migrations/, or set this variable`,
    );
  }
  return found;
}
