// What a Leasehold component deploys with: its options, their defaults, and the checks that stop
// a deploy before it creates anything wrong. Plain TypeScript with no SST globals, so it can be
// used and tested without SST.
import { BATCH_FINISHED_DETAIL_TYPE, EVENT_SOURCE, SCHEDULE_SOURCE, START_BATCH_DETAIL_TYPE } from '../src/contract.js';
import type { Input } from './platform.js';

/** Stages that are production unless the component is told otherwise: managed NAT, a protected database. */
export const PRODUCTION_STAGES: readonly string[] = ['production', 'prod'];

/** The Lambda runtime of every function. */
export const RUNTIME = 'nodejs22.x';

/**
 * How every function is bundled (SST's `nodejs` options): ESM with code splitting, so what the
 * handler file imports only on first use (the API, the scheduler, the AWS SDK's Lambda client,
 * the outbox's HTTP client…) lands in chunks of its own that a cold start does not load.
 */
export const BUNDLING = { format: 'esm', splitting: true } as const;

/**
 * A schedule that starts a batch: EventBridge Scheduler sends the trigger function an event naming
 * the job, tenant, datasource and params (see {@link scheduleEvent}). The request key of each
 * start is the schedule plus its scheduled time, so a retried delivery starts nothing new.
 */
export interface ScheduleDeclaration {
  /** Unique, lowercase letters, digits and `-`, at most 48 characters; part of the request key. */
  name: string;
  /** `rate(…)`, `cron(…)` or `at(…)`, as EventBridge Scheduler takes it. */
  schedule: `rate(${string})` | `cron(${string})` | `at(${string})`;
  /** IANA time zone of a `cron(…)` expression; default UTC. */
  timezone?: string;
  /** Default true. A disabled schedule is deployed but never fires. */
  enabled?: boolean;
  /** A job of the app's handler file. */
  job: string;
  tenant: string;
  datasource: string;
  params: Record<string, unknown>;
  /**
   * Failed items each batch tolerates: `{ count }` (a whole number ≥ 0) or `{ percent }` (0 to
   * 100) of its items; past that it ends `failed` at once. Default none: any failed item fails
   * the batch once every item ran (docs/design.md, "Batches": "End").
   */
  toleratedFailures?: { count: number } | { percent: number };
  /** Most runs working each batch at once, 1 to 10,000 (docs/design.md, "Fan-out"). Default the deployment's `batchConcurrency`. */
  maxConcurrency?: number;
}

/** How a batch ends, as a rule's `after.status` names it. */
export type FinalStatus = 'succeeded' | 'failed' | 'cancelled';

/**
 * A chain rule: start a batch of `job` when a batch of `after.job` ends with `after.status`
 * (one status or a list; default `succeeded`), optionally only for `after.tenant`. The new batch
 * belongs to `tenant` and `datasource` (default those of the batch that ended) with `params`
 * plus `after` (what ended: `{ eventId, batchId, tenant, datasource, job, requestKey, status,
 * counts, results }`). Its request key is `after:<name>:<event id>`, so a redelivered event
 * starts nothing new. Given in `rules`, or in `schedules` in place of a `schedule`.
 */
export interface RuleDeclaration {
  /** Unique among the rules, lowercase letters, digits and `-`, at most 48 characters; part of the request key. */
  name: string;
  after: { job: string; status?: FinalStatus | FinalStatus[]; tenant?: string };
  /** A job of the app's handler file. */
  job: string;
  tenant?: string;
  datasource?: string;
  params?: Record<string, unknown>;
  toleratedFailures?: { count: number } | { percent: number };
  maxConcurrency?: number;
  /**
   * A chained start not begun this many ms after the batch it follows ended (deferred at
   * `maxOpen`, or its event late) is dropped with a reason (docs/design.md, "Pause, deadline and
   * startBy"). 1 to 366 days. Default none.
   */
  startByMs?: number;
}

/** An RDS PostgreSQL instance the component creates (in its VPC). */
export interface RdsDatabase {
  kind: 'rds';
  /** PostgreSQL major version. Default `17`. */
  version: string;
  /** Instance class without the `db.` prefix. Default `t4g.micro`. */
  instance: string;
  /** Default `20 GB`. */
  storage: `${number} GB`;
  /** Default false. */
  multiAz: boolean;
  /** Database name. Default `leasehold`. */
  name: string;
  /**
   * The runner's user (`LEASEHOLD_DB_IAM_USER`): IAM-authenticated (`rds_iam`), created by the
   * migration with a `CONNECTION LIMIT` of the database's limit minus `reservedConnections`. The
   * worker, the API and the trigger connect as it. Default `leasehold`.
   */
  user: string;
  /**
   * The scheduler's user (`LEASEHOLD_DB_SCHEDULER_USER`): created by the migration like `user` but
   * outside its connection limit, so a fleet that holds every connection it may have never starves
   * the scheduler. Default `leasehold_scheduler`.
   */
  schedulerUser: string;
  /**
   * The instance's `max_connections`. Default: estimated from `instance` the way RDS's default
   * parameter group sets it, `LEAST(DBInstanceClassMemory / 9531392, 5000)`, taking
   * `DBInstanceClassMemory` as the class's memory less 384 MiB for the operating system (a little
   * below what RDS gives: about 70 for `t4g.micro`, where RDS allows about 80). Give it for a class
   * the component does not know, or when a custom parameter group sets it.
   */
  maxConnections?: number;
  /**
   * Connections the runner's user can never take (`LEASEHOLD_DB_RESERVED_CONNECTIONS`): they are
   * for the scheduler's pool, the migrate function and an operator's session. At least
   * `poolMax + 1`. Default 8.
   */
  reservedConnections: number;
  /** Connections per function container (`LEASEHOLD_DB_POOL_MAX`, every function). Default 4. */
  poolMax: number;
  /**
   * Put an RDS Proxy in front of the instance for the worker, the API and the trigger, and run them
   * in pooler mode (`LEASEHOLD_DB_POOLER=transaction`; docs/design.md, "Database connections":
   * poolers). The proxy authenticates them end to end with IAM (its own role connects to the
   * instance as the runner's user, with no secret), requires TLS, and keeps at most the runner's
   * user's connection limit open to the instance (`MaxConnectionsPercent`), multiplexing every
   * container's pool over them transaction by transaction. The scheduler and the migration still
   * connect to the instance directly, inside the reserve.
   *
   * Use it when the fleet's pools no longer fit the database: `worker.reservedConcurrency ×
   * poolMax` (plus the API's and the trigger's containers) beyond the runner's user's limit, or
   * connection storms of many cold starts at once; then the worker's reserved concurrency is no
   * longer held to that limit. The proxy adds a network hop to every statement and costs per
   * vCPU of the instance; a fleet whose pools fit is better served without it ([deploy.md](deploy.md),
   * "Connection budget"). Default false.
   */
  proxy: boolean;
}

/** A database that exists already. */
export interface ExistingDatabase {
  kind: 'existing';
  host: Input<string>;
  /** Default 5432. */
  port: number;
  /** Default `leasehold`. */
  name: string;
  /** The runner's user; must exist with `GRANT rds_iam` and own (or may create) the schema. Default `leasehold`. */
  user: string;
  /** `db-…` resource id of the instance, the `{dbi-resource-id}` of the `rds-db:connect` ARN. */
  resourceId: Input<string>;
  /**
   * The database's `max_connections`, when known: the worker's reserved concurrency is then held
   * to it like for a database the component creates (see {@link ConnectionBudget}). The runner's
   * user gets no `CONNECTION LIMIT` here (the migration runs as that user and may not alter
   * roles), so the scheduler shares it. Default unknown: no check.
   */
  maxConnections?: number;
  /** Connections kept out of the fleet's budget (see {@link RdsDatabase.reservedConnections}). Default 8. */
  reservedConnections: number;
  /** Connections per function container (`LEASEHOLD_DB_POOL_MAX`). Default 4. */
  poolMax: number;
}

/** Subnets and security groups of a VPC that exists already. */
export interface ExistingNetwork {
  kind: 'existing';
  privateSubnets: Input<string>[];
  securityGroups: Input<string>[];
}

/** A VPC the component creates, over two availability zones with NAT for the private subnets. */
export interface NewNetwork {
  kind: 'vpc';
  /** `ec2` (fck-nat instances, cheap) or `managed` (NAT gateways). Default `ec2`, `managed` in production. */
  nat: 'managed' | 'ec2';
  /** Also add a Lambda interface endpoint, so Invoke calls stay inside the VPC. Default false. */
  lambdaEndpoint: boolean;
}

/** The worker function's settings. */
export interface WorkerSettings {
  /** Lambda timeout of one worker invocation, s (at most 900). Default 900. */
  timeoutSeconds: number;
  /** Default `1024 MB`. */
  memory: `${number} MB`;
  /**
   * Reserved concurrency: the most worker processes that can be live at once. Their pools must fit
   * the runner's user's connection limit (see {@link ConnectionBudget}): default 10, or fewer when
   * 10 pools do not fit; a value that does not fit is refused.
   */
  reservedConcurrency: number;
  /**
   * The worker's recursive loop detection (`aws.lambda.FunctionRecursionConfig`). Workers invoke
   * workers (a continuation for each run handed off at the deadline, a replacement for the
   * fleet), each invocation one hop of a chain that Lambda, with `Terminate`, stops after about 16
   * hops, dropping that invocation and notifying the account. Nothing depends on the chain: the
   * scheduler dispatches handed-off batches and brings the live count back to the desired count
   * every minute, so a cut costs at most about a minute of one batch or one process, once every
   * 16 worker lifetimes (about 4 hours at a 15-minute timeout). `Terminate` keeps AWS's guard
   * against a runaway loop (a defect that made workers invoke workers without end would be
   * stopped); `Allow` silences the cuts and their notifications but leaves such a loop running up
   * to the reserved concurrency. Default `Terminate`.
   */
  recursiveLoop: 'Terminate' | 'Allow';
  /**
   * The longest an async invocation of the worker waits in Lambda's queue (throttled at the
   * reserved concurrency) before Lambda drops it, s (60 to 21,600; Lambda's own default is six
   * hours). A worker event is only ever a nudge: the scheduler recovers a lost or dropped worker
   * within a minute (it counts an invocation as coming for its confirmation window only, then
   * invokes again), and a late one would only overshoot the fleet or arrive for a batch long
   * finished, so old events are dropped rather than delivered. Lambda's async retries of the
   * worker are off (0) for the same reason: a failed worker is replaced by the scheduler, not
   * rerun. Default 60.
   */
  maxEventAgeSeconds: number;
  /** `LEASEHOLD_DEADLINE_MARGIN_MS`: a worker stops at remaining time minus this, ms. Default 10,000. */
  deadlineMarginMs: number;
  /** `LEASEHOLD_DRAIN_MS`: how long in-flight items may take to stop at the deadline, ms. Default 5,000. */
  drainMs: number;
}

/** A function's settings, for the functions with nothing else to set. */
export interface FunctionSettings {
  /** Lambda timeout, s. */
  timeoutSeconds: number;
}

/**
 * The fleet's connection budget (docs/design.md, "Serverless runtime"): PostgreSQL keeps
 * `superuserReserved` of `maxConnections` for superusers; the runner's user may hold
 * `runtimeLimit` = the rest less `reservedConnections` (its `CONNECTION LIMIT`, set by the
 * migration); the scheduler (its own user) and the migrate function use the reserve. Every
 * worker holds up to `poolMax`, so `workers × poolMax` must stay within `runtimeLimit`; what is
 * left of it is for the API's and the trigger's containers (a connection past the limit is
 * refused by PostgreSQL, that request fails and is retried, and nothing else is disturbed).
 */
export interface ConnectionBudget {
  /** The database's `max_connections` (given, or estimated from the instance class). */
  maxConnections: number;
  /** `superuser_reserved_connections`: 3, PostgreSQL's and RDS's default. */
  superuserReserved: number;
  reservedConnections: number;
  poolMax: number;
  /** The runner's user's connection limit. */
  runtimeLimit: number;
  /** `worker.reservedConcurrency × poolMax`: the workers' connections (to the proxy, with one). */
  workerConnections: number;
  /**
   * With `database.proxy`: the most connections the proxy opens to the instance (at most
   * `runtimeLimit`), as its target group's `MaxConnectionsPercent` of `maxConnections`.
   */
  proxy?: { maxConnectionsPercent: number; connections: number };
}

/** Everything a component deploys with, defaults applied (see {@link resolveSettings}). */
export interface Settings {
  stage: string;
  production: boolean;
  /** The handler file without its extension, relative to the app's root: `src/leasehold`. */
  handlers: string;
  network: NewNetwork | ExistingNetwork;
  database: RdsDatabase | ExistingDatabase;
  worker: WorkerSettings;
  /** The connection budget, when the database's `max_connections` is known (see {@link ConnectionBudget}). */
  budget: ConnectionBudget | undefined;
  /** Default 50 s (it runs every minute). */
  scheduler: FunctionSettings;
  /** Default 29 s (API Gateway answers within 30 s). */
  api: FunctionSettings;
  /** Default 120 s. */
  trigger: FunctionSettings;
  /** The progress stream's function. Default 900 s: a stream closes 3 s before it and the client reconnects. */
  events: FunctionSettings;
  /** Default 300 s. */
  migrate: FunctionSettings;
  schedules: ScheduleDeclaration[];
  /** Chain rules: from `rules` and the `schedules` given with `after` (see {@link RuleDeclaration}). */
  rules: RuleDeclaration[];
}

/** The options of {@link resolveSettings}: every part optional but the handler file. */
export interface SettingsOptions {
  handlers: string;
  production?: boolean;
  network?: Partial<Omit<NewNetwork, 'kind'>> | { existing: Omit<ExistingNetwork, 'kind'> };
  database?:
    | Partial<Omit<RdsDatabase, 'kind'>>
    | { existing: Partial<Omit<ExistingDatabase, 'kind'>> & Pick<ExistingDatabase, 'host' | 'resourceId'> };
  worker?: Partial<WorkerSettings>;
  scheduler?: Partial<FunctionSettings>;
  api?: Partial<FunctionSettings>;
  trigger?: Partial<FunctionSettings>;
  events?: Partial<FunctionSettings>;
  migrate?: Partial<FunctionSettings>;
  /** Schedules, and chain rules (an entry with `after: { job, status }` in place of `schedule`). */
  schedules?: (ScheduleDeclaration | RuleDeclaration)[];
  /** Chain rules (see {@link RuleDeclaration}). Default none. */
  rules?: RuleDeclaration[];
}

const DEFAULT_RDS: RdsDatabase = {
  kind: 'rds',
  version: '17',
  instance: 't4g.micro',
  storage: '20 GB',
  multiAz: false,
  name: 'leasehold',
  user: 'leasehold',
  schedulerUser: 'leasehold_scheduler',
  reservedConnections: 8,
  poolMax: 4,
  proxy: false,
};

const DEFAULT_WORKER: WorkerSettings = {
  timeoutSeconds: 900,
  memory: '1024 MB',
  reservedConcurrency: 10,
  deadlineMarginMs: 10_000,
  drainMs: 5_000,
  recursiveLoop: 'Terminate',
  maxEventAgeSeconds: 60,
};

/** PostgreSQL's (and RDS's) `superuser_reserved_connections`. */
const SUPERUSER_RESERVED = 3;

/** Memory of the RDS instance classes the component knows, GiB, by size (`t4g.micro` → `micro`). */
const CLASS_MEMORY_GIB: Record<string, Record<string, number>> = {
  t: { micro: 1, small: 2, medium: 4, large: 8, xlarge: 16, '2xlarge': 32 },
  m: { large: 8, xlarge: 16, '2xlarge': 32, '4xlarge': 64, '8xlarge': 128, '12xlarge': 192, '16xlarge': 256 },
  r: { large: 16, xlarge: 32, '2xlarge': 64, '4xlarge': 128, '8xlarge': 256, '12xlarge': 384, '16xlarge': 512 },
};

/**
 * The `max_connections` RDS's default parameter group gives an instance class (`t4g.micro`,
 * `m7g.large`, …): `LEAST(DBInstanceClassMemory / 9531392, 5000)`, with `DBInstanceClassMemory`
 * taken as the class's memory less 384 MiB (RDS keeps some for the operating system; this errs
 * low). Undefined for a class it does not know (families t, m and r, sizes micro to 16xlarge).
 */
export function estimatedMaxConnections(instance: string): number | undefined {
  const m = /^(?:db\.)?([tmr])\d+[a-z]*\.([0-9]*x?[a-z]+)$/.exec(instance);
  const gib = m ? CLASS_MEMORY_GIB[m[1]!]?.[m[2]!] : undefined;
  if (gib === undefined) return undefined;
  return Math.min(5000, Math.floor(((gib * 1024 - 384) * 1_048_576) / 9_531_392));
}

/** Is `stage` a production stage (one of {@link PRODUCTION_STAGES})? */
export function isProduction(stage: string): boolean {
  return PRODUCTION_STAGES.includes(stage);
}

/**
 * The settings of a component on `stage`: the options given, with the defaults for the rest.
 * Production (`production`, default {@link isProduction}) changes the NAT default to `managed`.
 * @throws {Error} an option that cannot work; the message names it.
 */
export function resolveSettings(stage: string, options: SettingsOptions): Settings {
  const production = options.production ?? isProduction(stage);
  const network: Settings['network'] =
    options.network && 'existing' in options.network
      ? { kind: 'existing', ...options.network.existing }
      : {
          kind: 'vpc',
          nat: production ? 'managed' : 'ec2',
          lambdaEndpoint: false,
          ...(options.network as Partial<NewNetwork> | undefined),
        };
  const database: Settings['database'] =
    options.database && 'existing' in options.database
      ? {
          kind: 'existing',
          port: 5432,
          name: 'leasehold',
          user: 'leasehold',
          reservedConnections: 8,
          poolMax: 4,
          ...options.database.existing,
        }
      : { ...DEFAULT_RDS, ...(options.database as Partial<RdsDatabase> | undefined), kind: 'rds' };
  const worker = { ...DEFAULT_WORKER, ...options.worker };
  const budget = connectionBudget(database, worker, options.worker?.reservedConcurrency !== undefined);
  if (budget) worker.reservedConcurrency = budget.workerConnections / budget.poolMax;
  const settings: Settings = {
    stage,
    production,
    handlers: handlerBase(options.handlers),
    network,
    database,
    worker,
    budget,
    scheduler: { timeoutSeconds: 50, ...options.scheduler },
    api: { timeoutSeconds: 29, ...options.api },
    trigger: { timeoutSeconds: 120, ...options.trigger },
    events: { timeoutSeconds: 900, ...options.events },
    migrate: { timeoutSeconds: 300, ...options.migrate },
    schedules: (options.schedules ?? []).filter((s): s is ScheduleDeclaration => !('after' in s)),
    rules: [...(options.rules ?? []), ...(options.schedules ?? []).filter((s): s is RuleDeclaration => 'after' in s)],
  };
  checkSettings(settings);
  return settings;
}

/**
 * The connection budget of `database` (see {@link ConnectionBudget}), with the worker's reserved
 * concurrency: the one given (`explicit`), else the default lowered to what fits.
 * @throws {Error} the budget cannot work, naming the option to change: no `max_connections` known
 *   for an instance class, a reserve that cannot hold the scheduler's pool and the migration, a
 *   runtime limit below one worker's pool, or more worker connections than the runtime limit.
 */
function connectionBudget(
  database: Settings['database'],
  worker: WorkerSettings,
  explicit: boolean,
): ConnectionBudget | undefined {
  const { poolMax, reservedConnections } = database;
  if (!Number.isInteger(poolMax) || poolMax < 1 || poolMax > 100) throw new Error(`database.poolMax: ${poolMax} is not 1..100`);
  if (!Number.isInteger(reservedConnections) || reservedConnections < 1) {
    throw new Error(`database.reservedConnections: ${reservedConnections} is not a positive integer`);
  }
  let maxConnections = database.maxConnections;
  if (maxConnections === undefined && database.kind === 'rds') {
    maxConnections = estimatedMaxConnections(database.instance);
    if (maxConnections === undefined) {
      throw new Error(
        `database.maxConnections: required with instance "${database.instance}", whose max_connections the component does not know ` +
          '(its default parameter group gives LEAST(DBInstanceClassMemory / 9531392, 5000))',
      );
    }
  }
  if (maxConnections === undefined) return undefined;
  if (!Number.isInteger(maxConnections) || maxConnections < 1)
    throw new Error(`database.maxConnections: ${maxConnections} is not a positive integer`);
  // The scheduler's pool and the migrate function's one connection live in the reserve (with an
  // existing database the scheduler shares the runner's user, but the reserve still keeps room).
  if (reservedConnections < poolMax + 1) {
    throw new Error(
      `database.reservedConnections: ${reservedConnections} cannot hold the scheduler's pool (database.poolMax, ${poolMax}) ` +
        `and the migrate function's connection: give at least ${poolMax + 1}`,
    );
  }
  const runtimeLimit = maxConnections - SUPERUSER_RESERVED - reservedConnections;
  const where = `max_connections ${maxConnections} − ${SUPERUSER_RESERVED} for superusers − database.reservedConnections ${reservedConnections}`;
  if (runtimeLimit < poolMax) {
    throw new Error(
      `database.reservedConnections: the runner's user would have ${runtimeLimit} connections (${where}), ` +
        `not one worker's pool (database.poolMax, ${poolMax}): use a larger database.instance, or lower the reserve or the pool`,
    );
  }
  if (database.kind === 'rds' && database.proxy) {
    // The workers' pools reach the proxy, not the instance: only the proxy's own connections count
    // against the runner's user's limit, and the proxy keeps to it.
    const maxConnectionsPercent = Math.floor((100 * runtimeLimit) / maxConnections);
    if (maxConnectionsPercent < 1) {
      throw new Error(
        `database.proxy: the runner's user's ${runtimeLimit} connections are under 1 % of max_connections ${maxConnections}`,
      );
    }
    return {
      maxConnections,
      superuserReserved: SUPERUSER_RESERVED,
      reservedConnections,
      poolMax,
      runtimeLimit,
      workerConnections: worker.reservedConcurrency * poolMax,
      proxy: { maxConnectionsPercent, connections: Math.floor((maxConnectionsPercent * maxConnections) / 100) },
    };
  }
  const fits = Math.floor(runtimeLimit / poolMax);
  const workers = explicit ? worker.reservedConcurrency : Math.min(worker.reservedConcurrency, fits);
  if (Number.isInteger(workers) && workers > fits) {
    throw new Error(
      `worker.reservedConcurrency: ${workers} workers × database.poolMax ${poolMax} = ${workers * poolMax} connections ` +
        `exceed the runner's user's limit of ${runtimeLimit} (${where}): at most ${fits} workers fit; ` +
        'lower it or database.poolMax, use a larger database.instance (or give its database.maxConnections), or put database.proxy in front of it',
    );
  }
  return {
    maxConnections,
    superuserReserved: SUPERUSER_RESERVED,
    reservedConnections,
    poolMax,
    runtimeLimit,
    workerConnections: workers * poolMax,
  };
}

/** `./src/leasehold.ts` → `src/leasehold`. @throws {Error} not a relative path to a file. */
function handlerBase(handlers: string): string {
  if (typeof handlers !== 'string' || handlers.trim() === '') {
    throw new Error('handlers: required, the app\'s handler file relative to sst.config.ts, e.g. "src/leasehold"');
  }
  const base = handlers
    .trim()
    .replace(/^\.\//, '')
    .replace(/\.(ts|mts|js|mjs)$/, '');
  if (base.startsWith('/') || base.split('/').includes('..')) {
    throw new Error(`handlers: "${handlers}" must be a path inside the app, relative to sst.config.ts`);
  }
  return base;
}

/**
 * Refuse settings a deploy must not go out with.
 * @throws {Error} naming the setting.
 */
export function checkSettings(s: Settings): void {
  const w = s.worker;
  if (!Number.isInteger(w.timeoutSeconds) || w.timeoutSeconds < 1 || w.timeoutSeconds > 900) {
    throw new Error(`worker.timeoutSeconds: ${w.timeoutSeconds} is not 1..900 (Lambda's limit)`);
  }
  if (w.drainMs >= w.deadlineMarginMs) {
    throw new Error(`worker.drainMs (${w.drainMs}) must be below worker.deadlineMarginMs (${w.deadlineMarginMs})`);
  }
  // A worker stops at remaining − margin and may then drain: the invocation needs room for both
  // and for some work before them (invariant 6: it returns before its deadline).
  if (w.timeoutSeconds * 1000 <= w.deadlineMarginMs + w.drainMs) {
    throw new Error(
      `worker.timeoutSeconds (${w.timeoutSeconds} s) must exceed deadlineMarginMs + drainMs (${w.deadlineMarginMs + w.drainMs} ms)`,
    );
  }
  if (!Number.isInteger(w.reservedConcurrency) || w.reservedConcurrency < 1) {
    throw new Error(`worker.reservedConcurrency: ${w.reservedConcurrency} is not a positive integer`);
  }
  if (!Number.isInteger(w.maxEventAgeSeconds) || w.maxEventAgeSeconds < 60 || w.maxEventAgeSeconds > 21_600) {
    throw new Error(`worker.maxEventAgeSeconds: ${w.maxEventAgeSeconds} is not a whole number from 60 to 21600`);
  }
  if (w.recursiveLoop !== 'Terminate' && w.recursiveLoop !== 'Allow') {
    throw new Error(`worker.recursiveLoop: ${JSON.stringify(w.recursiveLoop)} is not "Terminate" or "Allow"`);
  }
  if (
    s.database.kind === 'rds' &&
    (!/^[a-z_][a-z0-9_]{0,62}$/.test(s.database.schedulerUser) || s.database.schedulerUser === s.database.user)
  ) {
    throw new Error(
      `database.schedulerUser: "${s.database.schedulerUser}" must be a lowercase PostgreSQL name other than database.user`,
    );
  }
  for (const role of ['scheduler', 'api', 'trigger', 'events', 'migrate'] as const) {
    const t = s[role].timeoutSeconds;
    if (!Number.isInteger(t) || t < 1 || t > 900) throw new Error(`${role}.timeoutSeconds: ${t} is not 1..900 (Lambda's limit)`);
  }
  if (s.api.timeoutSeconds > 30) throw new Error(`api.timeoutSeconds: ${s.api.timeoutSeconds} is above API Gateway's 30 s`);
  if (s.database.kind === 'existing') {
    const { port } = s.database;
    if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new Error(`database.existing.port: not a port: ${port}`);
    if (typeof s.database.resourceId === 'string' && !/^db-[A-Z0-9]+$/.test(s.database.resourceId)) {
      throw new Error(
        `database.existing.resourceId: "${s.database.resourceId}" is not the instance's "db-…" resource id ` +
          '(aws rds describe-db-instances --query "DBInstances[].DbiResourceId")',
      );
    }
  }
  if (s.network.kind === 'existing' && (s.network.privateSubnets.length === 0 || s.network.securityGroups.length === 0)) {
    throw new Error('network.existing: give both privateSubnets and securityGroups');
  }
  if (s.network.kind === 'existing' && s.database.kind === 'rds') {
    throw new Error(
      'network.existing: a database the component creates needs its own VPC; give database.existing too, or leave network out',
    );
  }
  checkSchedules(s.schedules);
  checkRules(s.rules);
}

const FINAL = ['succeeded', 'failed', 'cancelled'];

/**
 * Refuse chain rules that could not start a batch.
 * @throws {Error} naming the rule and the field.
 */
export function checkRules(list: readonly RuleDeclaration[]): void {
  const seen = new Set<string>();
  for (const r of list) {
    const where = `rules["${r.name}"]`;
    if (!/^[a-z0-9][a-z0-9-]{0,47}$/.test(r.name)) throw new Error(`${where}.name: lowercase letters, digits and -, at most 48`);
    if (seen.has(r.name)) throw new Error(`${where}: declared twice`);
    seen.add(r.name);
    if (r.after === null || typeof r.after !== 'object') throw new Error(`${where}.after: must be { job, status? }`);
    if (typeof r.after.job !== 'string' || r.after.job.length === 0) throw new Error(`${where}.after.job: required`);
    const statuses = r.after.status === undefined ? [] : [r.after.status].flat();
    if (r.after.status !== undefined && statuses.length === 0) throw new Error(`${where}.after.status: an empty list`);
    for (const st of statuses) if (!FINAL.includes(st)) throw new Error(`${where}.after.status: not one of ${FINAL.join(', ')}`);
    if (r.after.tenant !== undefined && !NAME.test(r.after.tenant)) throw new Error(`${where}.after.tenant: not a tenant name`);
    if (typeof r.job !== 'string' || r.job.length === 0) throw new Error(`${where}.job: required`);
    if (r.tenant !== undefined && !NAME.test(r.tenant)) throw new Error(`${where}.tenant: not a tenant name`);
    if (r.datasource !== undefined && !NAME.test(r.datasource)) throw new Error(`${where}.datasource: not a datasource name`);
    if (r.params !== undefined && (r.params === null || typeof r.params !== 'object' || Array.isArray(r.params))) {
      throw new Error(`${where}.params: must be an object`);
    }
    const mc = r.maxConcurrency;
    if (mc !== undefined && !(Number.isInteger(mc) && mc >= 1 && mc <= 10_000)) {
      throw new Error(`${where}.maxConcurrency: must be a whole number from 1 to 10000`);
    }
    const sb = r.startByMs;
    if (sb !== undefined && !(Number.isInteger(sb) && sb >= 1 && sb <= 366 * 86_400_000)) {
      throw new Error(`${where}.startByMs: must be a whole number of ms from 1 to 31622400000 (366 days)`);
    }
  }
}

/**
 * The bus rule's pattern that sends the trigger the Batch Finished events of the jobs the rules
 * follow (the trigger then matches each rule's statuses and tenant itself).
 */
export function rulesPattern(rules: readonly RuleDeclaration[]) {
  return {
    source: [EVENT_SOURCE],
    detailType: [BATCH_FINISHED_DETAIL_TYPE],
    detail: { job: [...new Set(rules.map((r) => r.after.job))] },
  };
}

/** A tenant or datasource name, as the API accepts it. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

/**
 * Refuse schedules that could not start a batch.
 * @throws {Error} naming the schedule and the field.
 */
export function checkSchedules(list: readonly ScheduleDeclaration[]): void {
  const seen = new Set<string>();
  for (const s of list) {
    const where = `schedules["${s.name}"]`;
    if (!/^[a-z0-9][a-z0-9-]{0,47}$/.test(s.name)) throw new Error(`${where}.name: lowercase letters, digits and -, at most 48`);
    if (seen.has(s.name)) throw new Error(`${where}: declared twice`);
    seen.add(s.name);
    if (!/^(rate|cron|at)\(.+\)$/.test(s.schedule)) throw new Error(`${where}.schedule: not rate(…), cron(…) or at(…)`);
    if (typeof s.job !== 'string' || s.job.length === 0) throw new Error(`${where}.job: required`);
    if (!NAME.test(s.tenant)) throw new Error(`${where}.tenant: not a tenant name`);
    if (!NAME.test(s.datasource)) throw new Error(`${where}.datasource: not a datasource name`);
    if (s.params === null || typeof s.params !== 'object' || Array.isArray(s.params)) {
      throw new Error(`${where}.params: must be an object`);
    }
    const t = s.toleratedFailures as Record<string, unknown> | undefined;
    if (t !== undefined) {
      const keys = t === null || typeof t !== 'object' ? [] : Object.keys(t);
      const count =
        keys.length === 1 &&
        keys[0] === 'count' &&
        Number.isInteger(t.count) &&
        (t.count as number) >= 0 &&
        (t.count as number) <= 2_147_483_647;
      const percent =
        keys.length === 1 && keys[0] === 'percent' && typeof t.percent === 'number' && t.percent >= 0 && t.percent <= 100;
      if (!count && !percent)
        throw new Error(`${where}.toleratedFailures: must be { count } (a whole number ≥ 0) or { percent } (0 to 100)`);
    }
    const mc = s.maxConcurrency;
    if (mc !== undefined && !(Number.isInteger(mc) && mc >= 1 && mc <= 10_000)) {
      throw new Error(`${where}.maxConcurrency: must be a whole number from 1 to 10000`);
    }
  }
}

/**
 * The event a schedule sends to the trigger function: shaped like an EventBridge event, so the
 * trigger handles bus events and schedules alike. EventBridge Scheduler replaces
 * `<aws.scheduler.schedule-arn>` and `<aws.scheduler.scheduled-time>` when it fires; the trigger
 * keys a start by the schedule (from its ARN in `resources`) plus the scheduled `time`, the same
 * on a retried delivery of one firing (the `id` carries name and time as well).
 */
export function scheduleEvent(s: ScheduleDeclaration) {
  return {
    version: '0',
    id: `schedule:${s.name}:<aws.scheduler.scheduled-time>`,
    'detail-type': START_BATCH_DETAIL_TYPE,
    source: SCHEDULE_SOURCE,
    time: '<aws.scheduler.scheduled-time>',
    resources: ['<aws.scheduler.schedule-arn>'],
    detail: {
      job: s.job,
      tenant: s.tenant,
      datasource: s.datasource,
      params: s.params,
      ...(s.toleratedFailures ? { toleratedFailures: s.toleratedFailures } : {}),
      ...(s.maxConcurrency !== undefined ? { maxConcurrency: s.maxConcurrency } : {}),
    },
  };
}

/**
 * The database and network of a deploy from environment variables, for configs that take an
 * existing database at deploy time (this repository's does): `LEASEHOLD_DATABASE_HOST`, `_PORT`
 * (5432), `_NAME` (leasehold), `_USER` (leasehold), `_RESOURCE_ID` (required), and optionally
 * `LEASEHOLD_VPC_SUBNETS` with `LEASEHOLD_VPC_SECURITY_GROUPS` (comma-separated ids). Empty when
 * no host is set: the component then creates its own.
 * @throws {Error} a variable is invalid; the message names it.
 */
export function databaseFromEnv(env: Record<string, string | undefined>): Pick<SettingsOptions, 'database' | 'network'> {
  const host = env.LEASEHOLD_DATABASE_HOST?.trim();
  if (!host) return {};
  const port = Number(env.LEASEHOLD_DATABASE_PORT ?? 5432);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new Error(`LEASEHOLD_DATABASE_PORT: not a port: ${env.LEASEHOLD_DATABASE_PORT}`);
  }
  const resourceId = env.LEASEHOLD_DATABASE_RESOURCE_ID?.trim() ?? '';
  if (!/^db-[A-Z0-9]+$/.test(resourceId)) {
    throw new Error(
      'LEASEHOLD_DATABASE_RESOURCE_ID: required with LEASEHOLD_DATABASE_HOST, the instance\'s "db-…" resource id ' +
        '(aws rds describe-db-instances --query "DBInstances[].DbiResourceId")',
    );
  }
  const list = (name: string) =>
    (env[name] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  const privateSubnets = list('LEASEHOLD_VPC_SUBNETS');
  const securityGroups = list('LEASEHOLD_VPC_SECURITY_GROUPS');
  if ((privateSubnets.length === 0) !== (securityGroups.length === 0)) {
    throw new Error('LEASEHOLD_VPC_SUBNETS and LEASEHOLD_VPC_SECURITY_GROUPS: set both or neither');
  }
  return {
    database: {
      existing: {
        host,
        port,
        name: env.LEASEHOLD_DATABASE_NAME?.trim() || 'leasehold',
        user: env.LEASEHOLD_DATABASE_USER?.trim() || 'leasehold',
        resourceId,
      },
    },
    ...(privateSubnets.length ? { network: { existing: { privateSubnets, securityGroups } } } : {}),
  };
}

/** Name of a function: `${app}-${stage}-${role}` (its log group is `/aws/lambda/` + this); at most 64 characters. */
export function functionName(app: string, stage: string, role: string): string {
  return `${app}-${stage}-${role}`;
}

/** `nightly-checksum` → `NightlyChecksum`, for component names. */
export function pascal(name: string): string {
  return name
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((p) => p[0]!.toUpperCase() + p.slice(1))
    .join('');
}

/** `Runner` → `runner`, `MyRunner` → `my-runner`: a component name in a function name. */
export function kebab(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1-$2')
    .replace(/[^A-Za-z0-9]+/g, '-')
    .replace(/^-|-$/g, '')
    .toLowerCase();
}
