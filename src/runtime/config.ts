import { delimiter } from 'node:path';
import { tmpdir } from 'node:os';
import * as z from '../zod.js';
import { BATCH_DEFAULTS, DEFAULT_START_LIMITS, RETENTION_DEFAULTS } from '../batch/defaults.js';
import { MAX_CONCURRENCY } from '../batch/types.js';
import { parsePriceOverride, pricesFor, type Prices } from '../batch/usage.js';
import { RUNNER_DEFAULTS, runnerSettings, type RunnerSettings } from '../batch/runner.js';
import type { ComponentVariable } from '../contract.js';
import { InvalidSettingError, LeaseholdError } from '../errors.js';
import { LEASE_DEFAULTS, leaseConfig, type LeaseConfig } from '../lease/leaser.js';
import { NO_WORKER_LIMIT } from '../lease/sql/fleet.js';
import { readOutboxAllow } from '../units/outbox-allow.js';
import { parseChainRules, type ChainRule } from '../trigger/chain.js';

/** A setting from the environment is missing or invalid; the message names the variable. */
export class ConfigError extends LeaseholdError {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super('config', `${variable}: ${message}`);
  }
}

/** A whole number read from text, at least `min` and, when given, at most `max`. */
const int = (min: number, max?: number) =>
  z.coerce.number().check(z.int(), z.gte(min), ...(max === undefined ? [] : [z.lte(max)]));
const flag = z.pipe(
  z.enum(['true', 'false'], { error: () => 'must be "true" or "false"' }),
  z.transform((v: 'true' | 'false') => v === 'true'),
);

/** Variables whose values are secrets: never echoed in a {@link ConfigError}. */
const SECRET = /PASSWORD|SECRET/;

/**
 * Every setting, its environment variable and default. Durations are in ms (the `_MS` suffix).
 * The variables the SST component sets are src/contract.ts's COMPONENT_VARIABLES: the compiler
 * checks that this schema reads every one (`satisfies` below).
 * docs/configuration.md lists the same (a test compares them). The runner's and the lease's
 * defaults come from RUNNER_DEFAULTS and LEASE_DEFAULTS, and their bounds are checked by
 * `runnerSettings` and `leaseConfig` (`loadConfig` names the variable); only what those do not
 * check is bounded here.
 */
const schema = {
  DATABASE_URL: z.optional(
    z.string().check(
      z.url(),
      z.refine((url) => /^postgres(ql)?:\/\//.test(url), 'must be a postgres:// or postgresql:// URL'),
    ),
  ),
  LEASEHOLD_WORKER_FUNCTION: z._default(z.string().check(z.minLength(1)), 'leasehold-worker'),
  LEASEHOLD_DEADLINE_MARGIN_MS: z._default(int(0), 10_000),
  LEASEHOLD_WORKER_TIMEOUT_MS: z._default(int(1_000, 900_000), 900_000),
  LEASEHOLD_DRAIN_MS: z.optional(int(0)),
  LEASEHOLD_WORKER_IDLE_MS: z._default(int(0), 2_000),
  // Usage and cost (docs/design.md, "Usage and cost").
  LEASEHOLD_WORKER_MEMORY_MB: z._default(int(128, 10_240), RUNNER_DEFAULTS.memoryMb),
  LEASEHOLD_PRICE_REGION: z.optional(z.string().check(z.minLength(1))),
  LEASEHOLD_PRICES: z.optional(
    z.string().check(
      z.superRefine((v, ctx) => {
        try {
          parsePriceOverride(v);
        } catch (e) {
          ctx.addIssue({ code: 'custom', message: (e as Error).message });
        }
      }),
    ),
  ),
  LEASEHOLD_WORKER_POLL_MS: z._default(int(10), 1_000),
  LEASEHOLD_MAX_RUNS: z._default(int(1), RUNNER_DEFAULTS.maxRuns),
  LEASEHOLD_PARALLEL: z._default(int(1), RUNNER_DEFAULTS.parallel),
  LEASEHOLD_QUEUE_DEPTH: z.optional(int(0, 10_000)),
  LEASEHOLD_BEAT_MS: z._default(int(10), RUNNER_DEFAULTS.beatMs),
  // Stale limits and retry delays are added to now() in SQL: runnerSettings bounds them.
  LEASEHOLD_STALE_MS: z._default(int(20), RUNNER_DEFAULTS.staleMs),
  LEASEHOLD_ATTEMPTS: z._default(int(1), RUNNER_DEFAULTS.attempts),
  LEASEHOLD_BACKOFF_MS: z._default(int(0), RUNNER_DEFAULTS.backoffMs),
  LEASEHOLD_MAX_BACKOFF_MS: z._default(int(0), RUNNER_DEFAULTS.maxBackoffMs),
  LEASEHOLD_MAX_RETRY_AFTER: z._default(int(0, 1_000), RUNNER_DEFAULTS.maxRetryAfter),
  LEASEHOLD_MOVE_TRIES: z._default(int(1, 100), RUNNER_DEFAULTS.moveTries),
  LEASEHOLD_MOVE_BACKOFF_MS: z._default(int(0, 60_000), RUNNER_DEFAULTS.moveBackoffMs),
  LEASEHOLD_MAX_OUTPUT_BYTES: z._default(int(1, 67_108_864), RUNNER_DEFAULTS.maxOutputBytes),
  LEASEHOLD_MAX_STALLED_RUNS: z._default(int(1), RUNNER_DEFAULTS.maxStalledRuns),
  LEASEHOLD_STORE_TIMEOUT_MS: z._default(int(100), RUNNER_DEFAULTS.storeTimeoutMs),
  LEASEHOLD_MAX_OPEN: z._default(int(1), BATCH_DEFAULTS.maxOpen),
  LEASEHOLD_MAX_RUNNING: z.optional(int(0)),
  LEASEHOLD_SLICE_MS: z._default(int(10), RUNNER_DEFAULTS.sliceMs),
  LEASEHOLD_MAX_ITEMS: z._default(int(1), DEFAULT_START_LIMITS.maxItems),
  LEASEHOLD_MAX_SOURCE_ITEMS: z._default(int(1), RUNNER_DEFAULTS.maxSourceItems),
  LEASEHOLD_CALLBACK_URL: z.optional(z.string().check(z.url())),
  LEASEHOLD_MAX_INPUT_BYTES: z._default(int(0), DEFAULT_START_LIMITS.maxInputBytes),
  LEASEHOLD_MAX_TOTAL_BYTES: z._default(int(1), DEFAULT_START_LIMITS.maxTotalBytes),
  // Lambda refuses a synchronous invocation (API Gateway's) whose event is over 6 MB.
  LEASEHOLD_MAX_BODY_BYTES: z._default(
    int(64).check(z.lte(6_291_456, 'must be at most 6291456 (Lambda refuses larger request events)')),
    65_536,
  ),
  LEASEHOLD_DISPATCH_COOLDOWN_MS: z._default(int(0, 86_400_000), 30_000),
  LEASEHOLD_DB_POOL_MAX: z._default(int(1), 4),
  LEASEHOLD_ALLOWED_ROOTS: z.optional(z.string()),
  LEASEHOLD_INVOKABLE: z.optional(z.string()),
  LEASEHOLD_TTL_MS: z._default(int(100), LEASE_DEFAULTS.ttlMs),
  LEASEHOLD_HEARTBEAT_MS: z._default(int(10), LEASE_DEFAULTS.heartbeatIntervalMs),
  LEASEHOLD_REBALANCE_MS: z._default(int(10), LEASE_DEFAULTS.rebalanceIntervalMs),
  LEASEHOLD_SWEEP_CUTOFF_MS: z._default(int(100), LEASE_DEFAULTS.sweepCutoffMs),
  LEASEHOLD_SHED_HYSTERESIS: z._default(z.coerce.number().check(z.gte(0), z.lte(10)), LEASE_DEFAULTS.shedHysteresis),
  LEASEHOLD_CLAIM_BATCH: z._default(int(1), LEASE_DEFAULTS.claimBatch),
  LEASEHOLD_MAX_CLAIM_PER_TICK: z._default(int(1), LEASE_DEFAULTS.maxClaimPerTick),
  LEASEHOLD_UNIT_MAX_CRASHES: z._default(int(1, 1_000), LEASE_DEFAULTS.maxUnitCrashes),
  LEASEHOLD_UNIT_QUARANTINE_MS: z._default(int(1_000, 86_400_000), LEASE_DEFAULTS.quarantineMs),
  LEASEHOLD_UNIT_MAX_QUARANTINE_MS: z._default(int(1_000, 2_592_000_000), LEASE_DEFAULTS.maxQuarantineMs),
  LEASEHOLD_INVOKE_CAP: z._default(int(0), 10),
  LEASEHOLD_MAX_WORKERS: z.optional(int(1)),
  LEASEHOLD_BATCH_CONCURRENCY: z._default(int(1, MAX_CONCURRENCY), BATCH_DEFAULTS.maxConcurrency),
  LEASEHOLD_INVOCATION_PENDING_MS: z._default(int(1000), 30_000),
  LEASEHOLD_RETENTION_DAYS: z._default(int(0, 36_500), RETENTION_DEFAULTS.retentionDays),
  LEASEHOLD_USAGE_RETENTION_DAYS: z._default(int(0, 36_500), RETENTION_DEFAULTS.usageRetentionDays),
  LEASEHOLD_RETENTION_CHUNK_ROWS: z._default(int(100, 100_000), RETENTION_DEFAULTS.chunkRows),
  LEASEHOLD_RETENTION_MAX_ROWS: z._default(int(1, 100_000_000), RETENTION_DEFAULTS.maxRowsPerPass),
  // Below the scheduler's statement timeout and its minute: a pass never delays the next run.
  LEASEHOLD_RETENTION_BUDGET_MS: z._default(int(0, 30_000), RETENTION_DEFAULTS.budgetMs),
  LEASEHOLD_DB_HOST: z.optional(z.string().check(z.minLength(1))),
  LEASEHOLD_DB_PORT: z._default(int(1, 65_535), 5432),
  LEASEHOLD_DB_NAME: z.optional(z.string().check(z.minLength(1))),
  LEASEHOLD_DB_USER: z.optional(z.string().check(z.minLength(1), z.maxLength(63))),
  LEASEHOLD_DB_PASSWORD: z.optional(z.string()),
  LEASEHOLD_DB_IAM_AUTH: z._default(flag, false),
  LEASEHOLD_DB_TLS: z._default(z.enum(['rds', 'system', 'off'], { error: () => 'must be one of rds, system, off' }), 'rds'),
  LEASEHOLD_DB_CA_FILE: z.optional(z.string().check(z.minLength(1))),
  LEASEHOLD_DB_IDLE_TIMEOUT_MS: z._default(int(1_000), 120_000),
  LEASEHOLD_DB_MAX_LIFETIME_MS: z._default(int(60_000, 3_600_000), 600_000),
  LEASEHOLD_DB_POOLER: z._default(z.enum(['none', 'transaction'], { error: () => 'must be "none" or "transaction"' }), 'none'),
  LEASEHOLD_DB_IAM_USER: z.optional(z.string().check(z.minLength(1), z.maxLength(63))),
  LEASEHOLD_DB_SCHEDULER_USER: z.optional(z.string().check(z.minLength(1), z.maxLength(63))),
  LEASEHOLD_DB_RESERVED_CONNECTIONS: z._default(int(1, 10_000), 8),
  LEASEHOLD_DB_RUNTIME_CONNECTIONS: z.optional(int(1, 100_000)),
  LEASEHOLD_DB_CONNECT_RETRY_MS: z._default(int(0, 900_000), 20_000),
  // Read by the outbox-delivery job itself (src/units/endpoint-guard.ts) whenever it checks an
  // endpoint; validated here too (its syntax, src/units/outbox-allow.ts), so a bad value stops a
  // function when it starts.
  LEASEHOLD_OUTBOX_ALLOW: z.optional(z.string()).check(
    z.superRefine((v, ctx) => {
      try {
        readOutboxAllow(v);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
      }
    }),
  ),
  LEASEHOLD_MIGRATIONS_DIR: z.optional(z.string().check(z.minLength(1))),
  // Batch Finished events (docs/design.md, "Events").
  LEASEHOLD_EVENT_BUS: z.optional(z.string().check(z.minLength(1), z.maxLength(1600))),
  LEASEHOLD_WEBHOOK_SECRET: z.optional(z.string().check(z.minLength(16, 'must be at least 16 characters'))),
  LEASEHOLD_RULES: z.optional(z.string()).check(
    z.superRefine((v, ctx) => {
      try {
        parseChainRules(v);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
      }
    }),
  ),
  AWS_REGION: z.optional(z.string().check(z.minLength(1))),
} as const satisfies Record<ComponentVariable, z.core.$ZodType> & Record<string, z.core.$ZodType>;

type Env = { [K in keyof typeof schema]: z.infer<(typeof schema)[K]> };

/** The runtime's settings, parsed from the environment by {@link loadConfig}. */
export interface Config {
  /**
   * postgres:// URL (local mode and tests). When set it wins over {@link Config.db}'s host
   * settings; one of the two is required by every function.
   */
  databaseUrl: string | undefined;
  /** Name of the worker function that dispatches invoke. */
  workerFunction: string;
  /** A worker stops at `remaining time − deadlineMarginMs`, ms. */
  deadlineMarginMs: number;
  /**
   * The worker function's timeout, ms (`LEASEHOLD_WORKER_TIMEOUT_MS`, 1,000 to 900,000; default
   * 900,000, Lambda's longest; the SST component sets it, `leasehold dev` to its `--timeout-ms`).
   */
  workerTimeoutMs: number;
  /**
   * Longest item timeout a start may set, ms: `workerTimeoutMs − deadlineMarginMs`, what one
   * worker invocation can give an item (docs/design.md, "Item timeouts").
   */
  itemTimeoutLimitMs: number;
  /** A worker with nothing to run returns after this long, ms. */
  workerIdleMs: number;
  /** How often a worker looks for batches to take over, ms. */
  workerPollMs: number;
  /**
   * The runner's settings (`runnerSettings`; `LEASEHOLD_PARALLEL`, `LEASEHOLD_BEAT_MS`,
   * `LEASEHOLD_ATTEMPTS`, … in docs/configuration.md), every default from RUNNER_DEFAULTS except
   * `drainMs`: at the deadline, how long in-flight items may take to stop before runs hand off
   * without them, ms; default half the deadline margin, at most 5,000, and below the margin.
   * A worker's runner takes them as they are. Among them, for tenant fairness (docs/design.md,
   * "Tenant fairness"): `maxRunning`, most batches of one tenant running at once for tenants
   * without a limit of their own (`LEASEHOLD_MAX_RUNNING`, 0 to 2,147,483,647; unset: no
   * limit), and `sliceMs`, how long a run holds its batch before it hands off when another
   * tenant's batch waits (`LEASEHOLD_SLICE_MS`, default 60,000; at most one day).
   */
  runner: Omit<RunnerSettings, 'clock' | 'random' | 'onEvent'>;
  /** Most open batches per (tenant, datasource). */
  maxOpen: number;
  /** Most items per batch (a start's item count limit). */
  maxItems: number;
  /** Largest input of one item, bytes of JSON (a start's input bytes limit). */
  maxInputBytes: number;
  /** Largest sum of key bytes plus input bytes over one batch's items (a start's total bytes limit). */
  maxTotalBytes: number;
  /** Largest accepted request body, bytes. */
  maxBodyBytes: number;
  /** A dispatched batch that no worker took is dispatched again after this long, ms. */
  dispatchCooldownMs: number;
  /** Connections per function container. */
  dbPoolMax: number;
  /** How functions reach the database when `DATABASE_URL` is not set (deployed: RDS). */
  db: DbConfig;
  /** Where the migrate function reads the migration files; default next to the code. */
  migrationsDir: string | undefined;
  /** Directories file jobs may read under (absolute). */
  allowedRoots: string[];
  /**
   * Functions `lambda-invoke` batches may call, by the name batches use: name → function name or
   * ARN (`LEASEHOLD_INVOKABLE`, see {@link parseInvokable}). Default none.
   */
  invokable: Record<string, string>;
  /** Lease settings of every worker process (see `LeaseConfig`; defaults LEASE_DEFAULTS), ms. */
  lease: Pick<
    LeaseConfig,
    | 'ttlMs'
    | 'heartbeatIntervalMs'
    | 'rebalanceIntervalMs'
    | 'sweepCutoffMs'
    | 'shedHysteresis'
    | 'claimBatch'
    | 'maxClaimPerTick'
    | 'maxUnitCrashes'
    | 'quarantineMs'
    | 'maxQuarantineMs'
  >;
  /** Most workers one scheduler run invokes for the desired count. */
  invokeCap: number;
  /**
   * The worker limit (docs/design.md, "Fan-out"): live worker processes (fleet and batch) plus
   * invocations on their way never exceed it; the scheduler, a start and a replacement invoke
   * no worker past it (`LEASEHOLD_MAX_WORKERS`; on AWS the component sets it to the worker
   * function's reserved concurrency). Default none ({@link NO_WORKER_LIMIT}).
   */
  maxWorkers: number;
  /**
   * `maxConcurrency` of a batch started without one: most runs working it at once
   * (`LEASEHOLD_BATCH_CONCURRENCY`, 1 to 10,000; default 1).
   */
  batchConcurrency: number;
  /**
   * The confirmation window, ms: an invoked worker counts as coming until its first heartbeat
   * or for this long, whichever is first. Keep it below the scheduler's interval (a minute), so
   * an invocation lost on the way (or dropped by Lambda's recursive loop detection) is replaced
   * by the next scheduler run. Default 30,000.
   */
  invocationPendingMs: number;
  /**
   * Retention (docs/design.md, "Retention"), applied by every scheduler run after its fleet
   * work: finished batches (with their items and redrives), deferred trigger firings and
   * delivered outbox messages (with their deliveries) older than `retentionDays` days (database
   * clock) are deleted; 0 keeps everything (`LEASEHOLD_RETENTION_DAYS`, default 30, at most
   * 36,500). Each statement deletes at most `chunkRows` rows (`LEASEHOLD_RETENTION_CHUNK_ROWS`,
   * default 5,000, 100 to 100,000); one scheduler run deletes at most `maxRowsPerPass` rows of
   * each kind (`LEASEHOLD_RETENTION_MAX_ROWS`, default 500,000, at least 1) and starts no
   * statement after `budgetMs` ms (`LEASEHOLD_RETENTION_BUDGET_MS`, default 10,000, at most 30,000).
   * Usage rows (docs/design.md, "Usage and cost") recorded more than `usageRetentionDays` days
   * ago are deleted by the same run, with the same chunks, cap (a kind of its own) and budget; 0
   * keeps them for ever (`LEASEHOLD_USAGE_RETENTION_DAYS`, default 400, at most 36,500).
   */
  retention: { retentionDays: number; usageRetentionDays: number; chunkRows: number; maxRowsPerPass: number; budgetMs: number };
  /**
   * The prices usage is estimated at (docs/design.md, "Usage and cost"): the published prices of
   * `LEASEHOLD_PRICE_REGION` (unset: `AWS_REGION`; a region not listed: `us-east-1`'s), with
   * `LEASEHOLD_PRICES` over them.
   */
  prices: Prices;
  /**
   * Batch Finished events (docs/design.md, "Events"): `bus`, the EventBridge bus they are put on
   * (`LEASEHOLD_EVENT_BUS`, a name or ARN; the component sets its bus; unset: events are recorded
   * and sent nowhere but their webhook); `webhookSecret`, the key webhooks are signed with
   * (`LEASEHOLD_WEBHOOK_SECRET`, at least 16 characters, or `whsec_` + base64; unset: a start
   * with `notify` is refused); `rules`, what a Batch Finished event starts (`LEASEHOLD_RULES`,
   * a JSON array, see `parseChainRules`; default none).
   */
  events: { bus: string | undefined; webhookSecret: string | undefined; rules: ChainRule[] };
}

/** The database settings of a deployment (`LEASEHOLD_DB_*`). */
export interface DbConfig {
  /** Host name of the database (RDS endpoint); unset means `DATABASE_URL` is used. */
  host: string | undefined;
  /** Port. Default 5432. */
  port: number;
  /** Database name; required with `host`. */
  name: string | undefined;
  /** The runtime's database user; required with `host` and with `iamAuth`. */
  user: string | undefined;
  /** Password of `user` when IAM authentication is off. */
  password: string | undefined;
  /**
   * Authenticate `user` with a fresh RDS IAM token (`@aws-sdk/rds-signer`) for every new
   * connection instead of a password; needs TLS and `region`. The migrate function then creates
   * `user` and grants it `rds_iam`. Default false.
   */
  iamAuth: boolean;
  /**
   * TLS towards `host`: `rds` verifies the server against the Amazon RDS CA bundle shipped with
   * the code (plus `caFile`), `system` against Node's CA store (plus `caFile`), `off` sends
   * plain text (refused with `iamAuth`). Default `rds`.
   */
  tls: 'rds' | 'system' | 'off';
  /** A PEM file with more CA certificates to trust (a newer RDS bundle, a proxy's CA). */
  caFile: string | undefined;
  /** AWS region of the database, for IAM tokens (`AWS_REGION`, set by Lambda). */
  region: string | undefined;
  /** A pooled connection idle this long is closed, ms. Default 120,000. */
  idleTimeoutMs: number;
  /** A connection is replaced after this long, ms. Default 600,000 (below the 15-minute IAM token lifetime). */
  maxLifetimeMs: number;
  /**
   * What stands between the functions and the database (`LEASEHOLD_DB_POOLER`): `none`, or
   * `transaction` for a transaction-mode pooler (PgBouncer in `pool_mode = transaction`, RDS
   * Proxy): no named prepared statements, settings only with `SET LOCAL` inside each transaction,
   * only transaction-level advisory locks (see `ConnectOptions.pooler`; docs/design.md, "Database
   * connections"). Applies to `DATABASE_URL` too. Default `none`.
   */
  pooler: 'none' | 'transaction';
  /**
   * Migrate function only: the IAM-authenticated user the runtime functions connect as, which the
   * migration creates (`login`, `rds_iam`) and grants leasehold's tables to, when it differs from
   * the user the migration connects as (the master user, with `password`). Default none.
   */
  iamUser: string | undefined;
  /**
   * Migrate function only: the user the scheduler function connects as, provisioned like
   * `iamUser` but outside the runtime's connection budget, so a fleet that uses every connection
   * it may have never starves the scheduler. Default none (the scheduler shares `iamUser`).
   */
  schedulerUser: string | undefined;
  /**
   * Migrate function only: connections kept out of reach of `iamUser` (the scheduler's pool, the
   * migrate function, an operator's session): `iamUser` gets `CONNECTION LIMIT` = the database's
   * limit minus this. Default 8.
   */
  reservedConnections: number;
  /** Migrate function only: `iamUser`'s `CONNECTION LIMIT`, instead of one computed from `reservedConnections`. */
  runtimeConnections: number | undefined;
  /**
   * The scheduler and migrate functions retry a refused connection (`53300` too many
   * connections, `57P03`, an RDS IAM login refused with `28000` "too many competing requests",
   * refused, timed out) with jittered backoff for at most this long within
   * their invocation, ms. Default 20,000.
   */
  connectRetryMs: number;
}

/** `url` with the password of its user info (`//user:password@`) shown as `***`, for messages. */
export function redactPassword(url: string): string {
  return url.replace(/(\/\/[^/@:]*:)[^/@]*@/, '$1***@');
}

/**
 * Read and validate every setting from `env` (default `process.env`).
 * @throws {ConfigError} naming the first invalid variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const [name, type] of Object.entries(schema)) {
    const raw = env[name];
    const parsed = z.safeParse(type as z.core.$ZodType, raw === '' ? undefined : raw);
    if (!parsed.success) {
      const got = SECRET.test(name) ? '' : ` (got ${JSON.stringify(name === 'DATABASE_URL' ? redactPassword(raw ?? '') : raw)})`;
      throw new ConfigError(name, `${parsed.error.issues[0].message}${got}`);
    }
    out[name] = parsed.data;
  }
  const e = out as Env;
  const config: Config = {
    databaseUrl: e.DATABASE_URL,
    workerFunction: e.LEASEHOLD_WORKER_FUNCTION,
    deadlineMarginMs: e.LEASEHOLD_DEADLINE_MARGIN_MS,
    workerTimeoutMs: e.LEASEHOLD_WORKER_TIMEOUT_MS,
    itemTimeoutLimitMs: Math.max(1, e.LEASEHOLD_WORKER_TIMEOUT_MS - e.LEASEHOLD_DEADLINE_MARGIN_MS),
    workerIdleMs: e.LEASEHOLD_WORKER_IDLE_MS,
    workerPollMs: e.LEASEHOLD_WORKER_POLL_MS,
    runner: runnerFromEnv(e),
    maxOpen: e.LEASEHOLD_MAX_OPEN,
    maxItems: e.LEASEHOLD_MAX_ITEMS,
    maxInputBytes: e.LEASEHOLD_MAX_INPUT_BYTES,
    maxTotalBytes: e.LEASEHOLD_MAX_TOTAL_BYTES,
    maxBodyBytes: e.LEASEHOLD_MAX_BODY_BYTES,
    dispatchCooldownMs: e.LEASEHOLD_DISPATCH_COOLDOWN_MS,
    dbPoolMax: e.LEASEHOLD_DB_POOL_MAX,
    db: dbFromEnv(e),
    migrationsDir: e.LEASEHOLD_MIGRATIONS_DIR,
    allowedRoots: e.LEASEHOLD_ALLOWED_ROOTS
      ? e.LEASEHOLD_ALLOWED_ROOTS.split(delimiter).filter(Boolean)
      : [process.cwd(), tmpdir()],
    invokable: parseInvokable(e.LEASEHOLD_INVOKABLE ?? ''),
    lease: {
      ttlMs: e.LEASEHOLD_TTL_MS,
      heartbeatIntervalMs: e.LEASEHOLD_HEARTBEAT_MS,
      rebalanceIntervalMs: e.LEASEHOLD_REBALANCE_MS,
      sweepCutoffMs: e.LEASEHOLD_SWEEP_CUTOFF_MS,
      shedHysteresis: e.LEASEHOLD_SHED_HYSTERESIS,
      claimBatch: e.LEASEHOLD_CLAIM_BATCH,
      maxClaimPerTick: e.LEASEHOLD_MAX_CLAIM_PER_TICK,
      maxUnitCrashes: e.LEASEHOLD_UNIT_MAX_CRASHES,
      quarantineMs: e.LEASEHOLD_UNIT_QUARANTINE_MS,
      maxQuarantineMs: e.LEASEHOLD_UNIT_MAX_QUARANTINE_MS,
    },
    invokeCap: e.LEASEHOLD_INVOKE_CAP,
    maxWorkers: e.LEASEHOLD_MAX_WORKERS ?? NO_WORKER_LIMIT,
    batchConcurrency: e.LEASEHOLD_BATCH_CONCURRENCY,
    invocationPendingMs: e.LEASEHOLD_INVOCATION_PENDING_MS,
    events: {
      bus: e.LEASEHOLD_EVENT_BUS,
      webhookSecret: e.LEASEHOLD_WEBHOOK_SECRET,
      rules: parseChainRules(e.LEASEHOLD_RULES),
    },
    prices: pricesFor(e.LEASEHOLD_PRICE_REGION ?? e.AWS_REGION, parsePriceOverride(e.LEASEHOLD_PRICES)),
    retention: {
      retentionDays: e.LEASEHOLD_RETENTION_DAYS,
      usageRetentionDays: e.LEASEHOLD_USAGE_RETENTION_DAYS,
      chunkRows: e.LEASEHOLD_RETENTION_CHUNK_ROWS,
      maxRowsPerPass: e.LEASEHOLD_RETENTION_MAX_ROWS,
      budgetMs: e.LEASEHOLD_RETENTION_BUDGET_MS,
    },
  };
  // The runner and the lease check their own settings; their errors name the variable here.
  asVariables(env, () => runnerSettings(config.runner), RUNNER_VARIABLES);
  asVariables(env, () => leaseConfig(config.lease), LEASE_VARIABLES);
  if (config.runner.drainMs >= config.deadlineMarginMs && config.deadlineMarginMs > 0) {
    throw new ConfigError('LEASEHOLD_DRAIN_MS', `must be below LEASEHOLD_DEADLINE_MARGIN_MS (${config.deadlineMarginMs})`);
  }
  checkDb(config.db, config.databaseUrl !== undefined);
  return config;
}

/** The runner's settings (docs/configuration.md, "Runtime settings"), from the parsed variables. */
function runnerFromEnv(e: Env): Config['runner'] {
  return {
    maxRuns: e.LEASEHOLD_MAX_RUNS,
    parallel: e.LEASEHOLD_PARALLEL,
    queueDepth: e.LEASEHOLD_QUEUE_DEPTH,
    beatMs: e.LEASEHOLD_BEAT_MS,
    staleMs: e.LEASEHOLD_STALE_MS,
    attempts: e.LEASEHOLD_ATTEMPTS,
    backoffMs: e.LEASEHOLD_BACKOFF_MS,
    maxBackoffMs: e.LEASEHOLD_MAX_BACKOFF_MS,
    maxRetryAfter: e.LEASEHOLD_MAX_RETRY_AFTER,
    moveTries: e.LEASEHOLD_MOVE_TRIES,
    moveBackoffMs: e.LEASEHOLD_MOVE_BACKOFF_MS,
    maxOutputBytes: e.LEASEHOLD_MAX_OUTPUT_BYTES,
    maxStalledRuns: e.LEASEHOLD_MAX_STALLED_RUNS,
    storeTimeoutMs: e.LEASEHOLD_STORE_TIMEOUT_MS,
    drainMs: e.LEASEHOLD_DRAIN_MS ?? Math.min(RUNNER_DEFAULTS.drainMs, Math.floor(e.LEASEHOLD_DEADLINE_MARGIN_MS / 2)),
    maxRunning: e.LEASEHOLD_MAX_RUNNING ?? RUNNER_DEFAULTS.maxRunning,
    sliceMs: e.LEASEHOLD_SLICE_MS,
    maxSourceItems: e.LEASEHOLD_MAX_SOURCE_ITEMS,
    ...(e.LEASEHOLD_CALLBACK_URL === undefined ? {} : { callbackUrl: e.LEASEHOLD_CALLBACK_URL }),
    maxInputBytes: Math.max(1, e.LEASEHOLD_MAX_INPUT_BYTES),
    sourceRangeBytes: RUNNER_DEFAULTS.sourceRangeBytes,
    sourcePageObjects: RUNNER_DEFAULTS.sourcePageObjects,
    memoryMb: e.LEASEHOLD_WORKER_MEMORY_MB,
  };
}

/** The database settings, from the parsed variables. */
function dbFromEnv(e: Env): DbConfig {
  return {
    host: e.LEASEHOLD_DB_HOST,
    port: e.LEASEHOLD_DB_PORT,
    name: e.LEASEHOLD_DB_NAME,
    user: e.LEASEHOLD_DB_USER,
    password: e.LEASEHOLD_DB_PASSWORD,
    iamAuth: e.LEASEHOLD_DB_IAM_AUTH,
    tls: e.LEASEHOLD_DB_TLS,
    caFile: e.LEASEHOLD_DB_CA_FILE,
    region: e.AWS_REGION,
    idleTimeoutMs: e.LEASEHOLD_DB_IDLE_TIMEOUT_MS,
    maxLifetimeMs: e.LEASEHOLD_DB_MAX_LIFETIME_MS,
    pooler: e.LEASEHOLD_DB_POOLER,
    iamUser: e.LEASEHOLD_DB_IAM_USER,
    schedulerUser: e.LEASEHOLD_DB_SCHEDULER_USER,
    reservedConnections: e.LEASEHOLD_DB_RESERVED_CONNECTIONS,
    runtimeConnections: e.LEASEHOLD_DB_RUNTIME_CONNECTIONS,
    connectRetryMs: e.LEASEHOLD_DB_CONNECT_RETRY_MS,
  };
}

/** The variable of each runner setting. */
const RUNNER_VARIABLES: Record<string, keyof typeof schema> = {
  maxRuns: 'LEASEHOLD_MAX_RUNS',
  parallel: 'LEASEHOLD_PARALLEL',
  queueDepth: 'LEASEHOLD_QUEUE_DEPTH',
  beatMs: 'LEASEHOLD_BEAT_MS',
  staleMs: 'LEASEHOLD_STALE_MS',
  attempts: 'LEASEHOLD_ATTEMPTS',
  backoffMs: 'LEASEHOLD_BACKOFF_MS',
  maxBackoffMs: 'LEASEHOLD_MAX_BACKOFF_MS',
  maxRetryAfter: 'LEASEHOLD_MAX_RETRY_AFTER',
  moveTries: 'LEASEHOLD_MOVE_TRIES',
  moveBackoffMs: 'LEASEHOLD_MOVE_BACKOFF_MS',
  maxOutputBytes: 'LEASEHOLD_MAX_OUTPUT_BYTES',
  maxStalledRuns: 'LEASEHOLD_MAX_STALLED_RUNS',
  storeTimeoutMs: 'LEASEHOLD_STORE_TIMEOUT_MS',
  drainMs: 'LEASEHOLD_DRAIN_MS',
  maxRunning: 'LEASEHOLD_MAX_RUNNING',
  sliceMs: 'LEASEHOLD_SLICE_MS',
};

/** The variable of each lease setting. */
const LEASE_VARIABLES: Record<string, keyof typeof schema> = {
  ttlMs: 'LEASEHOLD_TTL_MS',
  heartbeatIntervalMs: 'LEASEHOLD_HEARTBEAT_MS',
  rebalanceIntervalMs: 'LEASEHOLD_REBALANCE_MS',
  sweepCutoffMs: 'LEASEHOLD_SWEEP_CUTOFF_MS',
  shedHysteresis: 'LEASEHOLD_SHED_HYSTERESIS',
  claimBatch: 'LEASEHOLD_CLAIM_BATCH',
  maxClaimPerTick: 'LEASEHOLD_MAX_CLAIM_PER_TICK',
  maxUnitCrashes: 'LEASEHOLD_UNIT_MAX_CRASHES',
  quarantineMs: 'LEASEHOLD_UNIT_QUARANTINE_MS',
  maxQuarantineMs: 'LEASEHOLD_UNIT_MAX_QUARANTINE_MS',
};

/**
 * Run `check`; an {@link InvalidSettingError} it throws becomes a {@link ConfigError} naming the
 * variable, its reason's other setting names replaced by their variables, and the value as given.
 */
function asVariables(
  env: Record<string, string | undefined>,
  check: () => unknown,
  variables: Record<string, keyof typeof schema>,
): void {
  try {
    check();
  } catch (e) {
    const variable = e instanceof InvalidSettingError ? variables[e.setting] : undefined;
    if (!variable) throw e;
    const reason = (e as InvalidSettingError).reason
      .replace(/^\([^)]*\) /, '')
      .replace(/ \(got [^)]*\)$/, '')
      .replace(/\b[a-z][A-Za-z]+\b/g, (word) => variables[word] ?? word);
    const given = env[variable];
    throw new ConfigError(variable, given === undefined || given === '' ? reason : `${reason} (got ${JSON.stringify(given)})`);
  }
}

/** The database settings must name one reachable database, and IAM auth what it needs. */
function checkDb(db: DbConfig, hasUrl: boolean): void {
  if (db.iamAuth && !db.user) {
    throw new ConfigError('LEASEHOLD_DB_USER', 'is required with LEASEHOLD_DB_IAM_AUTH=true (the user IAM tokens are made for)');
  }
  // DATABASE_URL wins: the host settings are not used, so they need not be complete.
  if (hasUrl || !db.host) return;
  if (!db.name) throw new ConfigError('LEASEHOLD_DB_NAME', 'is required with LEASEHOLD_DB_HOST');
  if (!db.user) throw new ConfigError('LEASEHOLD_DB_USER', 'is required with LEASEHOLD_DB_HOST');
  if (db.iamAuth && db.tls === 'off') {
    throw new ConfigError(
      'LEASEHOLD_DB_TLS',
      'must not be off with LEASEHOLD_DB_IAM_AUTH=true: RDS accepts IAM tokens only over TLS',
    );
  }
  if (db.iamAuth && !db.region) {
    throw new ConfigError('AWS_REGION', 'is required with LEASEHOLD_DB_IAM_AUTH=true (IAM tokens are signed for a region)');
  }
}

/** A name batches use for a function: letters, digits, `-`, `_` and `.`, at most 140. */
const INVOKABLE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,139}$/;
/** A Lambda function name, or its ARN (with an optional qualifier). */
const FUNCTION_TARGET = /^(arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,140}(:[A-Za-z0-9$_-]{1,128})?$/;

/**
 * Parse `LEASEHOLD_INVOKABLE`: comma-separated entries, each `name=target` or a bare `target`,
 * where `target` is a Lambda function name or ARN; a bare target is known by its function name.
 * `score=arn:aws:lambda:eu-west-1:123456789012:function:app-prod-Score-x1, legacy-report`
 * gives `{ score: 'arn:…', 'legacy-report': 'legacy-report' }`. The SST component writes it from
 * its `invokable` option; `leasehold dev --app` from the app's `localFunctions`.
 * @throws {ConfigError} an entry that is not a name and a function name or ARN, or a name given twice.
 */
export function parseInvokable(value: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of value.split(',')) {
    const entry = raw.trim();
    if (!entry) continue;
    const at = entry.indexOf('=');
    const target = (at < 0 ? entry : entry.slice(at + 1)).trim();
    if (!FUNCTION_TARGET.test(target)) {
      throw new ConfigError('LEASEHOLD_INVOKABLE', `"${target}" is not a Lambda function name or ARN`);
    }
    const name = at < 0 ? functionNameOf(target) : entry.slice(0, at).trim();
    if (!INVOKABLE_NAME.test(name)) {
      throw new ConfigError('LEASEHOLD_INVOKABLE', `"${name}" is not a function name (letters, digits, ".", "_", "-")`);
    }
    if (Object.prototype.hasOwnProperty.call(out, name))
      throw new ConfigError('LEASEHOLD_INVOKABLE', `"${name}" is listed twice`);
    out[name] = target;
  }
  return out;
}

/** `arn:…:function:NAME[:qualifier]` or `NAME[:qualifier]` → `NAME`. */
function functionNameOf(target: string): string {
  const parts = target.split(':');
  const at = parts.indexOf('function');
  return at >= 0 ? parts[at + 1]! : parts[0]!;
}
