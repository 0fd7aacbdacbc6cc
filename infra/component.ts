// The Leasehold SST component: everything a runner needs on AWS, pointed at the app's handler
// file (docs/design.md, "Serverless runtime").
//
// - network: a VPC with NAT (or the subnets of an existing one);
// - database: RDS PostgreSQL with IAM auth and TLS required (or an existing database), optionally
//   behind an RDS Proxy with end-to-end IAM auth for the worker, the API and the trigger;
// - migrations on every deploy, before any other function gets its new code;
// - the worker, the scheduler (every minute), the API (IAM auth on every route) and the trigger
//   (an EventBridge bus and the declared schedules), all running the app's handler file;
// - least privilege: `rds-db:connect` as the runner's user only (the scheduler: as its own user
//   only); `lambda:InvokeFunction` on the worker for the functions that dispatch, and on the
//   `invokable` functions for the worker; never `*`;
// - the connection budget: the worker's reserved concurrency times the pool size fits the
//   runner's user's connection limit, which the migration sets (settings.ts, ConnectionBudget);
// - the worker's recursive loop detection, set deliberately (WorkerSettings.recursiveLoop);
// - a dead-letter queue for trigger events whose start failed after Lambda's retries.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  arnResource,
  platform,
  transform,
  type Args,
  type FunctionLike,
  type Input,
  type Output,
  type Platform,
  type ResourceOptions,
  type Transform,
} from './platform.js';
import {
  functionName,
  kebab,
  pascal,
  resolveSettings,
  BUNDLING,
  RUNTIME,
  scheduleEvent,
  rulesPattern,
  START_BATCH_DETAIL_TYPE,
  type Settings,
  type SettingsOptions,
} from './settings.js';

/** The API's routes: the paths of docs/api.md, every method (the handler answers 405 for a method a path lacks). */
export const API_ROUTES: readonly string[] = [
  'ANY /batches',
  'ANY /batches/{id}',
  'ANY /batches/{id}/items',
  'ANY /batches/{id}/cancel',
  'ANY /batches/{id}/redrive',
  'ANY /batches/{id}/finished',
  // Tenant-scoped twins of the batch routes: an IAM policy may allow one tenant's paths only.
  'ANY /tenants/{tenant}/batches',
  'ANY /tenants/{tenant}/batches/{id}',
  'ANY /tenants/{tenant}/batches/{id}/items',
  'ANY /tenants/{tenant}/batches/{id}/cancel',
  'ANY /tenants/{tenant}/batches/{id}/redrive',
  'ANY /tenants/{tenant}/batches/{id}/finished',
  'ANY /jobs',
  'ANY /tenants/{tenant}',
  'ANY /tenants/{tenant}/limits',
  'ANY /tenants/{tenant}/units',
  'ANY /tenants/{tenant}/units/{shard}/release',
  'ANY /tenants/{tenant}/outbox',
  'ANY /units',
  'ANY /processes',
  'ANY /concurrency',
];

/** Variables the component sets on the functions; `environment` may not set them too. */
const OWN_VARIABLES =
  /^(LEASEHOLD_DB_|LEASEHOLD_WORKER_FUNCTION$|LEASEHOLD_MAX_WORKERS$|LEASEHOLD_DEADLINE_MARGIN_MS$|LEASEHOLD_WORKER_TIMEOUT_MS$|LEASEHOLD_DRAIN_MS$|LEASEHOLD_INVOKABLE$|LEASEHOLD_MIGRATIONS_DIR$|LEASEHOLD_EVENT_BUS$|LEASEHOLD_RULES$|LEASEHOLD_WEBHOOK_SECRET$)/;

/** A function `lambda-invoke` batches may call: an `sst.aws.Function`, or a function name or ARN. */
export type InvokableFunction = FunctionLike | string;

/** An IAM statement for a function's role. */
export interface Permission {
  actions: string[];
  resources: Input<string>[];
}

/**
 * Transforms of what the component creates, SST-style: an object merged over the args, or a
 * function editing args and options in place. `function` applies to every function, before the
 * function's own.
 */
export interface LeaseholdTransforms {
  vpc?: Transform;
  database?: Transform;
  /** With `database.proxy`: the `aws.rds.Proxy`. */
  databaseProxy?: Transform;
  /** With `database.proxy`: its `aws.rds.ProxyDefaultTargetGroup` (the pool's settings). */
  databaseProxyTargetGroup?: Transform;
  /** With `database.proxy`: the `aws.iam.Role` the proxy connects to the instance with. */
  databaseProxyRole?: Transform;
  function?: Transform;
  worker?: Transform;
  scheduler?: Transform;
  api?: Transform;
  trigger?: Transform;
  migrate?: Transform;
  /** The `aws.lambda.Invocation` that runs the migrations on every deploy. */
  migrations?: Transform;
  httpApi?: Transform;
  bus?: Transform;
  /** The scheduler's every-minute `sst.aws.CronV2`. */
  schedulerCron?: Transform;
  /** Each declared schedule's `sst.aws.CronV2`. */
  schedule?: Transform;
  /** The worker's `aws.lambda.FunctionRecursionConfig`. */
  workerRecursion?: Transform;
  /** The `sst.aws.Queue` that keeps trigger events whose start failed. */
  triggerFailures?: Transform;
}

/** What `new Leasehold(name, args)` takes. Durations are in seconds or ms as their names say. */
export interface LeaseholdArgs extends SettingsOptions {
  /**
   * The app's handler file, relative to sst.config.ts, with or without its extension
   * (`src/leasehold`): it exports `worker`, `scheduler`, `api`, `trigger` and `migrate`
   * (`createHandlers` from `leasehold/lambda`). Every function points at one export of it.
   */
  handlers: string;
  /**
   * Functions `lambda-invoke` batches may call, by the name batches use (`functionName`): an
   * `sst.aws.Function`, a function name or an ARN each (`{ score: scoreFn, legacy: 'legacy-report' }`);
   * or a list of names and ARNs, each known by its function name. The worker's role may invoke
   * these and nothing else but the worker; a start naming another function is refused (400).
   * Default none.
   */
  invokable?: Readonly<Record<string, InvokableFunction>> | readonly string[];
  /** More environment variables for every function (the runtime's `LEASEHOLD_*` settings, your jobs' own). */
  environment?: Record<string, Input<string>>;
  /** SST links for the worker, scheduler, API and trigger: the resources your jobs use. */
  link?: unknown[];
  /**
   * S3 buckets batches read items from and result prefixes they write to (docs/design.md,
   * "Sources and results"); least privilege: `sources` (bucket names) give the worker
   * `s3:ListBucket` on each bucket and `s3:GetObject` on its objects, and the API and trigger the
   * same to check a start's source; `results` (`{ bucket, prefix }`) give the worker and the
   * scheduler `s3:PutObject` on `prefix*` of that bucket only, and the API and trigger
   * `s3:ListBucket` on the bucket (HeadBucket at start). Wildcards are refused. Default none.
   */
  s3?: { sources?: readonly string[]; results?: readonly { bucket: string; prefix: string }[] };
  /** More IAM statements for the worker, scheduler, API and trigger: what your jobs do. */
  permissions?: Permission[];
  /**
   * The key Batch Finished webhooks (`notify`) are signed with (`LEASEHOLD_WEBHOOK_SECRET`, at
   * least 16 characters, or `whsec_` + base64), e.g. `new sst.Secret('WebhookSecret').value`.
   * Without it a start with `notify` is refused. Default none.
   */
  webhookSecret?: Input<string>;
  transform?: LeaseholdTransforms;
}

/** The Leasehold component, as `new Leasehold(…)` returns it. */
export interface Leasehold {
  /** The HTTP API's URL (callers sign with SigV4 and need `execute-api:Invoke`). */
  readonly url: Output<string>;
  /** The EventBridge bus whose `leasehold.start-batch` events start batches. */
  readonly busName: Output<string>;
  readonly busArn: Output<string>;
  /** The worker function's name (fixed, so its own environment can name it). */
  readonly workerName: string;
  /** The database's host (the instance's, also with `database.proxy`). */
  readonly databaseHost: Input<string>;
  /** The settings deployed, defaults applied. */
  readonly settings: Settings;
  /** What the component created, for wiring beyond its options. */
  readonly nodes: {
    vpc?: unknown;
    database?: unknown;
    /** With `database.proxy`: the RDS Proxy the worker, the API and the trigger connect to. */
    databaseProxy?: unknown;
    worker: FunctionLike;
    scheduler: FunctionLike;
    api: FunctionLike;
    trigger: FunctionLike;
    migrate: FunctionLike;
    migrations: unknown;
    httpApi: unknown;
    bus: unknown;
    /** The worker's recursion setting. */
    workerRecursion: unknown;
    /** The trigger's dead-letter queue: events whose start failed after Lambda's two retries. */
    triggerFailures: { arn: Output<string>; url: Output<string> };
  };
}

/** Constructs the component: `new Leasehold('Runner', { handlers: 'src/leasehold' })`. */
export interface LeaseholdConstructor {
  new (name: string, args: LeaseholdArgs, opts?: ResourceOptions): Leasehold;
}

/** The component's Pulumi type. */
export const COMPONENT_TYPE = 'leasehold:aws:Leasehold';

const classes = new WeakMap<object, LeaseholdConstructor>();

/**
 * A leasehold runner on AWS, for `run()` of sst.config.ts:
 *
 * ```ts
 * const { Leasehold } = await import('leasehold/sst');
 * const runner = new Leasehold('Runner', { handlers: 'src/leasehold', invokable: { score } });
 * return { api: runner.url };
 * ```
 *
 * It creates the network, the database (or uses an existing one), the migrations, the five
 * functions running the app's handler file, their schedule, the HTTP API, the bus and the declared
 * schedules, with least-privilege IAM (see the module comment). A Pulumi component resource of
 * type {@link COMPONENT_TYPE}; every resource it creates is its child.
 * @throws {Error} an option that cannot work (the message names it), the handler file is missing,
 *   or SST's globals are (used outside `run()`).
 */
export const Leasehold = function Leasehold(name: string, args: LeaseholdArgs, opts?: ResourceOptions): Leasehold {
  // The class extends SST's `$util.ComponentResource`, which exists only inside `run()`: made
  // on first use there (and again if the globals change, as between test evaluations).
  const p = platform();
  let Component = classes.get(p.$util.ComponentResource);
  if (!Component) {
    Component = componentClass(p);
    classes.set(p.$util.ComponentResource, Component);
  }
  return new Component(name, args, opts);
} as unknown as LeaseholdConstructor;

function componentClass(p: Platform): LeaseholdConstructor {
  const { sst, aws, $app, $interpolate } = p;

  return class LeaseholdComponent extends p.$util.ComponentResource implements Leasehold {
    readonly url: Output<string>;
    readonly busName: Output<string>;
    readonly busArn: Output<string>;
    readonly workerName: string;
    readonly databaseHost: Input<string>;
    readonly settings: Settings;
    readonly nodes: Leasehold['nodes'];

    constructor(name: string, args: LeaseholdArgs, opts: ResourceOptions = {}) {
      super(COMPONENT_TYPE, name, {}, opts);
      // eslint-disable-next-line @typescript-eslint/no-this-alias -- Pulumi's resource options name their parent
      const parent = this;
      const t = args.transform ?? {};
      const settings = resolveSettings($app.stage, args);
      this.settings = settings;
      const root = p.$cli?.paths?.root ?? process.cwd();
      checkHandlerFile(root, settings.handlers);
      const physical = (role: string) => {
        const n = functionName($app.name, $app.stage, `${kebab(name)}-${role}`);
        if (n.length > 64)
          throw new Error(`function name ${n} is longer than Lambda's 64 characters: use a shorter app, stage or component name`);
        return n;
      };
      const ids = {
        region: aws.getRegionOutput({}, { parent }).region,
        accountId: aws.getCallerIdentityOutput({}, { parent }).accountId,
        partition: aws.getPartitionOutput({}, { parent }).partition,
      };
      const functionArn = (fn: Input<string>) =>
        $interpolate`arn:${ids.partition}:lambda:${ids.region}:${ids.accountId}:function:${fn}`;
      const create = <T>(
        Ctor: new (n: string, a: Args, o?: ResourceOptions) => T,
        logical: string,
        base: Args,
        ...ts: (Transform | undefined)[]
      ) => {
        let a = base;
        let o: ResourceOptions = { parent };
        for (const each of ts) [a, o] = transform(each, logical, a, o);
        return new Ctor(logical, a, o);
      };

      // Network.
      let vpc: InstanceType<Platform['sst']['aws']['Vpc']> | undefined;
      let functionVpc: unknown;
      if (settings.network.kind === 'existing') {
        functionVpc = { privateSubnets: settings.network.privateSubnets, securityGroups: settings.network.securityGroups };
      } else {
        vpc = create(sst.aws.Vpc, `${name}Vpc`, { az: 2, nat: settings.network.nat }, t.vpc);
        functionVpc = vpc;
        if (settings.network.lambdaEndpoint) {
          new aws.ec2.VpcEndpoint(
            `${name}LambdaEndpoint`,
            {
              vpcId: vpc.id,
              serviceName: $interpolate`com.amazonaws.${ids.region}.lambda`,
              vpcEndpointType: 'Interface',
              privateDnsEnabled: true,
              subnetIds: vpc.privateSubnets,
              securityGroupIds: vpc.securityGroups,
            },
            { parent },
          );
        }
      }

      // Database: the runner's functions connect as one IAM-authenticated user, so no password
      // reaches them; TLS is required by the server (SST's parameter group sets rds.force_ssl=0).
      const db = settings.database;
      let postgres: InstanceType<Platform['sst']['aws']['Postgres']> | undefined;
      let connection: {
        host: Input<string>;
        port: Input<string>;
        name: Input<string>;
        user: string;
        /** The scheduler's own user: the runner's user with an existing database (which may not alter roles). */
        schedulerUser: string;
        userArn: (user: string) => Output<string>;
      };
      if (db.kind === 'existing') {
        connection = {
          host: db.host,
          port: String(db.port),
          name: db.name,
          user: db.user,
          schedulerUser: db.user,
          userArn: (user) =>
            $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${db.resourceId}/${user}`,
        };
      } else {
        if (!vpc) throw new Error("an RDS database needs the component's own VPC");
        postgres = create(
          sst.aws.Postgres,
          `${name}Database`,
          {
            vpc,
            version: db.version,
            instance: db.instance,
            storage: db.storage,
            multiAz: db.multiAz,
            database: db.name,
            transform: {
              instance: {
                iamDatabaseAuthenticationEnabled: true,
                // Production keeps a final snapshot and cannot be deleted by accident.
                deletionProtection: settings.production,
                skipFinalSnapshot: !settings.production,
                ...(settings.production ? { finalSnapshotIdentifier: physical('final') } : {}),
              },
              parameterGroup: { parameters: [{ name: 'rds.force_ssl', value: '1' }] },
            },
          },
          t.database,
        );
        const resourceId = postgres.nodes.instance.resourceId;
        connection = {
          host: postgres.host,
          port: $interpolate`${postgres.port}`,
          name: postgres.database,
          user: db.user,
          schedulerUser: db.schedulerUser,
          userArn: (user) =>
            $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${resourceId}/${user}`,
        };
      }
      const connectDatabase: Permission = { actions: ['rds-db:connect'], resources: [connection.userArn(connection.user)] };

      // The proxy (database.proxy): the worker, the API and the trigger reach the instance through
      // it, in pooler mode. Clients sign their IAM tokens for the proxy's endpoint; the proxy logs
      // in to the instance as the same user with IAM too (end to end, no secret), through its own
      // role. Its pool keeps to the runner's user's connection limit (settings.budget.proxy).
      let databaseProxy: InstanceType<Platform['aws']['rds']['Proxy']> | undefined;
      let runnerRoute = { host: connection.host, port: connection.port, userArn: connection.userArn, pooler: false };
      if (db.kind === 'rds' && db.proxy && postgres && vpc) {
        const instanceUser = connection.userArn(connection.user);
        const proxyRole = create(
          aws.iam.Role,
          `${name}DatabaseProxyRole`,
          {
            assumeRolePolicy: JSON.stringify({
              Version: '2012-10-17',
              Statement: [{ Effect: 'Allow', Principal: { Service: 'rds.amazonaws.com' }, Action: 'sts:AssumeRole' }],
            }),
            inlinePolicies: [
              {
                name: 'connect',
                policy: $interpolate`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"rds-db:connect","Resource":"${instanceUser}"}]}`,
              },
            ],
          },
          t.databaseProxyRole,
        );
        databaseProxy = create(
          aws.rds.Proxy,
          `${name}DatabaseProxy`,
          {
            name: proxyName($app.name, $app.stage, name),
            engineFamily: 'POSTGRESQL',
            defaultAuthScheme: 'IAM_AUTH',
            requireTls: true,
            roleArn: proxyRole.arn,
            vpcSubnetIds: vpc.privateSubnets,
            vpcSecurityGroupIds: vpc.securityGroups,
          },
          t.databaseProxy,
        );
        const targetGroup = create(
          aws.rds.ProxyDefaultTargetGroup,
          `${name}DatabaseProxyTargetGroup`,
          {
            dbProxyName: databaseProxy.name,
            connectionPoolConfig: {
              maxConnectionsPercent: settings.budget!.proxy!.maxConnectionsPercent,
              // A statement waits at most this long for one of the proxy's connections (its
              // default is 120 s, far past a heartbeat's TTL); then it fails and is retried as
              // any store error.
              connectionBorrowTimeout: 10,
            },
          },
          t.databaseProxyTargetGroup,
        );
        create(aws.rds.ProxyTarget, `${name}DatabaseProxyTarget`, {
          dbProxyName: databaseProxy.name,
          targetGroupName: targetGroup.name,
          dbInstanceIdentifier: postgres.nodes.instance.identifier,
        });
        const proxyResource = arnResource(databaseProxy.arn);
        runnerRoute = {
          host: databaseProxy.endpoint,
          port: '5432',
          userArn: (user) =>
            $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${proxyResource}/${user}`,
          pooler: true,
        };
      }
      /** Where a function connects and the one user it may connect as there. */
      const connectAs = (user: string, route = runnerRoute): Permission => ({
        actions: ['rds-db:connect'],
        resources: [route.userArn(user)],
      });

      const userEnvironment = args.environment ?? {};
      for (const variable of Object.keys(userEnvironment)) {
        if (OWN_VARIABLES.test(variable))
          throw new Error(`environment.${variable}: the component sets it; use its option instead`);
      }

      // Migrations on every deploy: the migrate function connects as the master user (a database
      // created here) to create the runner's user, or as the runner's user through IAM (an
      // existing database). The invocation is replaced on every deploy, so it runs each time.
      const migrateFn = create(
        sst.aws.Function,
        `${name}Migrate`,
        {
          name: physical('migrate'),
          handler: `${settings.handlers}.migrate`,
          runtime: RUNTIME,
          nodejs: BUNDLING,
          vpc: functionVpc,
          timeout: `${settings.migrate.timeoutSeconds} seconds`,
          // Deployed as is in `sst dev` too: the deploy waits on it.
          dev: false,
          // The numbered .sql files are read at run time, not bundled: ship them in the package.
          copyFiles: [{ from: relative(root, migrationsSource(root)), to: 'migrations' }],
          environment: {
            ...userEnvironment,
            LEASEHOLD_DB_HOST: connection.host,
            LEASEHOLD_DB_PORT: connection.port,
            LEASEHOLD_DB_NAME: connection.name,
            LEASEHOLD_MIGRATIONS_DIR: '/var/task/migrations',
            ...(postgres
              ? {
                  LEASEHOLD_DB_USER: postgres.username,
                  LEASEHOLD_DB_PASSWORD: postgres.password,
                  LEASEHOLD_DB_IAM_AUTH: 'false',
                  // The runner's user gets CONNECTION LIMIT = the database's limit − the reserve;
                  // the scheduler's user is created outside it.
                  LEASEHOLD_DB_IAM_USER: connection.user,
                  LEASEHOLD_DB_SCHEDULER_USER: connection.schedulerUser,
                  LEASEHOLD_DB_RESERVED_CONNECTIONS: String(db.reservedConnections),
                }
              : { LEASEHOLD_DB_USER: connection.user, LEASEHOLD_DB_IAM_AUTH: 'true' }),
          },
          permissions: postgres ? [] : [connectDatabase],
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

      // The runner's functions.
      const workerName = physical('worker');
      const invokeWorker: Permission = { actions: ['lambda:InvokeFunction'], resources: [functionArn(workerName)] };
      const invokable = invokableFunctions(args.invokable, functionArn);
      // The bus: start-batch events in, Batch Finished events out (docs/design.md, "Events").
      const bus = create(sst.aws.Bus, `${name}Events`, {}, t.bus);
      // Only those that end batches put events, on this bus only.
      const putEvents: Permission = { actions: ['events:PutEvents'], resources: [bus.arn] };
      const environment: Record<string, Input<string>> = {
        ...userEnvironment,
        LEASEHOLD_EVENT_BUS: bus.name,
        ...(settings.rules.length ? { LEASEHOLD_RULES: JSON.stringify(settings.rules) } : {}),
        ...(args.webhookSecret !== undefined ? { LEASEHOLD_WEBHOOK_SECRET: args.webhookSecret } : {}),
        LEASEHOLD_DB_HOST: runnerRoute.host,
        LEASEHOLD_DB_PORT: runnerRoute.port,
        ...(runnerRoute.pooler ? { LEASEHOLD_DB_POOLER: 'transaction' } : {}),
        LEASEHOLD_DB_NAME: connection.name,
        LEASEHOLD_DB_USER: connection.user,
        LEASEHOLD_DB_IAM_AUTH: 'true',
        LEASEHOLD_DB_POOL_MAX: String(db.poolMax),
        LEASEHOLD_WORKER_FUNCTION: workerName,
        // The worker limit (docs/design.md, "Fan-out"): dispatch never invokes past the
        // reserved concurrency, so Lambda never throttles (and queues) a worker invocation.
        LEASEHOLD_MAX_WORKERS: String(settings.worker.reservedConcurrency),
        LEASEHOLD_DEADLINE_MARGIN_MS: String(settings.worker.deadlineMarginMs),
        LEASEHOLD_WORKER_TIMEOUT_MS: String(settings.worker.timeoutSeconds * 1000),
        LEASEHOLD_DRAIN_MS: String(settings.worker.drainMs),
        ...(invokable.length ? { LEASEHOLD_INVOKABLE: invokableVariable(invokable, $interpolate) } : {}),
      };
      // The scheduler connects to the instance itself, inside the reserve, as the migration does.
      const directRoute = { host: connection.host, port: connection.port, userArn: connection.userArn, pooler: false };
      const routeEnvironment = (route: typeof runnerRoute): Record<string, Input<string>> => {
        const { LEASEHOLD_DB_POOLER: _pooler, ...rest } = environment;
        return {
          ...rest,
          LEASEHOLD_DB_HOST: route.host,
          LEASEHOLD_DB_PORT: route.port,
          ...(route.pooler ? { LEASEHOLD_DB_POOLER: 'transaction' } : {}),
        };
      };
      const s3 = s3Grants(args.s3);
      const runnerFunction = (
        role: 'worker' | 'scheduler' | 'api' | 'trigger',
        extra: Args,
        permissions: Permission[],
        as: { user: string; route?: typeof runnerRoute } = { user: connection.user },
      ) =>
        create(
          sst.aws.Function,
          `${name}${pascal(role)}`,
          {
            name: role === 'worker' ? workerName : physical(role),
            handler: `${settings.handlers}.${role}`,
            runtime: RUNTIME,
            nodejs: BUNDLING,
            vpc: functionVpc,
            ...extra,
            environment: { ...routeEnvironment(as.route ?? runnerRoute), LEASEHOLD_DB_USER: as.user },
            // rds-db:connect as the one user the function connects as, where it connects.
            permissions: [connectAs(as.user, as.route), ...permissions, ...(args.permissions ?? [])],
            ...(args.link ? { link: args.link } : {}),
          },
          t.function,
          t[role],
          afterMigrations(migrations),
        );

      // The worker: one invocation is one process. Its reserved concurrency caps the live
      // processes, and so their connections (settings.budget); async invocations are not retried
      // by Lambda and are dropped once older than maxEventAgeSeconds (the scheduler replaces a
      // worker that failed or never came: WorkerSettings.maxEventAgeSeconds). It invokes itself
      // (continuations, replacements) and the invokable functions.
      const w = settings.worker;
      const worker = runnerFunction(
        'worker',
        {
          timeout: `${w.timeoutSeconds} seconds`,
          memory: w.memory,
          concurrency: { reserved: w.reservedConcurrency },
          retries: 0,
          // SST's own event invoke config of the function (it sets the retries from `retries`).
          transform: {
            eventInvokeConfig: (a: Args) => {
              a.maximumRetryAttempts = 0;
              a.maximumEventAgeInSeconds = w.maxEventAgeSeconds;
            },
          },
        },
        [
          invokeWorker,
          putEvents,
          ...(invokable.length ? [{ actions: ['lambda:InvokeFunction'], resources: invokable.map((f) => f.arn) }] : []),
          ...s3.read,
          ...s3.write,
        ],
      );
      // Set, not left to the account's default: see WorkerSettings.recursiveLoop for the choice.
      const workerRecursion = create(
        aws.lambda.FunctionRecursionConfig,
        `${name}WorkerRecursion`,
        { functionName: worker.name, recursiveLoop: w.recursiveLoop },
        (_a: Args, o: ResourceOptions) => {
          o.dependsOn = [worker];
        },
        t.workerRecursion,
      );
      // Those that dispatch may invoke the worker, nothing wider. The scheduler connects as its
      // own user, outside the fleet's connection limit.
      const scheduler = runnerFunction(
        'scheduler',
        { timeout: `${settings.scheduler.timeoutSeconds} seconds` },
        [invokeWorker, putEvents, ...s3.write],
        {
          user: connection.schedulerUser,
          route: directRoute,
        },
      );
      create(sst.aws.CronV2, `${name}SchedulerCron`, { function: scheduler, schedule: 'rate(1 minute)' }, t.schedulerCron);

      // The HTTP API: every route with IAM auth, also any added later through the transform.
      const api = runnerFunction('api', { timeout: `${settings.api.timeoutSeconds} seconds` }, [
        invokeWorker,
        putEvents,
        ...s3.check,
      ]);
      const httpApi = create(
        sst.aws.ApiGatewayV2,
        `${name}HttpApi`,
        {
          transform: {
            route: {
              args: (props: { auth?: unknown }) => {
                props.auth ??= { iam: true };
              },
            },
          },
        },
        t.httpApi,
      );
      // By ARN: one function for all routes (a handler per route would create one function each).
      for (const route of API_ROUTES) httpApi.route(route, api.arn, { auth: { iam: true } });

      // The trigger: start-batch events on the bus, and the declared schedules. Both invoke it
      // asynchronously: an event whose start keeps failing (a store error; an invalid event is
      // dropped and logged instead) goes to a dead-letter queue after Lambda's two retries, kept
      // 14 days, instead of being lost.
      const triggerFailures = create(
        sst.aws.Queue,
        `${name}TriggerFailures`,
        { transform: { queue: { messageRetentionSeconds: 1_209_600 } } },
        t.triggerFailures,
      );
      const trigger = runnerFunction(
        'trigger',
        {
          timeout: `${settings.trigger.timeoutSeconds} seconds`,
          transform: { function: { deadLetterConfig: { targetArn: triggerFailures.arn } } },
        },
        [invokeWorker, { actions: ['sqs:SendMessage'], resources: [triggerFailures.arn] }, ...s3.check],
      );
      bus.subscribe(`${name}StartBatch`, trigger, { pattern: { detailType: [START_BATCH_DETAIL_TYPE] } });
      // Chaining: the Batch Finished events of the jobs the rules follow.
      if (settings.rules.length) bus.subscribe(`${name}AfterJobs`, trigger, { pattern: rulesPattern(settings.rules) });
      for (const s of settings.schedules) {
        create(
          sst.aws.CronV2,
          `${name}Schedule${pascal(s.name)}`,
          {
            function: trigger,
            schedule: s.schedule,
            ...(s.timezone ? { timezone: s.timezone } : {}),
            enabled: s.enabled ?? true,
            event: scheduleEvent(s),
          },
          t.schedule,
        );
      }

      this.url = httpApi.url;
      this.busName = bus.name;
      this.busArn = bus.arn;
      this.workerName = workerName;
      this.databaseHost = connection.host;
      this.nodes = {
        ...(vpc ? { vpc } : {}),
        ...(postgres ? { database: postgres } : {}),
        ...(databaseProxy ? { databaseProxy } : {}),
        worker,
        scheduler,
        api,
        trigger,
        migrate: migrateFn,
        migrations,
        httpApi,
        bus,
        workerRecursion,
        triggerFailures,
      };
      this.registerOutputs({ url: this.url, busName: this.busName, workerName, databaseHost: this.databaseHost });
    }
  };
}

/**
 * The RDS Proxy's name: `app-stage-component-proxy`, lowercased, with what RDS refuses in a name
 * (anything but letters, digits and single hyphens inside) turned into hyphens.
 * @throws {Error} longer than RDS's 63 characters.
 */
function proxyName(app: string, stage: string, component: string): string {
  const n = `${app}-${stage}-${kebab(component)}-proxy`
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  if (n.length > 63)
    throw new Error(
      `database.proxy: the proxy's name ${n} is longer than RDS's 63 characters: use a shorter app, stage or component name`,
    );
  return /^[a-z]/.test(n) ? n : `p-${n}`;
}

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * The S3 statements of the `s3` option: `read` (worker: list and get the source buckets),
 * `write` (worker, scheduler: put under each result prefix), `check` (API, trigger: what a
 * start's checks call — HeadBucket needs `s3:ListBucket`, HeadObject `s3:GetObject`).
 * @throws Error a bucket that is not a bucket name, a prefix holding `*`.
 */
function s3Grants(option: LeaseholdArgs['s3']): { read: Permission[]; write: Permission[]; check: Permission[] } {
  const sources = [...new Set(option?.sources ?? [])];
  const results = option?.results ?? [];
  for (const b of [...sources, ...results.map((r) => r.bucket)]) {
    if (!BUCKET.test(b)) throw new Error(`s3: "${b}" is not an S3 bucket name (wildcards are refused)`);
  }
  for (const r of results) if (r.prefix.includes('*')) throw new Error(`s3.results: the prefix "${r.prefix}" holds a wildcard`);
  const bucketArn = (b: string) => `arn:aws:s3:::${b}`;
  const read: Permission[] = sources.length
    ? [
        { actions: ['s3:ListBucket'], resources: sources.map(bucketArn) },
        { actions: ['s3:GetObject'], resources: sources.map((b) => `${bucketArn(b)}/*`) },
      ]
    : [];
  const write: Permission[] = results.length
    ? [{ actions: ['s3:PutObject'], resources: results.map((r) => `${bucketArn(r.bucket)}/${r.prefix}*`) }]
    : [];
  const listed = [...new Set([...sources, ...results.map((r) => r.bucket)])];
  const check: Permission[] = [
    ...(listed.length ? [{ actions: ['s3:ListBucket'], resources: listed.map(bucketArn) }] : []),
    ...(sources.length ? [{ actions: ['s3:GetObject'], resources: sources.map((b) => `${bucketArn(b)}/*`) }] : []),
  ];
  return { read, write, check };
}

/** One invokable function: the name batches use, and what `lambda:InvokeFunction` is granted on. */
interface Invokable {
  name: string;
  /** What LEASEHOLD_INVOKABLE names: the function name or ARN given, or the component's ARN. */
  target: Input<string>;
  arn: Input<string>;
}

/**
 * The `invokable` option, normalised.
 * @throws {Error} a name that batches could not use, a wildcard, or a list entry that is not a string.
 */
function invokableFunctions(
  option: LeaseholdArgs['invokable'],
  functionArn: (name: Input<string>) => Output<string>,
): Invokable[] {
  if (option === undefined) return [];
  const entries: [string, InvokableFunction][] = Array.isArray(option)
    ? option.map((ref, i) => {
        if (typeof ref !== 'string')
          throw new Error(`invokable[${i}]: a list takes names and ARNs; give functions by name: { score: scoreFn }`);
        return [functionNameOf(ref), ref] as [string, InvokableFunction];
      })
    : Object.entries(option as Record<string, InvokableFunction>);
  const seen = new Set<string>();
  return entries.map(([name, ref]) => {
    if (
      typeof ref === 'string' &&
      (ref.includes('*') ||
        !/^(arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,140}(:[A-Za-z0-9$_-]{1,128})?$/.test(ref))
    ) {
      throw new Error(`invokable.${name}: "${ref}" is not a Lambda function name or ARN (wildcards are refused)`);
    }
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,139}$/.test(name))
      throw new Error(`invokable: "${name}" is not a name batches can use (letters, digits, ".", "_", "-")`);
    if (seen.has(name)) throw new Error(`invokable: "${name}" is given twice`);
    seen.add(name);
    if (typeof ref === 'string') return { name, target: ref, arn: ref.startsWith('arn:') ? ref : functionArn(ref) };
    if (!ref || typeof ref !== 'object' || !('arn' in ref))
      throw new Error(`invokable.${name}: not an sst.aws.Function, a function name or an ARN`);
    return { name, target: ref.arn, arn: ref.arn };
  });
}

/** `arn:…:function:NAME[:qualifier]` or `NAME[:qualifier]` → `NAME`. */
function functionNameOf(ref: string): string {
  const parts = ref.split(':');
  const at = parts.indexOf('function');
  return (at >= 0 ? parts[at + 1] : parts[0]) ?? ref;
}

/** `LEASEHOLD_INVOKABLE`: `name=target,…`, built from outputs with `$interpolate`. */
function invokableVariable(list: Invokable[], interpolate: Platform['$interpolate']): Output<string> {
  let value: Input<string> = '';
  for (const [i, f] of list.entries()) value = interpolate`${value}${i ? ',' : ''}${f.name}=${f.target}`;
  return value as Output<string>;
}

/**
 * A transform for the runner's functions: the Lambda resource waits for `migration`, so new code
 * takes traffic only after the schema is migrated. Kept when other transforms replaced the
 * function's own `transform.function`.
 */
function afterMigrations(migration: unknown): Transform {
  return (args: Args) => {
    const own = (args.transform ?? {}) as { function?: Transform };
    const before = own.function;
    args.transform = {
      ...own,
      function: (fnArgs: Args, fnOpts: ResourceOptions, fnName: string) => {
        // An object transform is merged into the args in place (SST keeps these args).
        if (typeof before === 'function') before(fnArgs, fnOpts, fnName);
        else if (before) Object.assign(fnArgs, before);
        const deps = fnOpts.dependsOn === undefined ? [] : [fnOpts.dependsOn].flat();
        fnOpts.dependsOn = [...deps, migration];
      },
    };
  };
}

/** @throws {Error} the handler file is not there. */
function checkHandlerFile(root: string, base: string): void {
  const found = ['.ts', '.mts', '.js', '.mjs'].some((ext) => existsSync(join(root, base + ext)));
  if (!found) throw new Error(`handlers: no ${base}.ts (or .mts, .js, .mjs) in ${root}`);
}

/**
 * Where leasehold's migration files are, to ship with the migrate function: the package the app
 * resolves from its root (its sources in a clone of leasehold, else its build), else the package
 * this module lies in.
 * @throws {Error} none is found.
 */
function migrationsSource(root: string): string {
  const packages: string[] = [];
  try {
    packages.push(dirname(createRequire(join(root, 'package.json')).resolve('leasehold/package.json')));
  } catch {
    // not resolvable from the app: look next to this module
  }
  try {
    for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
      const pkg = join(dir, 'package.json');
      if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'leasehold') {
        packages.push(dir);
        break;
      }
    }
  } catch {
    // bundled: import.meta.url is not this package's
  }
  for (const pkg of packages) {
    for (const dir of [join(pkg, 'src', 'store', 'migrations'), join(pkg, 'dist', 'src', 'store', 'migrations')]) {
      if (existsSync(dir)) return dir;
    }
  }
  throw new Error(`leasehold's migration files were not found (is leasehold installed in ${root}?)`);
}
