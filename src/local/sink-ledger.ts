// What the local webhook sink remembers (docs/design.md, "Local mode"): counts and idempotency
// keys per path, the recent deliveries, the accepted rate, and which paths fail or answer late.
// The HTTP side is src/local/sink.ts.
import { InvalidSettingError } from '../errors.js';

/** One POST the sink received. */
export interface SinkDelivery {
  /** Request path, without the query string (e.g. `/acme/orders`). */
  path: string;
  /** The `Idempotency-Key` header, or undefined when absent. */
  idempotencyKey: string | undefined;
  /** The body parsed as JSON, or the raw text when it is not JSON. */
  body: unknown;
  /** Status the sink answered: 200 accepted, else the failure status. */
  status: number;
  /** Receive time, ms since the epoch (application clock; only for display). */
  at: number;
}

/** Counts of one path. */
export interface SinkPathStats {
  /** POSTs received. */
  received: number;
  /** POSTs answered 200. */
  accepted: number;
  /** POSTs answered with a failure status. */
  failed: number;
  /** Distinct idempotency keys among accepted POSTs. */
  distinctKeys: number;
  /** Whether the path is set to fail now. */
  failing: boolean;
  /** Extra delay before answering, ms (0: none). */
  delayMs: number;
}

/** What `GET /_stats` and {@link Sink.stats} answer. */
export interface SinkStats {
  /** POSTs received on every path. */
  received: number;
  /** POSTs answered 200. */
  accepted: number;
  /** POSTs answered with a failure status. */
  failed: number;
  /** Distinct idempotency keys among accepted POSTs, over every path. */
  distinctKeys: number;
  /** Accepted POSTs per second over the last {@link SINK_RATE_WINDOW_MS} ms. */
  perSecond: number;
  /** Per path. */
  paths: Record<string, SinkPathStats>;
}

/** Window of {@link SinkStats.perSecond}, ms. */
export const SINK_RATE_WINDOW_MS = 5_000;

interface PathState {
  received: number;
  accepted: number;
  failed: number;
  keys: Set<string>;
}

/** The sink's state: what it received, and how it is told to answer. */
export class SinkLedger {
  private paths = new Map<string, PathState>();
  private deliveries: SinkDelivery[] = [];
  // Accepted deliveries per whole second, for the rate over the window.
  private buckets = new Map<number, number>();
  private readonly failing: Set<string>;
  private readonly delays = new Map<string, number>();

  /**
   * @param keepRecent most recent deliveries kept for {@link SinkLedger.recent}.
   * @param failing paths that fail from the start.
   */
  constructor(
    private readonly keepRecent: number,
    failing: string[],
  ) {
    this.failing = new Set(failing.map(normalPath));
  }

  /** Count one delivery (accepted when its status is 200) and keep it among the recent ones. */
  record(d: SinkDelivery): void {
    const s = this.state(d.path);
    s.received++;
    if (d.status === 200) {
      s.accepted++;
      if (d.idempotencyKey !== undefined) s.keys.add(d.idempotencyKey);
      const sec = Math.floor(d.at / 1000);
      this.buckets.set(sec, (this.buckets.get(sec) ?? 0) + 1);
      for (const k of this.buckets.keys()) if (k < sec - 60) this.buckets.delete(k);
    } else s.failed++;
    this.deliveries.push(d);
    if (this.deliveries.length > this.keepRecent)
      this.deliveries = this.deliveries.slice(this.deliveries.length - this.keepRecent);
  }

  /** Counts, per path and in total, and the accepted rate over {@link SINK_RATE_WINDOW_MS}. */
  stats(): SinkStats {
    const now = Date.now();
    let received = 0;
    let accepted = 0;
    let failed = 0;
    const all = new Set<string>();
    const byPath: Record<string, SinkPathStats> = {};
    for (const [path, s] of this.paths) {
      received += s.received;
      accepted += s.accepted;
      failed += s.failed;
      for (const k of s.keys) all.add(k);
      byPath[path] = {
        received: s.received,
        accepted: s.accepted,
        failed: s.failed,
        distinctKeys: s.keys.size,
        ...this.mode(path),
      };
    }
    for (const path of new Set([...this.failing, ...this.delays.keys()])) {
      byPath[path] ??= { received: 0, accepted: 0, failed: 0, distinctKeys: 0, ...this.mode(path) };
    }
    return { received, accepted, failed, distinctKeys: all.size, perSecond: this.perSecond(now), paths: byPath };
  }

  /** Distinct idempotency keys of accepted deliveries, of one path or of all. */
  keys(path?: string): Set<string> {
    if (path !== undefined) return new Set(this.paths.get(normalPath(path))?.keys ?? []);
    const all = new Set<string>();
    for (const s of this.paths.values()) for (const k of s.keys) all.add(k);
    return all;
  }

  /** The most recent deliveries, oldest first. */
  recent(): SinkDelivery[] {
    return [...this.deliveries];
  }

  /** Make `path` fail (`true`), accept again (`false`), or toggle (omitted); returns the new state. */
  fail(path: string, on?: boolean): boolean {
    const p = normalPath(path);
    const next = on ?? !this.failing.has(p);
    if (next) this.failing.add(p);
    else this.failing.delete(p);
    return next;
  }

  /**
   * Delay answers on `path` by `ms` (0: none).
   * @throws {InvalidSettingError} `ms` is negative or not finite.
   */
  delay(path: string, ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) throw new InvalidSettingError('delay', `must be 0 or more ms, got ${ms}`);
    if (ms === 0) this.delays.delete(normalPath(path));
    else this.delays.set(normalPath(path), ms);
  }

  /** Whether deliveries to the (normalised) `path` fail now. */
  isFailing(path: string): boolean {
    return this.failing.has(path);
  }

  /** The delay of the (normalised) `path`, ms; undefined when none. */
  delayOf(path: string): number | undefined {
    return this.delays.get(path);
  }

  /** Forget every count, key and delivery (failing paths and delays stay). */
  reset(): void {
    this.paths = new Map();
    this.deliveries = [];
    this.buckets = new Map();
  }

  private state(path: string): PathState {
    let s = this.paths.get(path);
    if (!s) this.paths.set(path, (s = { received: 0, accepted: 0, failed: 0, keys: new Set() }));
    return s;
  }

  private mode(path: string): { failing: boolean; delayMs: number } {
    return { failing: this.failing.has(path), delayMs: this.delays.get(path) ?? 0 };
  }

  /** Whole seconds within the window, the current (partial) one counted by its elapsed part. */
  private perSecond(now: number): number {
    const windowS = SINK_RATE_WINDOW_MS / 1000;
    const nowS = Math.floor(now / 1000);
    let inWindow = 0;
    for (const [sec, n] of this.buckets) if (sec > nowS - windowS) inWindow += n;
    const span = windowS - 1 + (now % 1000) / 1000;
    return Math.round((inWindow / Math.max(span, 1)) * 10) / 10;
  }
}

/** `/a/b` from `a/b`, `/a/b/` or `/a//b`. */
export function normalPath(path: string): string {
  const parts = path.split('/').filter((p) => p !== '');
  return '/' + parts.join('/');
}
