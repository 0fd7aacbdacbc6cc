// The runner's functions and what they share (SST v4 `sst.aws.Function`, `sst.aws.CronV2`).
//
// Every function that talks to the database runs in the VPC on nodejs22.x, connects as the
// runner's IAM-authenticated user and may `rds-db:connect` as that user only. Only the
// functions that dispatch — the scheduler, the API, the trigger (a new batch is sent to a worker
// at once) and the worker itself (continuations, replacements) — may invoke the worker:
// `lambda:InvokeFunction` on the worker's ARN, nothing wider; the migration may not.
import { functionName, RUNTIME, type StageSettings } from './config.js';
import type { DatabaseConnection } from './database.js';
import type { AwsIdentity } from './identity.js';
import { afterMigrations } from './migrations.js';
import type { Network } from './network.js';

/** What every runner function is built from. */
export interface Runner {
  settings: StageSettings;
  net: Network;
  db: DatabaseConnection;
  migration: aws.lambda.Invocation;
  /** The worker's function name, fixed so its own environment and ARN can name it. */
  workerName: string;
  /** `lambda:InvokeFunction` on the worker only. */
  invokeWorker: { actions: string[]; resources: $util.Input<string>[] };
  /** `rds-db:connect` as the runner's user only. */
  connectDatabase: { actions: string[]; resources: $util.Input<string>[] };
}

/** The shared parts of the runner's functions. */
export function runner(
  settings: StageSettings,
  net: Network,
  db: DatabaseConnection,
  ids: AwsIdentity,
  migration: aws.lambda.Invocation,
): Runner {
  const workerName = functionName($app.name, $app.stage, 'worker');
  return {
    settings,
    net,
    db,
    migration,
    workerName,
    invokeWorker: {
      actions: ['lambda:InvokeFunction'],
      resources: [$interpolate`arn:${ids.partition}:lambda:${ids.region}:${ids.accountId}:function:${workerName}`],
    },
    connectDatabase: { actions: ['rds-db:connect'], resources: [db.userArn] },
  };
}

/**
 * The environment of every runner function; src/runtime's configuration reads it (with
 * `AWS_REGION`, which Lambda sets). No password: with `LEASEHOLD_DB_IAM_AUTH=true` the password
 * is an `@aws-sdk/rds-signer` token for host, port and user.
 */
export function runnerEnvironment(r: Runner): Record<string, $util.Input<string>> {
  return {
    LEASEHOLD_DB_HOST: r.db.host,
    LEASEHOLD_DB_PORT: r.db.port,
    LEASEHOLD_DB_NAME: r.db.name,
    LEASEHOLD_DB_USER: r.db.user,
    LEASEHOLD_DB_IAM_AUTH: 'true',
    LEASEHOLD_WORKER_FUNCTION: r.workerName,
    LEASEHOLD_DEADLINE_MARGIN_MS: String(r.settings.worker.deadlineMarginMs),
    LEASEHOLD_DRAIN_MS: String(r.settings.worker.drainMs),
  };
}

/**
 * A runner function named `${app}-${stage}-${role}`: in the VPC, on nodejs22.x, with the runner's
 * environment, database access, `extra` permissions, and deployed after the migrations.
 */
export function runnerFunction(
  r: Runner,
  role: string,
  args: { timeoutSeconds: number; invokesWorker: boolean; memory?: `${number} MB`; concurrency?: { reserved: number }; retries?: number },
) {
  return new sst.aws.Function(role[0]!.toUpperCase() + role.slice(1), {
    name: role === 'worker' ? r.workerName : functionName($app.name, $app.stage, role),
    handler: `functions/${role}.handler`,
    runtime: RUNTIME,
    vpc: r.net.functionVpc,
    timeout: `${args.timeoutSeconds} seconds`,
    ...(args.memory ? { memory: args.memory } : {}),
    ...(args.concurrency ? { concurrency: args.concurrency } : {}),
    ...(args.retries !== undefined ? { retries: args.retries } : {}),
    environment: runnerEnvironment(r),
    permissions: args.invokesWorker ? [r.connectDatabase, r.invokeWorker] : [r.connectDatabase],
    transform: { function: afterMigrations(r.migration) },
  });
}

/**
 * The worker: one invocation is one process. Its timeout (15 min by default) leaves room for the
 * deadline margin and the drain; its reserved concurrency caps the live processes. Async
 * invocations are not retried by Lambda: the scheduler replaces a worker that failed.
 */
export function worker(r: Runner) {
  const w = r.settings.worker;
  return runnerFunction(r, 'worker', {
    timeoutSeconds: w.timeoutSeconds,
    memory: w.memory,
    concurrency: { reserved: w.reservedConcurrency },
    retries: 0,
    invokesWorker: true,
  });
}

/** The scheduler, every minute on EventBridge Scheduler: sweeps, dispatches, keeps the desired count. */
export function scheduler(r: Runner) {
  const fn = runnerFunction(r, 'scheduler', { timeoutSeconds: r.settings.timeouts.schedulerSeconds, invokesWorker: true });
  new sst.aws.CronV2('SchedulerCron', { function: fn, schedule: 'rate(1 minute)' });
  return fn;
}
