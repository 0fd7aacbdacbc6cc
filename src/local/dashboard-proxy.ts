// `leasehold dashboard --api URL`: the dashboard of a deployed stage. A local server serves the
// same page as `leasehold dev` and forwards its API calls to the stage's HTTP API, signed with
// SigV4 (service `execute-api`) with the caller's AWS credentials from the default provider chain
// (environment, profiles, SSO, …). The API's IAM auth stays as it is, and the page never sees a
// credential: it talks to this server only.
// With `--events URL` (the stage's `events` output) the page's progress streams come from the
// events function URL, signed for `lambda`, one upstream stream per batch (src/local/events-relay.ts).
// This file owns the configuration and the server; forwarding is src/local/dashboard-forward.ts.
import { createServer } from 'node:http';
import { fromNodeProviderChain } from '@aws-sdk/credential-providers';
import { Sha256 } from '@smithy/core/checksum';
import { loadConfig, NODE_REGION_CONFIG_FILE_OPTIONS, NODE_REGION_CONFIG_OPTIONS } from '@smithy/core/config';
import { SignatureV4 } from '@smithy/signature-v4';
import { BATCH_EVENTS_ROUTE } from '../api/batch-events.js';
import { dashboardAssets } from './dashboard-assets.js';
import { ApiForwarder, sendJsonError } from './dashboard-forward.js';
import { EventsRelay } from './events-relay.js';
import { closeServer, listen } from './http-util.js';
import { crossSiteRefusal, foreignHostRefusal } from './local-guard.js';
import { LeaseholdError } from '../errors.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** The stage's HTTP API: `https://abc123.execute-api.eu-west-1.amazonaws.com` (the `api` output), with a stage path if it has one. */
  apiUrl: string;
  /**
   * The stage's events function URL: `https://abc123.lambda-url.eu-west-1.on.aws/` (the `events`
   * output). With it, the page's `GET /batches/{id}/events` is relayed from there, signed for
   * `lambda`; without it, that route answers 204 (no stream) and the page polls.
   */
  eventsUrl?: string;
  /** Port on 127.0.0.1; 0 means any free port. */
  port: number;
  /**
   * Region to sign for. Default: the one in an `execute-api` URL (for the events, in a
   * `lambda-url` URL, else the API's), else `AWS_REGION`, else the profile's `region`.
   */
  region?: string;
  /** AWS profile of the credential chain. Default `AWS_PROFILE`, else `default`. */
  profile?: string;
  /** Credentials to sign with. Default the default provider chain (`fromNodeProviderChain`). */
  credentials?: () => Promise<AwsCredentials>;
  /**
   * How long one forwarded request may take, ms; for a progress stream, how long its head may
   * take (the stream itself has no limit). Default 30,000 (API Gateway's own limit).
   */
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
  /** The events function URL progress streams are relayed from, and its region; absent without `eventsUrl`. */
  events?: { url: string; region: string };
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

/** The region of a Lambda function URL's host (`abc.lambda-url.eu-west-1.on.aws` → `eu-west-1`). */
export function regionOfFunctionUrlHost(hostname: string): string | undefined {
  return /\.lambda-url\.([a-z]{2}(?:-[a-z]+)+-\d+)\.on\.aws$/.exec(hostname)?.[1];
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
 * - `GET /batches/{id}/events`: with `eventsUrl`, relayed from the events function URL signed for
 *   `lambda`, every listener of one batch on one upstream stream ({@link EventsRelay.listen}
 *   says how it starts and ends); without, 204 No Content, SSE's "no stream, do not reconnect"
 *   (the page then polls).
 *
 * @throws {DashboardConfigError} `apiUrl` or `eventsUrl` is not an http(s) URL, is plain http to
 *   a host that is not loopback, or has a query; or no region can be found.
 * @throws {LocalPortInUseError} `port` is taken.
 */
export async function startDashboard(options: DashboardOptions): Promise<DashboardServer> {
  const { base, region } = await resolveBase('--api', options.apiUrl, regionOfApiHost, options);
  const events =
    options.eventsUrl === undefined
      ? undefined
      : await resolveBase('--events', options.eventsUrl, regionOfFunctionUrlHost, options, region);
  const credentials = options.credentials ?? fromNodeProviderChain(options.profile ? { profile: options.profile } : {});
  const basePath = base.pathname.replace(/\/+$/, '');
  const timeoutMs = options.timeoutMs ?? 30_000;
  const forwarder = new ApiForwarder({
    base,
    basePath,
    signer: new SignatureV4({ service: 'execute-api', region, credentials, sha256: Sha256 }),
    timeoutMs,
    maxBodyBytes: options.maxBodyBytes ?? 10_485_760,
  });
  const relay =
    events &&
    new EventsRelay({
      base: events.base,
      basePath: events.base.pathname.replace(/\/+$/, ''),
      signer: new SignatureV4({ service: 'lambda', region: events.region, credentials, sha256: Sha256 }),
      timeoutMs,
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
      const stream = req.method === 'GET' ? BATCH_EVENTS_ROUTE.exec((req.url ?? '/').split('?')[0]!) : null;
      if (stream && relay) return relay.listen(stream[1]!.toLowerCase(), res);
      if (stream) {
        // Not forwarded (the HTTP API cannot stream). 204 is SSE's "no stream, do not reconnect":
        // the page's client polls, and the browser logs no failed request.
        return void res.writeHead(204, { 'cache-control': 'no-store' }).end();
      }
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
    ...(events
      ? { events: { url: `${events.base.origin}${events.base.pathname.replace(/\/+$/, '')}`, region: events.region } }
      : {}),
    checkCredentials: async () => {
      const c: AwsCredentials = await credentials();
      return c.accessKeyId;
    },
    close: () => {
      // Open progress streams would keep the server from draining: they end first.
      relay?.close();
      return (closing ??= closeServer(server, drained()));
    },
  };
}

/**
 * A stage's base URL (`--api` or `--events`) checked, and the region to sign for: `options.region`,
 * else the one `regionOf` finds in its host, else `fallback` (the events: the API's), else the
 * environment's or the profile's.
 * @throws {DashboardConfigError} see {@link startDashboard}.
 */
async function resolveBase(
  flag: string,
  url: string,
  regionOf: (hostname: string) => string | undefined,
  options: Pick<DashboardOptions, 'region' | 'profile'>,
  fallback?: string,
): Promise<{ base: URL; region: string }> {
  const output = flag === '--api' ? 'api' : 'events';
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new DashboardConfigError(`${flag} ${url}: not a URL (the stage's \`${output}\` output, https://…)`);
  }
  if (base.protocol !== 'https:' && !(base.protocol === 'http:' && isLoopback(base.hostname))) {
    throw new DashboardConfigError(`${flag} ${url}: must be https:// (plain http only to this machine)`);
  }
  if (base.search || base.hash) throw new DashboardConfigError(`${flag} ${url}: give the base URL, without a query`);
  // A function URL has no path: one given here would be put before /batches/{id}/events.
  if (flag === '--events' && base.pathname !== '/') {
    throw new DashboardConfigError(`${flag} ${url}: give the function URL alone, without a path (the stage's \`events\` output)`);
  }
  const region = options.region ?? regionOf(base.hostname) ?? fallback ?? (await profileRegion(options.profile));
  if (!region) {
    throw new DashboardConfigError(`${flag} ${url}: cannot tell its region from the URL: give --region (or set AWS_REGION)`);
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
 * the page is, where its calls and its progress streams go and whether credentials were found. Resolves to the exit code:
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
  say(
    dashboard.events
      ? `  events       ${dashboard.events.url} (progress streams signed with SigV4 for lambda in ${dashboard.events.region}, one per batch)`
      : '  events       none (no --events URL): the batch view polls',
  );
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
