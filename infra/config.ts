// Deploy settings: what each stage gets, the schedules users declare, and the checks that stop a
// deploy before it creates anything wrong. Read by sst.config.ts at deploy time (SST v4, see there).
//
// Plain TypeScript with no SST globals, so the infrastructure test can use it directly.

/** The app's name (`$config` app name): prefix of every resource and function name. */
export const APP_NAME = 'leasehold';

/** Stages that keep their data on removal (`removal: "retain"`) and are protected from `sst remove`. */
export const PRODUCTION_STAGES: readonly string[] = ['production', 'prod'];

/** The Lambda runtime of every function. */
export const RUNTIME = 'nodejs22.x';

/** `detail-type` of the EventBridge events that start a batch (the bus rule matches only these). */
export const START_BATCH_DETAIL_TYPE = 'leasehold.start-batch';

/** `source` of the events the declared schedules send (bus events may come from any source). */
export const SCHEDULE_SOURCE = 'leasehold.schedule';

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
  job: string;
  tenant: string;
  datasource: string;
  params: Record<string, unknown>;
}

/**
 * The schedules to deploy, on every stage. Add yours here; `job` must be one of the jobs the
 * worker knows (`builtinJobs` in src/jobs/index.ts).
 */
export const schedules: ScheduleDeclaration[] = [
  {
    // An example, deployed disabled: set `enabled: true` to checksum the function's own code
    // every night at 03:00 UTC.
    name: 'nightly-checksum',
    schedule: 'cron(0 3 * * ? *)',
    enabled: false,
    job: 'checksum',
    tenant: 'ops',
    datasource: 'lambda-code',
    params: { dir: '/var/task' },
  },
];

/** An RDS PostgreSQL instance created by the stage. */
export interface RdsDatabase {
  kind: 'rds';
  /** PostgreSQL major version. */
  version: string;
  /** Instance class without the `db.` prefix. */
  instance: string;
  storage: `${number} GB`;
  multiAz: boolean;
  /** Database name. */
  name: string;
  /** The runner's user: IAM-authenticated (`rds_iam`), created by the migration. */
  user: string;
}

/** A database that exists already, given by `LEASEHOLD_DATABASE_*` at deploy time. */
export interface ExistingDatabase {
  kind: 'existing';
  host: string;
  port: number;
  name: string;
  /** The runner's user; must exist with `GRANT rds_iam` and own (or may create) the schema. */
  user: string;
  /** `db-…` resource id of the instance, the `{dbi-resource-id}` of the `rds-db:connect` ARN. */
  resourceId: string;
  /** Subnets and security groups the functions run in, to reach it; else a new VPC with NAT. */
  vpc?: { privateSubnets: string[]; securityGroups: string[] };
}

/** Everything a stage deploys with. */
export interface StageSettings {
  stage: string;
  production: boolean;
  network: {
    /** NAT for the private subnets: the functions call the Lambda API and tenants' webhooks through it. */
    nat: 'managed' | 'ec2';
    /** Also add a Lambda interface endpoint, so Invoke calls stay inside the VPC. */
    lambdaEndpoint: boolean;
  };
  database: RdsDatabase | ExistingDatabase;
  worker: {
    /** Lambda timeout of one worker invocation, s (at most 900). */
    timeoutSeconds: number;
    memory: `${number} MB`;
    /** Reserved concurrency: the most worker processes that can be live at once. */
    reservedConcurrency: number;
    /** `LEASEHOLD_DEADLINE_MARGIN_MS`: a worker stops at remaining time minus this, ms. */
    deadlineMarginMs: number;
    /** `LEASEHOLD_DRAIN_MS`: how long in-flight items may take to stop at the deadline, ms. */
    drainMs: number;
  };
  /** Lambda timeouts of the other functions, s. */
  timeouts: { schedulerSeconds: number; apiSeconds: number; triggerSeconds: number; migrateSeconds: number };
}

const defaults: Omit<StageSettings, 'stage' | 'production'> = {
  network: { nat: 'ec2', lambdaEndpoint: false },
  database: {
    kind: 'rds',
    version: '17',
    instance: 't4g.micro',
    storage: '20 GB',
    multiAz: false,
    name: 'leasehold',
    user: 'leasehold',
  },
  worker: {
    timeoutSeconds: 900,
    memory: '1024 MB',
    reservedConcurrency: 10,
    deadlineMarginMs: 10_000,
    drainMs: 5_000,
  },
  // The API answers within API Gateway's 30 s; the scheduler runs every minute.
  timeouts: { schedulerSeconds: 50, apiSeconds: 29, triggerSeconds: 120, migrateSeconds: 300 },
};

/** What production stages change: a managed NAT gateway (scales, no instance to look after). */
const productionOverrides = { network: { nat: 'managed', lambdaEndpoint: false } } as const;

/** Is `stage` a production stage? */
export function isProduction(stage: string): boolean {
  return PRODUCTION_STAGES.includes(stage);
}

/**
 * The settings of `stage`: the defaults, production's overrides, and an existing database when
 * `LEASEHOLD_DATABASE_HOST` is set in `env` at deploy time.
 * @throws {Error} a setting or variable is invalid; the message names it.
 */
export function stageSettings(stage: string, env: Record<string, string | undefined> = process.env): StageSettings {
  const production = isProduction(stage);
  const settings: StageSettings = {
    stage,
    production,
    ...defaults,
    ...(production ? productionOverrides : {}),
  };
  const existing = existingDatabase(env);
  if (existing) settings.database = existing;
  checkSettings(settings);
  return settings;
}

/**
 * An existing database from `LEASEHOLD_DATABASE_HOST`, `_PORT` (5432), `_NAME` (leasehold),
 * `_USER` (leasehold), `_RESOURCE_ID` (required), and optionally `LEASEHOLD_VPC_SUBNETS` with
 * `LEASEHOLD_VPC_SECURITY_GROUPS` (comma-separated ids); undefined when no host is set.
 */
export function existingDatabase(env: Record<string, string | undefined>): ExistingDatabase | undefined {
  const host = env.LEASEHOLD_DATABASE_HOST?.trim();
  if (!host) return undefined;
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
    kind: 'existing',
    host,
    port,
    name: env.LEASEHOLD_DATABASE_NAME?.trim() || 'leasehold',
    user: env.LEASEHOLD_DATABASE_USER?.trim() || 'leasehold',
    resourceId,
    vpc: privateSubnets.length ? { privateSubnets, securityGroups } : undefined,
  };
}

/**
 * Refuse settings a deploy must not go out with.
 * @throws {Error} naming the setting.
 */
export function checkSettings(s: StageSettings): void {
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
  // Function names are `${app}-${stage}-${role}`: Lambda allows 64 characters.
  if (functionName(APP_NAME, s.stage, 'scheduler').length > 64) {
    throw new Error(`stage "${s.stage}" is too long for the function names (64 characters at most)`);
  }
  checkSchedules(schedules);
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
    detail: { job: s.job, tenant: s.tenant, datasource: s.datasource, params: s.params },
  };
}

/** Name of a function: `${app}-${stage}-${role}` (its log group is `/aws/lambda/` + this). */
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
