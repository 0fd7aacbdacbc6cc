// The Leasehold component's functions (docs/deploy.md, "What it creates"): the migrate function
// and its every-deploy invocation, the environment the runner's functions share (its variable
// names are src/contract.ts's), the worker (with its recursion setting) and the scheduler (with
// its every-minute schedule). The API's and the trigger's wiring are api-routes.ts and trigger.ts.
import { relative } from 'node:path';
import { COMPONENT_VARIABLES as V, DB_VARIABLE_PREFIX } from '../src/contract.js';
import type { Permission } from './args.js';
import type { Build } from './build.js';
import { connectAs, type Connection, type Route } from './database.js';
import { migrationsSource } from './files.js';
import { afterMigrations, invokableVariable, type Invokable } from './grants.js';
import type { Args, FunctionLike, Input, Output, Platform, ResourceOptions } from './platform.js';
import { BUNDLING, pascal, RUNTIME } from './settings.js';

type Postgres = InstanceType<Platform['sst']['aws']['Postgres']>;

/** Variables the component sets on the functions; `environment` may not set them too. */
const OWN_VARIABLES: ReadonlySet<string> = new Set(Object.values(V));

/**
 * The app's `environment` option.
 * @throws {Error} it sets a variable the component sets (or any database variable).
 */
export function userEnvironment(b: Build): Record<string, Input<string>> {
  const env = b.args.environment ?? {};
  for (const variable of Object.keys(env)) {
    if (variable.startsWith(DB_VARIABLE_PREFIX) || OWN_VARIABLES.has(variable))
      throw new Error(`environment.${variable}: the component sets it; use its option instead`);
  }
  return env;
}

/**
 * Migrations on every deploy: the migrate function connects as the master user (a database
 * created here) to create the runner's user, or as the runner's user through IAM (an existing
 * database). The invocation is replaced on every deploy, so it runs each time.
 */
export function migrateFunction(
  b: Build,
  at: { functionVpc: unknown; postgres?: Postgres; connection: Connection; environment: Record<string, Input<string>> },
): { migrateFn: FunctionLike; migrations: unknown } {
  const { settings, name, t, create, physical, root } = b;
  const { sst, aws, $app } = b.p;
  const { postgres, connection } = at;
  const migrateFn = create(
    sst.aws.Function,
    `${name}Migrate`,
    {
      name: physical('migrate'),
      handler: `${settings.handlers}.migrate`,
      runtime: RUNTIME,
      nodejs: BUNDLING,
      vpc: at.functionVpc,
      timeout: `${settings.migrate.timeoutSeconds} seconds`,
      // Deployed as is in `sst dev` too: the deploy waits on it.
      dev: false,
      // The numbered .sql files are read at run time, not bundled: ship them in the package.
      copyFiles: [{ from: relative(root, migrationsSource(root)), to: 'migrations' }],
      environment: {
        ...at.environment,
        [V.dbHost]: connection.host,
        [V.dbPort]: connection.port,
        [V.dbName]: connection.name,
        [V.migrationsDir]: '/var/task/migrations',
        ...(postgres
          ? {
              [V.dbUser]: postgres.username,
              [V.dbPassword]: postgres.password,
              [V.dbIamAuth]: 'false',
              // The runner's user gets CONNECTION LIMIT = the database's limit − the reserve;
              // the scheduler's user is created outside it.
              [V.dbIamUser]: connection.user,
              [V.dbSchedulerUser]: connection.schedulerUser,
              [V.dbReservedConnections]: String(settings.database.reservedConnections),
            }
          : { [V.dbUser]: connection.user, [V.dbIamAuth]: 'true' }),
      },
      permissions: postgres ? [] : [{ actions: ['rds-db:connect'], resources: [connection.userArn(connection.user)] }],
    },
    t.function,
    t.migrate,
  );
  const migrations = create(
    aws.lambda.Invocation,
    `${name}Migrations`,
    {
      functionName: migrateFn.name,
      input: JSON.stringify({ stage: $app.stage }),
      triggers: { deployedAt: String(Date.now()) },
    },
    (_a: Args, o: ResourceOptions) => {
      o.dependsOn = [migrateFn];
    },
    t.migrations,
  );
  return { migrateFn, migrations };
}

/** What the runner's functions are wired to: where they connect, the bus, the worker. */
export interface RunnerWiring {
  functionVpc: unknown;
  connection: Connection;
  /** Where the worker, the API and the trigger connect (the proxy with `database.proxy`). */
  runnerRoute: Route;
  migrations: unknown;
  workerName: string;
  busName: Input<string>;
  invokable: Invokable[];
  environment: Record<string, Input<string>>;
}

/** The role of one of the runner's functions: the export of the handler file it runs. */
export type RunnerRole = 'worker' | 'scheduler' | 'api' | 'trigger' | 'events';

/** Creates one of the runner's functions: `extra` args, `permissions` beyond its database grant, the user it connects as. */
export type RunnerFunction = (
  role: RunnerRole,
  extra: Args,
  permissions: Permission[],
  as?: { user: string; route?: Route },
) => FunctionLike;

/** The environment every runner function shares, before its own route and user. */
function runnerEnvironment(b: Build, w: RunnerWiring): Record<string, Input<string>> {
  const { settings, args } = b;
  const route = w.runnerRoute;
  return {
    ...w.environment,
    [V.eventBus]: w.busName,
    ...(settings.rules.length ? { [V.rules]: JSON.stringify(settings.rules) } : {}),
    ...(args.webhookSecret !== undefined ? { [V.webhookSecret]: args.webhookSecret } : {}),
    [V.dbHost]: route.host,
    [V.dbPort]: route.port,
    ...(route.pooler ? { [V.dbPooler]: 'transaction' } : {}),
    [V.dbName]: w.connection.name,
    [V.dbUser]: w.connection.user,
    [V.dbIamAuth]: 'true',
    [V.dbPoolMax]: String(settings.database.poolMax),
    [V.workerFunction]: w.workerName,
    // The worker limit (docs/design.md, "Fan-out"): dispatch never invokes past the
    // reserved concurrency, so Lambda never throttles (and queues) a worker invocation.
    [V.maxWorkers]: String(settings.worker.reservedConcurrency),
    [V.deadlineMarginMs]: String(settings.worker.deadlineMarginMs),
    [V.workerTimeoutMs]: String(settings.worker.timeoutSeconds * 1000),
    [V.drainMs]: String(settings.worker.drainMs),
    ...(w.invokable.length ? { [V.invokable]: invokableVariable(w.invokable, b.p.$interpolate) } : {}),
  };
}

/** The factory of the runner's functions: each runs its export of the handler file, after the migrations. */
export function runnerFunctions(b: Build, w: RunnerWiring): RunnerFunction {
  const { settings, name, t, args, create, physical } = b;
  const { sst } = b.p;
  const environment = runnerEnvironment(b, w);
  const routeEnvironment = (route: Route): Record<string, Input<string>> => {
    const { [V.dbPooler]: _pooler, ...rest } = environment;
    return {
      ...rest,
      [V.dbHost]: route.host,
      [V.dbPort]: route.port,
      ...(route.pooler ? { [V.dbPooler]: 'transaction' } : {}),
    };
  };
  return (role, extra, permissions, as = { user: w.connection.user }) =>
    create(
      sst.aws.Function,
      `${name}${pascal(role)}`,
      {
        name: role === 'worker' ? w.workerName : physical(role),
        handler: `${settings.handlers}.${role}`,
        runtime: RUNTIME,
        nodejs: BUNDLING,
        vpc: w.functionVpc,
        ...extra,
        // `extra.environment` adds to (or overrides) the shared variables.
        environment: {
          ...routeEnvironment(as.route ?? w.runnerRoute),
          [V.dbUser]: as.user,
          ...(extra.environment as Record<string, Input<string>> | undefined),
        },
        // rds-db:connect as the one user the function connects as, where it connects.
        permissions: [connectAs(as.user, as.route ?? w.runnerRoute), ...permissions, ...(args.permissions ?? [])],
        ...(args.link ? { link: args.link } : {}),
      },
      t.function,
      t[role],
      afterMigrations(w.migrations),
    );
}

/**
 * The progress stream's function (docs/deploy.md, "Progress stream"): `GET /batches/{id}/events`
 * through a function URL with response streaming, IAM-authorised (callers need
 * `lambda:InvokeFunctionUrl`). It only reads batches, so it gets no grant beyond its database
 * connection, and a pool of one connection: one stream at a time per instance, one poller.
 */
export function eventsFunction(b: Build, runnerFunction: RunnerFunction): FunctionLike & { url: Output<string> } {
  return runnerFunction(
    'events',
    {
      timeout: `${b.settings.events.timeoutSeconds} seconds`,
      url: { authorization: 'iam' },
      streaming: true,
      environment: { [V.dbPoolMax]: '1' },
    },
    [],
  ) as FunctionLike & { url: Output<string> };
}

/** The grants the runner's functions pick from. */
export interface RunnerGrants {
  /** `lambda:InvokeFunction` on the worker: for those that dispatch, nothing wider. */
  invokeWorker: Permission;
  /** `events:PutEvents` on the component's bus: for those that end batches. */
  putEvents: Permission;
  s3: { read: Permission[]; write: Permission[]; check: Permission[] };
}

/**
 * The worker and the scheduler. The worker: one invocation is one process. Its reserved
 * concurrency caps the live processes, and so their connections (settings.budget); async
 * invocations are not retried by Lambda and are dropped once older than maxEventAgeSeconds (the
 * scheduler replaces a worker that failed or never came: WorkerSettings.maxEventAgeSeconds). It
 * invokes itself (continuations, replacements) and the invokable functions. The scheduler runs
 * every minute and connects as its own user, to the instance itself, outside the fleet's
 * connection limit.
 */
export function workerAndScheduler(
  b: Build,
  runnerFunction: RunnerFunction,
  g: RunnerGrants,
  w: Pick<RunnerWiring, 'connection' | 'invokable'>,
): { worker: FunctionLike; workerRecursion: unknown; scheduler: FunctionLike } {
  const { settings, name, t, create } = b;
  const { sst, aws } = b.p;
  const ws = settings.worker;
  const worker = runnerFunction(
    'worker',
    {
      timeout: `${ws.timeoutSeconds} seconds`,
      memory: ws.memory,
      concurrency: { reserved: ws.reservedConcurrency },
      retries: 0,
      // SST's own event invoke config of the function (it sets the retries from `retries`).
      transform: {
        eventInvokeConfig: (a: Args) => {
          a.maximumRetryAttempts = 0;
          a.maximumEventAgeInSeconds = ws.maxEventAgeSeconds;
        },
      },
    },
    [
      g.invokeWorker,
      g.putEvents,
      ...(w.invokable.length ? [{ actions: ['lambda:InvokeFunction'], resources: w.invokable.map((f) => f.arn) }] : []),
      ...g.s3.read,
      ...g.s3.write,
    ],
  );
  // Set, not left to the account's default: see WorkerSettings.recursiveLoop for the choice.
  const workerRecursion = create(
    aws.lambda.FunctionRecursionConfig,
    `${name}WorkerRecursion`,
    { functionName: worker.name, recursiveLoop: ws.recursiveLoop },
    (_a: Args, o: ResourceOptions) => {
      o.dependsOn = [worker];
    },
    t.workerRecursion,
  );
  // The scheduler connects to the instance itself, inside the reserve, as the migration does.
  const c = w.connection;
  const directRoute: Route = { host: c.host, port: c.port, userArn: c.userArn, pooler: false };
  const scheduler = runnerFunction(
    'scheduler',
    { timeout: `${settings.scheduler.timeoutSeconds} seconds` },
    [g.invokeWorker, g.putEvents, ...g.s3.write],
    { user: c.schedulerUser, route: directRoute },
  );
  create(sst.aws.CronV2, `${name}SchedulerCron`, { function: scheduler, schedule: 'rate(1 minute)' }, t.schedulerCron);
  return { worker, workerRecursion, scheduler };
}
