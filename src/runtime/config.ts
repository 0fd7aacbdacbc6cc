import { delimiter } from 'node:path';
import { tmpdir } from 'node:os';
import * as z from 'zod';
import { DEFAULT_MAX_OUTPUT_BYTES, RUNNER_DEFAULTS, RUNNER_LIMITS, type StartLimits } from '../batch/index.js';
import { parseOutboxAllow } from '../units/endpoint-guard.js';

/** A setting from the environment is missing or invalid; the message names the variable. */
export class ConfigError extends Error {
  readonly code = 'config';
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

const int = (min: number) => z.coerce.number().int().min(min);
const flag = z
  .enum(['true', 'false'], { error: () => 'must be "true" or "false"' })
  .transform((v) => v === 'true');

/** Variables whose values are secrets: never echoed in a {@link ConfigError}. */
const SECRET = /PASSWORD/;

/**
 * Every setting, its environment variable and default. Durations are in ms (the `_MS` suffix).
 * docs/configuration.md lists the same (test/docs/configuration.test.ts checks it).
 */
const schema = {
  DATABASE_URL: z
    .string()
    .url()
    .refine((url) => /^postgres(ql)?:\/\//.test(url), 'must be a postgres:// or postgresql:// URL')
    .optional(),
  LEASEHOLD_WORKER_FUNCTION: z.string().min(1).default('leasehold-worker'),
  LEASEHOLD_DEADLINE_MARGIN_MS: int(0).default(10_000),
  LEASEHOLD_DRAIN_MS: int(0).optional(),
  LEASEHOLD_WORKER_IDLE_MS: int(0).default(2_000),
  LEASEHOLD_WORKER_POLL_MS: int(10).default(1_000),
  LEASEHOLD_MAX_RUNS: int(1).default(4),
  LEASEHOLD_PARALLEL: int(1).default(2),
  LEASEHOLD_QUEUE_DEPTH: int(0).max(10_000).optional(),
  LEASEHOLD_BEAT_MS: int(10).default(5_000),
  // Bounded: stale limits and retry delays are added to now() in SQL and must never overflow.
  LEASEHOLD_STALE_MS: int(20).max(RUNNER_LIMITS.staleMs).default(30_000),
  LEASEHOLD_ATTEMPTS: int(1).max(RUNNER_LIMITS.attempts).default(3),
  LEASEHOLD_BACKOFF_MS: int(0).max(RUNNER_LIMITS.backoffMs).default(5_000),
  LEASEHOLD_MAX_BACKOFF_MS: int(0).max(RUNNER_LIMITS.maxBackoffMs).default(RUNNER_DEFAULTS.maxBackoffMs),
  LEASEHOLD_MOVE_TRIES: int(1).max(100).default(4),
  LEASEHOLD_MOVE_BACKOFF_MS: int(0).max(60_000).default(100),
  LEASEHOLD_MAX_OUTPUT_BYTES: int(1).max(67_108_864).default(DEFAULT_MAX_OUTPUT_BYTES),
  LEASEHOLD_MAX_STALLED_RUNS: int(1).max(RUNNER_LIMITS.maxStalledRuns).default(RUNNER_DEFAULTS.maxStalledRuns),
  LEASEHOLD_STORE_TIMEOUT_MS: int(100).default(10_000),
  LEASEHOLD_MAX_OPEN: int(1).default(4),
  LEASEHOLD_MAX_RUNNING: int(0).max(RUNNER_DEFAULTS.maxRunning).optional(),
  LEASEHOLD_SLICE_MS: int(10).max(RUNNER_LIMITS.staleMs).default(RUNNER_DEFAULTS.sliceMs),
  LEASEHOLD_MAX_ITEMS: int(1).default(200_000),
  LEASEHOLD_MAX_INPUT_BYTES: int(0).default(65_536),
  LEASEHOLD_MAX_TOTAL_BYTES: int(1).default(536_870_912),
  // Lambda refuses a synchronous invocation (API Gateway's) whose event is over 6 MB.
  LEASEHOLD_MAX_BODY_BYTES: int(64).max(6_291_456, 'must be at most 6291456 (Lambda refuses larger request events)').default(65_536),
  LEASEHOLD_DISPATCH_COOLDOWN_MS: int(0).max(RUNNER_LIMITS.staleMs).default(30_000),
  LEASEHOLD_DB_POOL_MAX: int(1).default(4),
  LEASEHOLD_ALLOWED_ROOTS: z.string().optional(),
  LEASEHOLD_INVOKABLE: z.string().optional(),
  LEASEHOLD_TTL_MS: int(100).default(15_000),
  LEASEHOLD_HEARTBEAT_MS: int(10).default(5_000),
  LEASEHOLD_REBALANCE_MS: int(10).default(5_000),
  LEASEHOLD_SWEEP_CUTOFF_MS: int(100).default(3_600_000),
  LEASEHOLD_SHED_HYSTERESIS: z.coerce.number().min(0).max(10).default(0.2),
  LEASEHOLD_CLAIM_BATCH: int(1).default(64),
  LEASEHOLD_MAX_CLAIM_PER_TICK: int(1).default(1024),
  LEASEHOLD_INVOKE_CAP: int(0).default(10),
  LEASEHOLD_INVOCATION_PENDING_MS: int(1000).default(30_000),
  LEASEHOLD_DB_HOST: z.string().min(1).optional(),
  LEASEHOLD_DB_PORT: int(1).max(65_535).default(5432),
  LEASEHOLD_DB_NAME: z.string().min(1).optional(),
  LEASEHOLD_DB_USER: z.string().min(1).max(63).optional(),
  LEASEHOLD_DB_PASSWORD: z.string().optional(),
  LEASEHOLD_DB_IAM_AUTH: flag.default(false),
  LEASEHOLD_DB_TLS: z.enum(['rds', 'system', 'off'], { error: () => 'must be one of rds, system, off' }).default('rds'),
  LEASEHOLD_DB_CA_FILE: z.string().min(1).optional(),
  LEASEHOLD_DB_IDLE_TIMEOUT_MS: int(1_000).default(120_000),
  LEASEHOLD_DB_MAX_LIFETIME_MS: int(60_000).max(3_600_000).default(600_000),
  LEASEHOLD_DB_IAM_USER: z.string().min(1).max(63).optional(),
  LEASEHOLD_DB_SCHEDULER_USER: z.string().min(1).max(63).optional(),
  LEASEHOLD_DB_RESERVED_CONNECTIONS: int(1).max(10_000).default(8),
  LEASEHOLD_DB_RUNTIME_CONNECTIONS: int(1).max(100_000).optional(),
  LEASEHOLD_DB_CONNECT_RETRY_MS: int(0).max(900_000).default(20_000),
  // Read by the outbox-delivery job itself (src/units/endpoint-guard.ts) whenever it checks an
  // endpoint; validated here too, so a bad value stops a function when it starts.
  LEASEHOLD_OUTBOX_ALLOW: z
    .string()
    .optional()
    .superRefine((v, ctx) => {
      try {
        parseOutboxAllow(v);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
      }
    }),
  LEASEHOLD_MIGRATIONS_DIR: z.string().min(1).optional(),
  AWS_REGION: z.string().min(1).optional(),
} as const;

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
   * At the deadline, how long in-flight items may take to stop before runs hand off without
   * them, ms. Default: half the deadline margin, at most 5,000. Must be below the margin.
   */
  drainMs: number;
  /** A worker with nothing to run returns after this long, ms. */
  workerIdleMs: number;
  /** How often a worker looks for batches to take over, ms. */
  workerPollMs: number;
  /** Batches one worker runs at once. */
  maxRuns: number;
  /** Runner defaults; jobs may override parallel, attempts and backoff. */
  parallel: number;
  /**
   * Items a run claims ahead of execution beyond `parallel` (`LEASEHOLD_QUEUE_DEPTH`, 0 to
   * 10,000); undefined: as many as `parallel`.
   */
  queueDepth: number | undefined;
  beatMs: number;
  /** `LEASEHOLD_STALE_MS`; at most one day. */
  staleMs: number;
  /** `LEASEHOLD_ATTEMPTS`, 1 to 1,000. */
  attempts: number;
  /** First retry delay, ms (`LEASEHOLD_BACKOFF_MS`); 0 to one day, at most `maxBackoffMs`. */
  backoffMs: number;
  /** Longest retry delay, jitter included, ms (`LEASEHOLD_MAX_BACKOFF_MS`, default 10 minutes); at most one day. */
  maxBackoffMs: number;
  moveTries: number;
  moveBackoffMs: number;
  /** Largest item output stored, bytes of JSON (`LEASEHOLD_MAX_OUTPUT_BYTES`, default 256 KiB); a larger one fails its item. */
  maxOutputBytes: number;
  /**
   * Runs in a row that store no item result before a batch is given up: it ends `failed` with a
   * reason (`LEASEHOLD_MAX_STALLED_RUNS`, default 10).
   */
  maxStalledRuns: number;
  /** A run's store statement not answered within this is retried as a store error, ms. */
  storeTimeoutMs: number;
  /** Most open batches per (tenant, datasource). */
  maxOpen: number;
  /**
   * Most batches of one tenant running at once, for tenants without a limit of their own
   * (`LEASEHOLD_MAX_RUNNING`, 0 to 2,147,483,647; unset: no limit). docs/design.md, "Tenant fairness".
   */
  maxRunning: number;
  /**
   * A run that has held its batch this long hands off when another tenant's batch waits, ms
   * (`LEASEHOLD_SLICE_MS`, default 60,000; at most one day). docs/design.md, "Tenant fairness".
   */
  sliceMs: number;
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
  /** Lease settings of every worker process (see `LeaseConfig`), ms. */
  lease: {
    ttlMs: number;
    heartbeatIntervalMs: number;
    rebalanceIntervalMs: number;
    sweepCutoffMs: number;
    shedHysteresis: number;
    claimBatch: number;
    maxClaimPerTick: number;
  };
  /** Most workers one scheduler run invokes. */
  invokeCap: number;
  /**
   * The confirmation window, ms: an invoked worker counts as coming until its first heartbeat
   * or for this long, whichever is first. Keep it below the scheduler's interval (a minute), so
   * an invocation lost on the way (or dropped by Lambda's recursive loop detection) is replaced
   * by the next scheduler run. Default 30,000.
   */
  invocationPendingMs: number;
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
   * connections, `57P03`, refused, timed out) with jittered backoff for at most this long within
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
    const parsed = (type as z.ZodType).safeParse(raw === '' ? undefined : raw);
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
    drainMs: e.LEASEHOLD_DRAIN_MS ?? Math.min(5_000, Math.floor(e.LEASEHOLD_DEADLINE_MARGIN_MS / 2)),
    workerIdleMs: e.LEASEHOLD_WORKER_IDLE_MS,
    workerPollMs: e.LEASEHOLD_WORKER_POLL_MS,
    maxRuns: e.LEASEHOLD_MAX_RUNS,
    parallel: e.LEASEHOLD_PARALLEL,
    queueDepth: e.LEASEHOLD_QUEUE_DEPTH,
    beatMs: e.LEASEHOLD_BEAT_MS,
    staleMs: e.LEASEHOLD_STALE_MS,
    attempts: e.LEASEHOLD_ATTEMPTS,
    backoffMs: e.LEASEHOLD_BACKOFF_MS,
    maxBackoffMs: e.LEASEHOLD_MAX_BACKOFF_MS,
    moveTries: e.LEASEHOLD_MOVE_TRIES,
    moveBackoffMs: e.LEASEHOLD_MOVE_BACKOFF_MS,
    maxOutputBytes: e.LEASEHOLD_MAX_OUTPUT_BYTES,
    maxStalledRuns: e.LEASEHOLD_MAX_STALLED_RUNS,
    storeTimeoutMs: e.LEASEHOLD_STORE_TIMEOUT_MS,
    maxOpen: e.LEASEHOLD_MAX_OPEN,
    maxRunning: e.LEASEHOLD_MAX_RUNNING ?? RUNNER_DEFAULTS.maxRunning,
    sliceMs: e.LEASEHOLD_SLICE_MS,
    maxItems: e.LEASEHOLD_MAX_ITEMS,
    maxInputBytes: e.LEASEHOLD_MAX_INPUT_BYTES,
    maxTotalBytes: e.LEASEHOLD_MAX_TOTAL_BYTES,
    maxBodyBytes: e.LEASEHOLD_MAX_BODY_BYTES,
    dispatchCooldownMs: e.LEASEHOLD_DISPATCH_COOLDOWN_MS,
    dbPoolMax: e.LEASEHOLD_DB_POOL_MAX,
    db: {
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
      iamUser: e.LEASEHOLD_DB_IAM_USER,
      schedulerUser: e.LEASEHOLD_DB_SCHEDULER_USER,
      reservedConnections: e.LEASEHOLD_DB_RESERVED_CONNECTIONS,
      runtimeConnections: e.LEASEHOLD_DB_RUNTIME_CONNECTIONS,
      connectRetryMs: e.LEASEHOLD_DB_CONNECT_RETRY_MS,
    },
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
    },
    invokeCap: e.LEASEHOLD_INVOKE_CAP,
    invocationPendingMs: e.LEASEHOLD_INVOCATION_PENDING_MS,
  };
  if (config.lease.heartbeatIntervalMs >= config.lease.ttlMs) {
    throw new ConfigError('LEASEHOLD_HEARTBEAT_MS', `must be below LEASEHOLD_TTL_MS (${config.lease.ttlMs})`);
  }
  if (config.lease.claimBatch > config.lease.maxClaimPerTick) {
    throw new ConfigError('LEASEHOLD_CLAIM_BATCH', `must not exceed LEASEHOLD_MAX_CLAIM_PER_TICK (${config.lease.maxClaimPerTick})`);
  }
  if (config.lease.sweepCutoffMs < config.lease.ttlMs) {
    throw new ConfigError('LEASEHOLD_SWEEP_CUTOFF_MS', `must not be below LEASEHOLD_TTL_MS (${config.lease.ttlMs})`);
  }
  if (config.drainMs >= config.deadlineMarginMs && config.deadlineMarginMs > 0) {
    throw new ConfigError('LEASEHOLD_DRAIN_MS', `must be below LEASEHOLD_DEADLINE_MARGIN_MS (${config.deadlineMarginMs})`);
  }
  if (config.backoffMs > config.maxBackoffMs) {
    throw new ConfigError('LEASEHOLD_BACKOFF_MS', `must not exceed LEASEHOLD_MAX_BACKOFF_MS (${config.maxBackoffMs})`);
  }
  if (config.beatMs >= config.staleMs) {
    throw new ConfigError('LEASEHOLD_BEAT_MS', `must be below LEASEHOLD_STALE_MS (${config.staleMs})`);
  }
  checkDb(config.db, config.databaseUrl !== undefined);
  return config;
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
    throw new ConfigError('LEASEHOLD_DB_TLS', 'must not be off with LEASEHOLD_DB_IAM_AUTH=true: RDS accepts IAM tokens only over TLS');
  }
  if (db.iamAuth && !db.region) {
    throw new ConfigError('AWS_REGION', 'is required with LEASEHOLD_DB_IAM_AUTH=true (IAM tokens are signed for a region)');
  }
}

/**
 * The start limits `createBatch` takes, from the settings that are given (`LEASEHOLD_MAX_ITEMS`,
 * `LEASEHOLD_MAX_INPUT_BYTES`, `LEASEHOLD_MAX_TOTAL_BYTES`); the others keep the library's defaults.
 */
export function startLimits(config: Partial<Pick<Config, 'maxItems' | 'maxInputBytes' | 'maxTotalBytes'>>): Partial<StartLimits> {
  const limits: Partial<StartLimits> = {};
  if (config.maxItems !== undefined) limits.maxItems = config.maxItems;
  if (config.maxInputBytes !== undefined) limits.maxInputBytes = config.maxInputBytes;
  if (config.maxTotalBytes !== undefined) limits.maxTotalBytes = config.maxTotalBytes;
  return limits;
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
    if (Object.prototype.hasOwnProperty.call(out, name)) throw new ConfigError('LEASEHOLD_INVOKABLE', `"${name}" is listed twice`);
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
