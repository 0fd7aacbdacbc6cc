// Usage and cost per batch and per tenant (docs/design.md, "Usage and cost"): what a run counts in
// memory while it runs (its share of the worker's time, the item attempts it starts, the S3
// requests it sends) and the published prices a cost is estimated at; the sums a batch or a
// tenant reads are usage-reads.ts (the API's and the senders', off a worker's cold start).
// Stored once per run at its end (sql/usage.ts), never per item.
import { InvalidSettingError } from '../errors.js';

/** A worker's instruction set architecture, as Lambda prices it. */
export type Architecture = 'x86_64' | 'arm64';

/** The architecture this process runs on (`process.arch`: `arm64`, else `x86_64`). */
export function currentArchitecture(): Architecture {
  return process.arch === 'arm64' ? 'arm64' : 'x86_64';
}

/**
 * Prices in USD of one region: Lambda's compute per GB-second and per request (by architecture),
 * and S3 Standard's requests per 1,000 (`get`: GET, HEAD and other reads; `put`: PUT, POST,
 * COPY; `list`: LIST, priced as PUT by S3).
 */
export interface PriceTable {
  lambdaGbSecond: Record<Architecture, number>;
  lambdaRequest: Record<Architecture, number>;
  s3PerThousand: { get: number; put: number; list: number };
}

// x86_64 and arm64 compute, and one request ($0.20 per million), as most regions list them.
const LAMBDA = {
  lambdaGbSecond: { x86_64: 0.0000166667, arm64: 0.0000133334 },
  lambdaRequest: { x86_64: 0.0000002, arm64: 0.0000002 },
};

/**
 * Published prices of a few regions, USD. Sources: AWS's public pricing pages,
 * https://aws.amazon.com/lambda/pricing/ (compute at the first tier, the first 6 billion
 * GB-seconds a month; requests) and https://aws.amazon.com/s3/pricing/ (S3 Standard requests),
 * as listed there in November 2024. The free tier and Lambda's volume tiers are not applied.
 * Prices change: override them with `LEASEHOLD_PRICES` (docs/configuration.md).
 */
export const PUBLISHED_PRICES: Readonly<Record<string, PriceTable>> = {
  'us-east-1': { ...LAMBDA, s3PerThousand: { get: 0.0004, put: 0.005, list: 0.005 } },
  'us-east-2': { ...LAMBDA, s3PerThousand: { get: 0.0004, put: 0.005, list: 0.005 } },
  'us-west-2': { ...LAMBDA, s3PerThousand: { get: 0.0004, put: 0.005, list: 0.005 } },
  'eu-west-1': { ...LAMBDA, s3PerThousand: { get: 0.0004, put: 0.005, list: 0.005 } },
  'eu-central-1': { ...LAMBDA, s3PerThousand: { get: 0.00043, put: 0.0054, list: 0.0054 } },
  'ap-northeast-1': { ...LAMBDA, s3PerThousand: { get: 0.00037, put: 0.0047, list: 0.0047 } },
  'ap-southeast-1': { ...LAMBDA, s3PerThousand: { get: 0.0004, put: 0.005, list: 0.005 } },
};

/** The region whose prices apply when none is given or the given one is not in {@link PUBLISHED_PRICES}. */
export const DEFAULT_PRICE_REGION = 'us-east-1';

/** The prices a cost is estimated at, and the region they are of. */
export interface Prices {
  /** The region of the published prices used (`us-east-1` for a region not listed). */
  region: string;
  /** Whether `LEASEHOLD_PRICES` overrode any of them. */
  overridden: boolean;
  table: PriceTable;
}

/** Part of a {@link PriceTable}: what `LEASEHOLD_PRICES` may set. */
export type PriceOverride = {
  [K in keyof PriceTable]?: Partial<PriceTable[K]>;
};

/**
 * Parses `LEASEHOLD_PRICES`: a JSON object with any of `lambdaGbSecond` and `lambdaRequest`
 * (`{ x86_64?, arm64? }`) and `s3PerThousand` (`{ get?, put?, list? }`), each price a number ≥ 0
 * in USD. Undefined or empty: no override.
 * @throws {InvalidSettingError} (setting `LEASEHOLD_PRICES`) not JSON, an unknown key, or a price that is not a number ≥ 0.
 */
export function parsePriceOverride(text: string | undefined): PriceOverride {
  if (text === undefined || text.trim() === '') return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new InvalidSettingError('LEASEHOLD_PRICES', 'must be a JSON object');
  }
  const groups: Record<keyof PriceTable, readonly string[]> = {
    lambdaGbSecond: ['x86_64', 'arm64'],
    lambdaRequest: ['x86_64', 'arm64'],
    s3PerThousand: ['get', 'put', 'list'],
  };
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new InvalidSettingError('LEASEHOLD_PRICES', 'must be a JSON object');
  for (const [group, prices] of Object.entries(v)) {
    const keys = groups[group as keyof PriceTable];
    if (!keys)
      throw new InvalidSettingError(
        'LEASEHOLD_PRICES',
        `has an unknown key ${JSON.stringify(group)} (allowed: ${Object.keys(groups).join(', ')})`,
      );
    if (typeof prices !== 'object' || prices === null || Array.isArray(prices)) {
      throw new InvalidSettingError('LEASEHOLD_PRICES', `${group} must be an object of prices`);
    }
    for (const [k, p] of Object.entries(prices as Record<string, unknown>)) {
      if (!keys.includes(k))
        throw new InvalidSettingError(
          'LEASEHOLD_PRICES',
          `${group} has an unknown key ${JSON.stringify(k)} (allowed: ${keys.join(', ')})`,
        );
      if (typeof p !== 'number' || !Number.isFinite(p) || p < 0) {
        throw new InvalidSettingError('LEASEHOLD_PRICES', `${group}.${k} must be a number >= 0 (USD)`);
      }
    }
  }
  return v as PriceOverride;
}

/**
 * The prices of `region` ({@link PUBLISHED_PRICES}; a region not listed, or none, takes
 * {@link DEFAULT_PRICE_REGION}'s) with `override` applied over them.
 */
export function pricesFor(region: string | undefined, override: PriceOverride = {}): Prices {
  const known = region !== undefined && region in PUBLISHED_PRICES ? region : DEFAULT_PRICE_REGION;
  const base = PUBLISHED_PRICES[known]!;
  return {
    region: known,
    overridden: Object.keys(override).length > 0,
    table: {
      lambdaGbSecond: { ...base.lambdaGbSecond, ...override.lambdaGbSecond },
      lambdaRequest: { ...base.lambdaRequest, ...override.lambdaRequest },
      s3PerThousand: { ...base.s3PerThousand, ...override.s3PerThousand },
    },
  };
}

/** An estimated cost in USD, at {@link Prices}; an estimate, never a bill. */
export interface EstimatedCost {
  currency: 'USD';
  /** Lambda compute (GB-seconds) plus Lambda requests plus S3 requests, USD. */
  total: number;
  /** Lambda compute and requests, USD. */
  lambda: number;
  /** S3 requests, USD. */
  s3: number;
  /** The region whose published prices were used. */
  region: string;
  /** Whether `LEASEHOLD_PRICES` overrode any price. */
  overridden: boolean;
}

/**
 * What the workers used for a batch, or for a tenant over a time range (docs/design.md, "Usage
 * and cost"): sums of the batch's runs' rows as recorded so far.
 */
export interface Usage {
  /** Worker time, ms: each run's share of its invocation while it ran (runs in one invocation split it). */
  workerMs: number;
  /** Worker time × memory size, GB-seconds (GB = 1,024 MB, as Lambda bills). */
  gbSeconds: number;
  /** Runs recorded (a run is one worker invocation's ownership of one batch). */
  runs: number;
  /** Runs that died without reporting, counted by their takeover from their start to their last beat. */
  diedRuns: number;
  /** Distinct worker invocations (processes) among the runs: each is charged one Lambda request. */
  invocations: number;
  /** Item attempts the runs started (a retry is one more). */
  items: number;
  /** S3 requests the runs' source readers and results writers sent (retries included). */
  s3Requests: { get: number; put: number; list: number };
  estimatedCost: EstimatedCost;
}

/** A tenant's {@link Usage} over `[from, to)`, by when each run's figures were recorded. */
export interface TenantUsage extends Usage {
  tenant: string;
  from: Date;
  to: Date;
}

/**
 * Splits a process's time among its runs (docs/design.md, "Usage and cost"): while n runs are
 * live, each is charged 1/n of every ms, so a process's runs together are charged its time once.
 * With `chargeIdle` (a Lambda worker's runner) the time with no run live is charged too, as
 * Lambda bills it: from the meter's start, or from the end of the run that left the process
 * idle, to the next run's start, to that run; and the idle time after the last run ended, up to
 * the process's end, to that last run ({@link tail}). Without it (a long-lived runner: `leasehold
 * dev`, a container) idle time is nobody's.
 * Constant time per start and end; nothing per item. Real time (`performance.now()`), never a
 * test clock.
 */
export class UsageMeter {
  /** ms each live run has been charged since the meter began (the integral of 1/n). */
  private perRun = 0;
  private last = performance.now();
  /** Live runs: the `perRun` each began at, and its batch. */
  private readonly started = new Map<string, { from: number; batchId: string }>();
  /** When the process last had no run live (the meter's start, or the end that emptied it). */
  private idleFrom = this.last;
  /** The run whose end left the process idle, until the idle time is charged to a run. */
  private lastEnded: { runId: string; batchId: string } | undefined;

  /** @param chargeIdle charge the time with no run live to the runs around it. Default false. */
  constructor(private readonly chargeIdle = false) {}

  private advance(): void {
    const now = performance.now();
    if (this.started.size > 0) this.perRun += (now - this.last) / this.started.size;
    this.last = now;
  }

  /** A run began (its takeover statement was sent); with none live, it is charged the idle time before it. */
  start(runId: string, batchId: string): void {
    this.advance();
    const idle = this.chargeIdle && this.started.size === 0 ? Math.max(0, this.last - this.idleFrom) : 0;
    this.lastEnded = undefined;
    this.started.set(runId, { from: this.perRun - idle, batchId });
  }

  /** A run ended: its share of the process's time since it began, ms (0 for a run not started). */
  end(runId: string): number {
    this.advance();
    const live = this.started.get(runId);
    this.started.delete(runId);
    if (live !== undefined && this.started.size === 0) {
      this.idleFrom = this.last;
      this.lastEnded = { runId, batchId: live.batchId };
    }
    return live === undefined ? 0 : this.perRun - live.from;
  }

  /**
   * At the process's end: the idle time since the last run ended, ms, and that run (its usage
   * row gets it: `addRunWorkerMs`); undefined when a run is still live or none has ended since
   * the last idle time was charged. Charged once: a second call answers undefined.
   */
  tail(): { runId: string; batchId: string; ms: number } | undefined {
    if (!this.chargeIdle || this.started.size > 0 || this.lastEnded === undefined) return undefined;
    const ended = this.lastEnded;
    this.lastEnded = undefined;
    return { ...ended, ms: Math.max(0, performance.now() - this.idleFrom) };
  }
}

/** S3 requests one run sent, by price class. */
export interface S3Counts {
  get: number;
  put: number;
  list: number;
}
