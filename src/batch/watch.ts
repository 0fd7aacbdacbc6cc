// Watching a batch's progress (docs/design.md, "Progress stream"; issue 41): one shared poller
// per batch per process, however many listeners it has, reading the batch at most once per
// interval (default 1 s). Listeners get the latest reading at once when they join (no read of
// their own) and every new one after; the poller stops when its last listener leaves or once the
// batch has finished (its last reading is the end).
import type { Sql } from '../store/index.js';
import { systemClock, type Clock } from '../clock.js';
import { getBatch } from './sql/reads.js';
import type { BatchInfo } from './types.js';

/** One reading of a watched batch: the batch (undefined: no such batch) and when it was read (local ms). */
export interface BatchReading {
  batch: BatchInfo | undefined;
  atMs: number;
}

/** Options of {@link BatchWatcher}. */
export interface BatchWatcherOptions {
  /** Least time between two reads of one batch, ms. Default 1,000. */
  intervalMs?: number;
  clock?: Clock;
}

/** The shared poller of one batch. */
class Poller {
  readonly listeners = new Set<(r: BatchReading) => void>();
  last: BatchReading | undefined;
  private readonly stop = new AbortController();

  constructor(
    private readonly w: BatchWatcher,
    readonly id: string,
  ) {}

  start(): void {
    void this.loop();
  }

  end(): void {
    this.stop.abort();
  }

  /** Its last listener left: it reads no more (a new listener starts another). */
  get ended(): boolean {
    return this.stop.signal.aborted;
  }

  private async loop(): Promise<void> {
    const { clock, intervalMs } = this.w.settings;
    while (!this.stop.signal.aborted) {
      const t0 = clock.now();
      let reading: BatchReading | undefined;
      try {
        this.w.reads++;
        reading = { batch: await getBatch(this.w.sql, this.id), atMs: clock.now() };
      } catch {
        // A failed read is tried again next interval; listeners keep the last reading.
      }
      if (reading && !this.stop.signal.aborted) {
        this.last = reading;
        for (const l of [...this.listeners]) l(reading);
        // A finished (or unknown) batch changes no more: the reading was its end.
        if (reading.batch === undefined || reading.batch.status !== 'open') break;
      }
      await clock.sleep(Math.max(0, intervalMs - (clock.now() - t0)), this.stop.signal);
    }
    this.w.drop(this);
  }
}

/**
 * Shared pollers of batches' progress, one per batch (docs/design.md, "Progress stream"). Make
 * one per process and pool.
 */
export class BatchWatcher {
  /** Reads sent so far (every poll of every batch). */
  reads = 0;
  readonly settings: Required<BatchWatcherOptions>;
  private readonly pollers = new Map<string, Poller>();

  constructor(
    readonly sql: Sql,
    options: BatchWatcherOptions = {},
  ) {
    this.settings = { intervalMs: options.intervalMs ?? 1_000, clock: options.clock ?? systemClock };
  }

  /**
   * Call `listener` with every reading of batch `id`: the latest at once (when there is one), then
   * each new one, at most one per interval, until the returned function is called. After a reading
   * of a finished batch (status not `open`) or of no batch (`batch` undefined) none follows.
   */
  watch(id: string, listener: (r: BatchReading) => void): () => void {
    let p = this.pollers.get(id);
    if (p?.ended) p = undefined;
    const fresh = p === undefined;
    if (!p) this.pollers.set(id, (p = new Poller(this, id)));
    p.listeners.add(listener);
    const last = p.last;
    if (last) queueMicrotask(() => p.listeners.has(listener) && listener(last));
    if (fresh) p.start();
    return () => {
      p.listeners.delete(listener);
      if (p.listeners.size === 0) p.end();
    };
  }

  /** Batches watched now. */
  watched(): number {
    return this.pollers.size;
  }

  /** @internal A poller ended: forget it (a new listener starts another). */
  drop(p: Poller): void {
    if (this.pollers.get(p.id) === p) this.pollers.delete(p.id);
  }
}
