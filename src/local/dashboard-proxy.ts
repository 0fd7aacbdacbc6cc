// `leasehold dashboard --api URL`: the dashboard of a deployed stage. A local server serves the
// same page as `leasehold dev` and forwards its API calls to the stage's HTTP API, signed with
// SigV4 (service `execute-api`) with the caller's AWS credentials from the default provider chain
// (environment, profiles, SSO, …). The API's IAM auth stays as it is, and the page never sees a
// credential: it talks to this server only.
// This file owns the configuration and the server; forwarding is src/local/dashboard-forward.ts.
import { createServer } from 'node:http';
import { fromNodeProviderChain } from '@aws-sdk/credential-providers';
import { Sha256 } from '@smithy/core/checksum';
import { loadConfig, NODE_REGION_CONFIG_FILE_OPTIONS, NODE_REGION_CONFIG_OPTIONS } from '@smithy/core/config';
import { SignatureV4 } from '@smithy/signature-v4';
import { dashboardAssets } from './dashboard-assets.js';
import { ApiForwarder, sendJsonError } from './dashboard-forward.js';
import { closeServer, listen } from './http-util.js';
import { crossSiteRefusal, foreignHostRefusal } from './local-guard.js';
import { LeaseholdError } from '../errors.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** The stage's HTTP API: `https://abc123.execute-api.eu-west-1.amazonaws.com` (the `api` output), with a stage path if it has one. */
  apiUrl: string;
  /** Port on 127.0.0.1; 0 means any free port. */
  port: number;
  /**
   * Region to sign for. Default: the one in an `execute-api` URL, else `AWS_REGION`, else the
   * profile's `region`.
   */
  region?: string;
  /** AWS profile of the credential chain. Default `AWS_PROFILE`, else `default`. */
  profile?: string;
  /** Credentials to sign with. Default the default provider chain (`fromNodeProviderChain`). */
  credentials?: () => Promise<AwsCredentials>;
  /** How long one forwarded request may take, ms. Default 30,000 (API Gateway's own limit). */
  timeoutMs?: number;
  /** Largest request body forwarded, bytes. Default 10 MB (API Gateway's own limit). */
  maxBodyBytes?: number;
}

/** What requests are signed with. */
export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

/** A running dashboard, from {@link startDashboard}. */
export interface DashboardServer {
  /** `http://127.0.0.1:<port>`: the page is at `/`. */
  url: string;
  port: number;
  /** The region requests are signed for. */
  region: string;
  /** The API requests are forwarded to. */
  apiUrl: string;
  /**
   * Whether credentials can be had now: resolves to the access key id they carry, or throws the
   * provider chain's error (the dashboard still serves; API calls answer 401 until they can).
   */
  checkCredentials(): Promise<string>;
  /** Stop accepting requests, let those in progress finish, then close. Idempotent. */
  close(): Promise<void>;
}

/** The stage's base URL or a reason it cannot be one. Code `invalid_dashboard_config`. */
export class DashboardConfigError extends LeaseholdError {
  constructor(message: string) {
    super('invalid_dashboard_config', message);
  }
}

/** The region of an `execute-api` host (`abc.execute-api.eu-west-1.amazonaws.com` → `eu-west-1`). */
export function regionOfApiHost(hostname: string): string | undefined {
  return /\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$/.exec(hostname)?.[1];
}

/** `127.0.0.1`, `::1`, `localhost` and the like: where plain http is fine. */
const isLoopback = (hostname: string) =>
  hostname === 'localhost' || /^127\./.test(hostname) || hostname === '[::1]' || hostname === '::1';

/**
 * Serve the dashboard on `127.0.0.1:port` and forward every other request to `apiUrl`, signed
 * with SigV4 for `execute-api` (docs/design.md, "Serverless runtime": the API keeps its IAM auth).
 *
 * - The page and its assets: as `leasehold dev` serves them.
 * - Any other request: `GET`, `POST`, `PUT` or `DELETE` only, its path appended to `apiUrl`'s,
 *   the query kept, only `content-type`, `idempotency-key` and `accept` forwarded (no cookie, no
 *   authorization of the caller's), signed, and the answer passed back (status, JSON body,
 *   `content-type`, `allow`, `location`, `retry-after`).
 * - Refused here, never forwarded: a `Host` other than this server's loopback address and port
 *   (403: DNS rebinding), a change sent by another site's page (403), other methods (405), a
 *   body over `maxBodyBytes` (413), no credentials to be had (401 `no_credentials`, naming what to
 *   do). The API not answering: 502 `api_unreachable`, or 504 after `timeoutMs`.
 *
 * @throws {DashboardConfigError} `apiUrl` is not an http(s) URL, is plain http to a host that is
 *   not loopback, or no region can be found.
 * @throws {LocalPortInUseError} `port` is taken.
 */
export async function startDashboard(options: DashboardOptions): Promise<DashboardServer> {
  const { base, region } = await resolveApi(options);
  const credentials = options.credentials ?? fromNodeProviderChain(options.profile ? { profile: options.profile } : {});
  const basePath = base.pathname.replace(/\/+$/, '');
  const forwarder = new ApiForwarder({
    base,
    basePath,
    signer: new SignatureV4({ service: 'execute-api', region, credentials, sha256: Sha256 }),
    timeoutMs: options.timeoutMs ?? 30_000,
    maxBodyBytes: options.maxBodyBytes ?? 10_485_760,
  });
  const assets = dashboardAssets();
  let port = options.port;

  let inFlight = 0;
  let drainWaiters: (() => void)[] = [];
  const server = createServer((req, res) => {
    inFlight++;
    (async () => {
      const refusal = foreignHostRefusal(req, port) ?? crossSiteRefusal(req);
      if (refusal) return sendJsonError(res, 403, 'forbidden', refusal);
      if (await assets(req, res)) return;
      await forwarder.forward(req, res);
    })()
      .catch((e: unknown) => sendJsonError(res, 500, 'internal', (e as Error)?.message ?? String(e)))
      .finally(() => {
        if (--inFlight === 0) {
          const waiters = drainWaiters;
          drainWaiters = [];
          for (const w of waiters) w();
        }
      });
  });
  const listening = await listen(server, options.port, '127.0.0.1');
  port = listening.port;
  const drained = () => (inFlight === 0 ? Promise.resolve() : new Promise<void>((r) => drainWaiters.push(r)));
  let closing: Promise<void> | undefined;
  return {
    url: listening.url,
    port,
    region,
    apiUrl: `${base.origin}${basePath}`,
    checkCredentials: async () => {
      const c: AwsCredentials = await credentials();
      return c.accessKeyId;
    },
    close: () => (closing ??= closeServer(server, drained())),
  };
}

/**
 * `apiUrl` checked as a stage's base URL, and the region to sign for.
 * @throws {DashboardConfigError} see {@link startDashboard}.
 */
async function resolveApi(options: DashboardOptions): Promise<{ base: URL; region: string }> {
  let base: URL;
  try {
    base = new URL(options.apiUrl);
  } catch {
    throw new DashboardConfigError(`--api ${options.apiUrl}: not a URL (the stage's \`api\` output, https://…)`);
  }
  if (base.protocol !== 'https:' && !(base.protocol === 'http:' && isLoopback(base.hostname))) {
    throw new DashboardConfigError(`--api ${options.apiUrl}: must be https:// (plain http only to this machine)`);
  }
  if (base.search || base.hash)
    throw new DashboardConfigError(`--api ${options.apiUrl}: give the API's base URL, without a query`);
  const region = options.region ?? regionOfApiHost(base.hostname) ?? (await profileRegion(options.profile));
  if (!region) {
    throw new DashboardConfigError(
      `--api ${options.apiUrl}: cannot tell its region from the URL: give --region (or set AWS_REGION)`,
    );
  }
  return { base, region };
}

/** The region of the environment or of the profile's config, if any. */
async function profileRegion(profile: string | undefined): Promise<string | undefined> {
  try {
    return await loadConfig(NODE_REGION_CONFIG_OPTIONS, {
      ...NODE_REGION_CONFIG_FILE_OPTIONS,
      ...(profile ? { profile } : {}),
    })();
  } catch {
    return undefined;
  }
}

/**
 * `leasehold dashboard`: {@link startDashboard} until Ctrl-C (or SIGTERM), saying on stderr where
 * the page is, where its calls go and whether credentials were found. Resolves to the exit code:
 * 0 after a stop, 2 for options that cannot work.
 */
export async function runDashboard(options: DashboardOptions): Promise<number> {
  const say = (line: string) => process.stderr.write(line + '\n');
  let dashboard: DashboardServer;
  try {
    dashboard = await startDashboard(options);
  } catch (e) {
    say(`leasehold dashboard: ${(e as Error).message}`);
    return 2;
  }
  say('leasehold dashboard');
  say(`  dashboard    ${dashboard.url}/`);
  say(`  api          ${dashboard.apiUrl} (requests signed with SigV4 for execute-api in ${dashboard.region})`);
  try {
    const key = await dashboard.checkCredentials();
    say(
      `  credentials  ${key.slice(0, 4)}…${key.slice(-4)} (${options.credentials ? 'given' : `the default provider chain${options.profile ? `, profile ${options.profile}` : ''}`})`,
    );
  } catch (e) {
    say(`  credentials  none yet: ${(e as Error).message}`);
    say(
      '               the page shows 401 until there are (aws sso login, AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)',
    );
  }
  say('Ctrl-C stops.');
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await dashboard.close();
  say('stopped');
  return 0;
}
