// The S3 client batches read sources with and write results with (docs/design.md, "Sources and
// results"). One client per container, from the environment: region, credentials and, locally,
// `AWS_ENDPOINT_URL_S3` (the SDK reads it itself), with path-style addressing then, since a local
// S3-compatible server answers on one host name. `@aws-sdk/client-s3` is loaded on first use,
// never by importing the library (docs/design.md, "Cold starts and code splitting").
import type { S3Client } from '@aws-sdk/client-s3';
import { systemClock, type Clock } from '../clock.js';
import type { S3Counts } from './usage.js';

let shared: Promise<S3Client> | undefined;

/**
 * The container's S3 client, created (and the SDK loaded) on first use: `AWS_REGION` (default
 * `us-east-1`), the SDK's default credentials, and with `AWS_ENDPOINT_URL_S3` set, that endpoint
 * with path-style addressing (`http://127.0.0.1:PORT/bucket/key`).
 */
export function defaultS3Client(): Promise<S3Client> {
  shared ??= import('@aws-sdk/client-s3').then(
    ({ S3Client }) =>
      new S3Client({
        region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
        forcePathStyle: Boolean(process.env.AWS_ENDPOINT_URL_S3),
      }),
  );
  return shared;
}

/** The client `option` gives, else the container's ({@link defaultS3Client}). */
export async function s3Client(option?: () => S3Client): Promise<S3Client> {
  return option ? option() : defaultS3Client();
}

/** What an S3 error says, as the source and results code needs it. */
export interface S3Fault {
  /** HTTP status, when the service answered. */
  status: number | undefined;
  /** The error's name (`NoSuchKey`, `NotFound`, `AccessDenied`, `InvalidAccessKeyId`, …). */
  name: string;
  /** 403: access denied, a refused signature or an unknown access key. */
  denied: boolean;
  /** 404: no such bucket or key. */
  missing: boolean;
  /**
   * 416 `InvalidRange`: a range that starts past the object's end. S3 answers it before any
   * ETag is compared, so for a source object read from a stored offset it means the object was
   * rewritten shorter: it changed, for good.
   */
  badRange: boolean;
}

/** Classify an error thrown by an S3 client call. */
export function s3Fault(e: unknown): S3Fault {
  const err = e as { name?: unknown; $metadata?: { httpStatusCode?: number } } | null;
  const status = err?.$metadata?.httpStatusCode;
  const name = typeof err?.name === 'string' ? err.name : 'Error';
  return {
    status,
    name,
    denied: status === 403 || name === 'AccessDenied' || name === 'InvalidAccessKeyId' || name === 'SignatureDoesNotMatch',
    missing: status === 404 || name === 'NoSuchKey' || name === 'NoSuchBucket' || name === 'NotFound',
    badRange: status === 416 || name === 'InvalidRange',
  };
}

/**
 * S3 asking its caller to slow down: a 503 (`SlowDown`, or a HEAD's bodiless 503). Retried by
 * {@link retrySlowDown} on a budget of its own, apart from the other errors a caller counts.
 */
export function isSlowDown(e: unknown): boolean {
  const f = s3Fault(e);
  return f.name === 'SlowDown' || f.status === 503;
}

/** How {@link retrySlowDown} backs off. */
export interface SlowDownRetry {
  /** Calls made in all, the first included, before a SlowDown is thrown. Default 8. */
  slowDownTries?: number;
  /** The first backoff's ceiling, ms; doubles per retry. Default 100. */
  slowDownBaseMs?: number;
  /** The largest backoff ceiling, ms. Default 5,000. */
  slowDownCapMs?: number;
  /** What the backoff sleeps on (tests drive it). Default the system clock. */
  clock?: Clock;
  /** A number in [0, 1) (tests fix it). Default Math.random. */
  random?: () => number;
  /** Aborts the call and the backoff. */
  signal?: AbortSignal;
}

/** Defaults of {@link SlowDownRetry}. */
export const SLOW_DOWN_DEFAULTS = { slowDownTries: 8, slowDownBaseMs: 100, slowDownCapMs: 5_000 } as const;

/**
 * The backoff before SlowDown retry `retry` (0: the first), ms: full jitter, a uniform draw
 * between 0 and min(cap, base × 2^retry), so clients slowed down together do not come back
 * together (AWS Architecture Blog, "Exponential Backoff And Jitter").
 */
export function slowDownBackoffMs(retry: number, r: SlowDownRetry = {}): number {
  const base = r.slowDownBaseMs ?? SLOW_DOWN_DEFAULTS.slowDownBaseMs;
  const cap = r.slowDownCapMs ?? SLOW_DOWN_DEFAULTS.slowDownCapMs;
  return (r.random ?? Math.random)() * Math.min(cap, base * 2 ** Math.min(retry, 30));
}

/**
 * `call(signal)` (one S3 call), made again after {@link slowDownBackoffMs} while S3 answers
 * SlowDown ({@link isSlowDown}), up to `slowDownTries` calls. Every other error is thrown at
 * once, for the caller's own count of failures (the SDK's own retries happen inside each call).
 * @throws the call's error; the last SlowDown once the tries are spent; the signal's reason.
 */
export async function retrySlowDown<T>(call: (signal: AbortSignal | undefined) => Promise<T>, r: SlowDownRetry = {}): Promise<T> {
  const tries = r.slowDownTries ?? SLOW_DOWN_DEFAULTS.slowDownTries;
  for (let retry = 0; ; retry++) {
    try {
      return await call(r.signal);
    } catch (e) {
      if (!isSlowDown(e) || retry + 1 >= tries || r.signal?.aborted) throw e;
    }
    await (r.clock ?? systemClock).sleep(slowDownBackoffMs(retry, r), r.signal);
    r.signal?.throwIfAborted();
  }
}

/**
 * A key of a listing asked for with `EncodingType=url`, as stored: S3 encodes it as a form
 * value (`%XX`, a space as `+`). A listing that came back without `EncodingType` (a server
 * that ignores it) is taken as it is.
 */
export function listedKey(key: string, encodingType: string | undefined): string {
  return encodingType === 'url' ? decodeURIComponent(key.replace(/\+/g, ' ')) : key;
}

/**
 * Finish a response body that will not be read (a changed ETag, a handoff, an error): destroyed
 * at once, so its socket leaves the client's pool of sockets in use instead of waiting, full,
 * for a read that never comes.
 */
export function discardBody(body: unknown): void {
  const b = body as { destroy?: (e?: Error) => void; destroyed?: boolean } | null | undefined;
  if (b && typeof b.destroy === 'function' && !b.destroyed) b.destroy();
}

// S3's price classes by operation name; DELETE and aborts are free (not counted).
const PUT_CLASS = new Set(['PutObject', 'UploadPart', 'CreateMultipartUpload', 'CompleteMultipartUpload', 'CopyObject']);
const FREE = new Set(['DeleteObject', 'DeleteObjects', 'AbortMultipartUpload']);

/**
 * A command's S3 operation name (`GetObject`): from its schema (`[kind, namespace, name, …]`),
 * which survives a minifying bundler, else its class name less `Command`.
 */
function operationOf(command: unknown): string {
  const schema = (command as { schema?: unknown }).schema;
  if (Array.isArray(schema) && typeof schema[2] === 'string') return schema[2];
  const name = (command as { constructor?: { name?: string } }).constructor?.name ?? '';
  return name.replace(/Command$/, '');
}

/**
 * `client` with every `send` counted into `counts` by S3's price class: `List*` as list, the
 * PUT-class writes as put, the free deletes and aborts not at all, every other request (GET,
 * HEAD) as get. A request the SDK retries by itself counts once.
 */
export function countingS3(client: S3Client, counts: S3Counts): S3Client {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'send') {
        return (command: unknown, ...rest: unknown[]) => {
          const op = operationOf(command);
          if (op.startsWith('List')) counts.list++;
          else if (PUT_CLASS.has(op)) counts.put++;
          else if (!FREE.has(op)) counts.get++;
          return (target.send as (...a: unknown[]) => unknown).call(target, command, ...rest);
        };
      }
      const v: unknown = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
