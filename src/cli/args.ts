// What the `leasehold` command's subcommands share: argument parsers (each throws commander's
// InvalidArgumentError, which prints one line and a hint), the API's address and client, and
// small formatters.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { InvalidArgumentError, Option } from 'commander';
import { ApiClient } from '../client/index.js';

/** `--port`: 0 (any free port) to 65535. */
export const port = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('--port must be 0 (any free port) to 65535');
  return n;
};

/** A whole number ≥ 1; the error names the option. */
export const positiveInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive whole number`);
  return n;
};

/**
 * `k=v` pairs into params; values that parse as JSON (numbers such as `1e1`, booleans, null,
 * strings in quotes, arrays, objects) are taken as JSON, others as text. A whole number past
 * 2^53 stays text, so it keeps every digit.
 */
export function collectParam(pair: string, params: Record<string, unknown> = {}): Record<string, unknown> {
  const at = pair.indexOf('=');
  if (at <= 0) throw new InvalidArgumentError(`--param takes key=value, got "${pair}"`);
  const key = pair.slice(0, at);
  const raw = pair.slice(at + 1);
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    value = raw;
    // Text that starts like JSON but is not (a bracket left open) is most likely a mistake: say so.
    if (/^\s*[[{"]/.test(raw))
      process.stderr.write(`leasehold: --param ${key}: not valid JSON (${(e as Error).message}); sent as a string\n`);
  }
  // A number JSON cannot carry exactly (an id of 20 digits) stays the text it was.
  if (typeof value === 'number' && !Number.isSafeInteger(value) && /^-?\d+$/.test(raw.trim())) value = raw;
  return { ...params, [key]: value };
}

/** `1 item`, `2 items`: a count with its noun ("1 items" read wrong). */
export const count = (n: number, noun: string) => `${n} ${noun}${n === 1 ? '' : 's'}`;

/**
 * The folder, `from` or the nearest one above it, that holds `path` (relative, e.g.
 * `.leasehold/dev.json`): how a command run in a project's subfolder finds the project's local
 * state. Undefined when none does.
 */
export function nearestHolding(from: string, path: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, path))) return dir;
    if (dirname(dir) === dir) return undefined;
  }
}

/**
 * The API base URL: --api, LEASEHOLD_API_URL, the running `leasehold dev` (its
 * `.leasehold/dev.json`, found by {@link nearestHolding}), or the default.
 */
export function apiUrl(opt?: string): string {
  if (opt) return opt;
  if (process.env.LEASEHOLD_API_URL) return process.env.LEASEHOLD_API_URL;
  const project = nearestHolding(process.cwd(), join('.leasehold', 'dev.json'));
  if (project !== undefined) {
    try {
      const url = JSON.parse(readFileSync(join(project, '.leasehold', 'dev.json'), 'utf8')).apiUrl;
      if (typeof url === 'string') return url;
    } catch {
      // fall through to the default
    }
  }
  return `http://127.0.0.1:${process.env.PORT ?? 3000}`;
}

/** `--tolerate`: `N` (a whole number of failed items) or `P%` (a percent of the items, 0..100). */
export function tolerance(v: string): { count: number } | { percent: number } {
  const percent = /^\s*(\d+(?:\.\d+)?)\s*%\s*$/.exec(v);
  if (percent) {
    const p = Number(percent[1]);
    if (p <= 100) return { percent: p };
  } else if (/^\s*\d+\s*$/.test(v)) {
    return { count: Number(v) };
  }
  throw new InvalidArgumentError('--tolerate takes N (failed items) or P% (0..100% of the items), e.g. 3 or 5%');
}

/** A tenant name given as an option: an empty one made a path the API answered 405 to. */
export const tenantName = (v: string) => {
  if (v.trim() === '') throw new InvalidArgumentError('a tenant name is not empty');
  return v;
};

/** `--tenant` of the commands on one batch: the tenant-scoped routes. */
export const scopeOption = () =>
  new Option(
    '--tenant <tenant>',
    "use the tenant's own routes (/tenants/TENANT/batches/…), as a per-tenant IAM policy requires; another tenant's batch answers 404",
  ).argParser(tenantName);

/** A client on the API, scoped to `tenant` when given. */
export const client = (opts: { api?: string; tenant?: string }) =>
  new ApiClient(apiUrl(opts.api), {
    unreachableHint: 'is `leasehold dev` running?',
    ...(opts.tenant === undefined ? {} : { tenant: opts.tenant }),
  });

/** `--api`: the API base URL, for every command that calls it. */
export const apiOption = new Option(
  '--api <url>',
  'API base URL (default: LEASEHOLD_API_URL, the running `leasehold dev`, or http://127.0.0.1:3000)',
);

/** `--concurrency`: a whole number from 1 to 10,000. */
export const concurrencyArg = (v: string) => {
  const n = Number(v);
  if (!/^\d{1,5}$/.test(v.trim()) || n < 1 || n > 10_000) {
    throw new InvalidArgumentError('--concurrency must be a whole number from 1 to 10000');
  }
  return n;
};

/** `--rate`: items per second, from 0.001 (one every 1,000 s) to 1,000,000 (fractions allowed: 0.5 is one every 2 s). */
export const rateArg = (v: string) => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0.001 || n > 1_000_000) {
    throw new InvalidArgumentError('--rate must be a number of items per second from 0.001 to 1000000');
  }
  return n;
};

/** `--timeout-ms`: a whole number of ms from 1 to 900,000 (the API checks it against the workers' timeout). */
export const timeoutArg = (v: string) => {
  const n = Number(v);
  if (!/^\d{1,6}$/.test(v.trim()) || n < 1 || n > 900_000) {
    throw new InvalidArgumentError('--timeout-ms must be a whole number of ms from 1 to 900000');
  }
  return n;
};

/** `--deadline`: an ISO 8601 instant with its offset (`2026-05-01T12:00:00Z`), sent as given. */
export const deadlineArg = (v: string) => {
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.test(v.trim()) || !Number.isFinite(Date.parse(v))) {
    throw new InvalidArgumentError('--deadline must be an ISO 8601 instant with its offset, e.g. 2026-05-01T12:00:00Z');
  }
  return v.trim();
};

/** `--deadline-ms`: a whole number of ms from 1 to 366 days (31,622,400,000). */
export const deadlineMsArg = (v: string) => {
  const n = Number(v);
  if (!/^\d{1,11}$/.test(v.trim()) || n < 1 || n > 31_622_400_000) {
    throw new InvalidArgumentError('--deadline-ms must be a whole number of ms from 1 to 31622400000 (366 days)');
  }
  return n;
};

/** `--priority`: a whole number from 0 to 9. */
export const priorityArg = (v: string) => {
  const n = Number(v);
  if (!/^\d$/.test(v.trim())) throw new InvalidArgumentError('--priority must be a whole number from 0 to 9');
  return n;
};

/** A whole number ≥ 0; the error names the option. */
export const nonNegativeInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isInteger(n)) throw new InvalidArgumentError(`${name} must be a whole number ≥ 0`);
  return n;
};

/** A repeatable option: its values, in order. */
export const collect = (v: string, all: string[] | undefined) => [...(all ?? []), v];

/** `950 ms`, `12.3 s`, `4 min 5 s`, `2 h 3 min`. */
export function formatAge(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1_000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
}

/** `s3://bucket/rest` into the bucket and the rest ('' when none); undefined when not such a URL. */
function s3Url(v: string): { bucket: string; rest: string } | undefined {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(v.trim());
  return m ? { bucket: m[1], rest: m[2] ?? '' } : undefined;
}

/**
 * `--source`: `s3://BUCKET/PREFIX/` (one item per object; a URL ending in `/`, or the bucket
 * alone), `s3://BUCKET/KEY.jsonl`, `.ndjson`, `.csv` or `.tsv` (a tab-delimited CSV), each also
 * with `.gz` (one item per line or row; gzip is found from the object itself, the name only gives
 * the format), or the API's `source` as JSON (docs/api.md), e.g.
 * `{"s3":{"bucket":"acme-data","key":"k.csv","format":"csv","keyColumn":"id","delimiter":"semicolon"}}`.
 * The API checks the rest.
 */
export function sourceArg(v: string): unknown {
  if (v.trim().startsWith('{')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(v);
    } catch (e) {
      throw new InvalidArgumentError(`--source: not valid JSON (${(e as Error).message})`);
    }
    return parsed;
  }
  const url = s3Url(v);
  if (!url) throw new InvalidArgumentError('--source takes s3://BUCKET/PREFIX/, s3://BUCKET/KEY.jsonl, .csv or .tsv, or JSON');
  if (url.rest === '' || url.rest.endsWith('/')) return { s3: { bucket: url.bucket, prefix: url.rest } };
  const ext = /\.(jsonl|ndjson|csv|tsv)(?:\.gz)?$/i.exec(url.rest)?.[1].toLowerCase();
  if (ext === undefined) {
    throw new InvalidArgumentError(
      `--source ${v}: a key ending in .jsonl, .ndjson, .csv or .tsv, or one of them .gz (or a prefix ending in /); for another, give JSON {"s3":{"bucket","key","format"}}`,
    );
  }
  if (ext === 'jsonl' || ext === 'ndjson') return { s3: { bucket: url.bucket, key: url.rest, format: 'jsonl' } };
  return { s3: { bucket: url.bucket, key: url.rest, format: 'csv', ...(ext === 'tsv' ? { delimiter: 'tab' } : {}) } };
}

/**
 * `--results`: `s3://BUCKET/PREFIX` (the prefix may be empty), where the results are written when
 * the batch ends, under `PREFIX/ID/`: a prefix not ending in `/` gets one (the API writes under
 * `{prefix}{id}`, so `s3://acme-data/out` wrote `out<id>/…`, which no listing of `out/` shows).
 */
export function resultsArg(v: string): { s3: { bucket: string; prefix: string } } {
  const url = s3Url(v);
  if (!url) throw new InvalidArgumentError(`--results takes s3://BUCKET/PREFIX, got "${v}"`);
  const prefix = url.rest === '' || url.rest.endsWith('/') ? url.rest : `${url.rest}/`;
  return { s3: { bucket: url.bucket, prefix } };
}

/** `--notify URL`: the API's `notify: { url }`, an absolute http(s) URL (the API checks the rest). */
export function notifyArg(v: string): { url: string } {
  let url: URL | undefined;
  try {
    url = new URL(v);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new InvalidArgumentError(`--notify takes an absolute http(s) URL, got "${v}"`);
  return { url: v };
}
