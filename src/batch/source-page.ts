// What reading one page of a source answers and how it fails (docs/design.md, "Items in, results
// out, events"): the page, the settings of reading, the error that ends a batch, and the shapes of
// an object source and its cursor, shared by the prefix listing (source-listing.ts), the range
// reader (source-object.ts) and the parsers (source-jsonl.ts, source-csv.ts).
import type { ItemWithJson, PageRows } from './items.js';
import { retrySlowDown, type SlowDownRetry } from './s3.js';
import type { ObjectSourceSpec, SourceCursor } from './types.js';

/**
 * A source that cannot be read into items (a line that is not JSON, a ragged CSV row, an object
 * that changed or disappeared while read): the batch ends `failed` with this `reason`, and
 * `line`, the object's first bad line (1-based), when known.
 */
export class SourceReadError extends Error {
  constructor(
    readonly reason: string,
    readonly line: number | null = null,
  ) {
    super(reason);
  }
}

/**
 * The key of an object source's item numbered `n` (a JSON Lines line, a CSV data row, 1-based):
 * `n` in decimal, zero-padded to as many digits as `size` (the object's bytes) has, so the
 * items of one batch have keys of one width and their key order, the order of its item pages,
 * results and claims, is the object's order (docs/api.md, "source"). No number is wider: a
 * line numbered `n` that holds an item follows `n - 1` line ends and has a byte of its own, and
 * a data row follows its header, so `n <= size`. A 1,091-byte object's keys run `0001`, `0002`, ….
 */
export function numberedKey(n: number, size: number): string {
  return String(n).padStart(String(size).length, '0');
}

/** Settings of reading. */
export interface ReadSettings {
  /** Largest JSON input of one item, bytes (`LEASEHOLD_MAX_INPUT_BYTES`, 65,536). */
  maxInputBytes: number;
  /** Bytes of an object one page reads (default 2 MiB; the first page a sixteenth of it, at least 64 KiB). */
  rangeBytes?: number;
  /** Objects of a prefix one page lists, at least (default 10,000; the first page 1,000). */
  pageObjects?: number;
  /**
   * JSON Lines: give the page's items as the rows a store takes ({@link SourcePage.rows})
   * rather than as `items` (default false). A reader's way: no object per line outlives its line,
   * so a page leaves little for the garbage collector to promote.
   */
  asJson?: boolean;
  /** Aborts the page's S3 calls in flight (a handoff: docs/design.md, "Sources and results"). */
  signal?: AbortSignal;
  /** How the page's S3 calls back off from a 503 SlowDown (defaults: `SLOW_DOWN_DEFAULTS`, s3.ts). */
  slowDown?: Omit<SlowDownRetry, 'signal'>;
  /**
   * Where a reader keeps an object it reads as one stream (gzip, UTF-16) open from one page to
   * the next (default none: each page opens the object again from its byte 0 and skips to the
   * cursor).
   */
  streams?: SourceStreams;
}

/** An object open as one stream: which object and encoding (`id`), and the text offset it stands at. */
export interface OpenStream {
  readonly id: string;
  readonly pos: number;
  /** Close it: its response body is destroyed, so its socket goes back to the client. */
  destroy(): void;
}

/**
 * A reader's open stream between pages: at most one, taken while a page reads it and put back
 * after; one that stands elsewhere than the next page asks (a page read ahead was dropped, the
 * reader claimed again from the stored cursor) is closed and the object opened again.
 */
export class SourceStreams {
  private held: OpenStream | undefined;
  private closed = false;

  /** The held stream of `id` standing at text offset `pos`, taken out; undefined (and any other closed) when none. */
  take<T extends OpenStream>(id: string, pos: number): T | undefined {
    const h = this.held;
    this.held = undefined;
    if (h && h.id === id && h.pos === pos) return h as T;
    h?.destroy();
    return undefined;
  }

  /** Keep `s` for the next page (closing the one held); once closed, `s` is closed at once. */
  put(s: OpenStream): void {
    if (this.closed) return s.destroy();
    if (this.held !== s) this.held?.destroy();
    this.held = s;
  }

  /** Close the held stream; streams put back later are closed at once. */
  close(): void {
    this.closed = true;
    this.held?.destroy();
    this.held = undefined;
  }
}

/**
 * One S3 call of a page: aborted by `settings.signal`, made again while S3 answers SlowDown
 * ({@link retrySlowDown}); any other error is thrown as it is.
 */
export function s3Call<T>(settings: ReadSettings, call: (abortSignal: AbortSignal | undefined) => Promise<T>): Promise<T> {
  return retrySlowDown(call, { ...settings.slowDown, signal: settings.signal });
}

/** One page read from the source. */
export interface SourcePage {
  /** Its items; a JSON Lines item may carry its line as its input's JSON text ({@link INPUT_JSON}) instead of `input`. */
  items: ItemWithJson[];
  cursor: SourceCursor;
  /** The source is read to its end with this page. */
  done: boolean;
  /**
   * With `asJson` (JSON Lines), the items as the rows a store takes (their keys' JSON array and
   * their inputs one a line), checked as a start's items are; `items` is then empty.
   */
  rows?: PageRows;
}

/**
 * An object source as stored at start: its size and ETag pin what every range must match; on a
 * versioned bucket, `versionId` (HeadObject's at start) is the version every range reads, so a
 * rewrite of the object during the batch changes nothing.
 */
export type ObjectSource = ObjectSourceSpec & { size: number; etag: string; versionId?: string };

/** Where an object source's reading stands: the byte, line and row after the last stored page. */
export type ObjectCursor = Extract<SourceCursor, { offset: number }>;

/** The SDK loads on first use, not with the library. */
export const sdk = () => import('@aws-sdk/client-s3');
