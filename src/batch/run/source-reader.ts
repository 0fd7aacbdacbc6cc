// The source reader of a run (docs/design.md, "The run, inside"; "Sources and results"): while
// the batch's source is read, it reads pages from S3 and stores each with its cursor in one
// statement fenced on the run's lease and on its being the batch's reader.
import { waitState } from '../sql/ends.js';
import * as qs from '../sql/sources.js';
import { pageRows, type PageRows } from '../items.js';
import { errorText } from '../values.js';
import { readPage } from '../lazy-io.js';
import { SourceReadError, SourceStreams, type SourcePage } from '../source-page.js';
import type { SourceCursor, StoredSource } from '../types.js';
import type { RunContext } from './context.js';

/** Tries of one page of a source that S3 failed to serve (a timeout, a 5xx) before the run hands off. */
const READ_TRIES = 4;

/** A page of the source as read, with its items as the rows a store takes; or why it could not be read. */
type PageRead = { page: SourcePage; rows: PageRows } | { error: unknown };

/** A page being read, and what aborts its S3 calls. */
interface Reading {
  read: Promise<PageRead>;
  abort: AbortController;
}

/** What the source reader asks of the run's other collaborators. */
export interface SourceReaderDeps {
  /** A page was stored: its items may be claimed (producer). */
  mayBeDue(): void;
  /** The last page was stored: the total is final, the failures are judged (lifecycle). */
  judgeLater(): void;
  /** Reading cannot go on here: the run hands off, so another run reads on. */
  stop(): void;
}

/** Reads one batch's source for one run. */
export class SourceReader {
  /** This run ended the batch `failed` because its source could not be read. */
  failed = false;
  /** The pages being read now (at most two: the current one and the one read ahead). */
  private readonly reading = new Set<AbortController>();
  /** An object read as one stream (gzip, UTF-16), kept open from one page to the next while this run reads. */
  private readonly streams = new SourceStreams();

  constructor(
    private readonly ctx: RunContext,
    private readonly d: SourceReaderDeps,
  ) {}

  /**
   * Reading the batch's source (docs/design.md, "Sources and results"): while the batch reads,
   * the run tries to become its reader (one run at a time: another reads once the reader's row is
   * gone), then reads a page from the stored cursor and stores its items with the new cursor in
   * one statement fenced on its lease, its being the reader and the page count it read from; so
   * a takeover goes on after the last stored page and no page is stored twice. While a page is
   * stored, the next is read from that page's cursor (read ahead: S3 and parsing overlap the
   * insert); it is kept only when the store succeeded, else the run claims the reader again and
   * reads from the stored cursor. Each stored page wakes the run's claims. A source that cannot
   * be read ends the batch `failed` with the reason; S3 failing to answer `READ_TRIES` times in
   * a row, or the store failing, hands the run off, so another run reads on.
   */
  async readLoop(signal: AbortSignal): Promise<void> {
    const stop = () => this.abortReads();
    signal.addEventListener('abort', stop, { once: true });
    try {
      await this.readPages(signal);
    } finally {
      signal.removeEventListener('abort', stop);
      // A page read ahead that will not be stored, or a read cut short: its GET ends now; an
      // object read as one stream is closed, its response body destroyed.
      this.abortReads();
      this.streams.close();
    }
  }

  /**
   * Abort every page being read (a handoff, the run's end): its S3 calls end at once and any
   * response body not yet read is destroyed, so no socket stays in use for a page never stored.
   */
  abortReads(): void {
    for (const c of this.reading) c.abort();
    this.reading.clear();
  }

  private async readPages(signal: AbortSignal): Promise<void> {
    const ctx = this.ctx;
    const s = ctx.s;
    let failures = 0;
    let wait = s.moveBackoffMs;
    // The stored state this run reads on from while it stays the reader (undefined: claim it
    // again), and the page after it, read ahead while the last one was stored.
    let state: qs.ReaderState | undefined;
    let ahead: Reading | undefined;
    while (!signal.aborted && !ctx.reason && !ctx.ended) {
      try {
        if (!state) {
          ahead?.abort.abort();
          ahead = undefined;
          state = await ctx.store(() => qs.claimReader(ctx.sql, ctx.batch.id, ctx.id));
          if (!state) {
            // Another live run reads (or reading is over, or the lease is gone): look again later.
            const w = await ctx.store(() => waitState(ctx.sql, ctx.batch.id, ctx.id));
            if (!w.reading || !w.owned) return;
            await s.clock.sleep(s.beatMs, signal);
            continue;
          }
        }
        const read = await (ahead ?? this.startRead(state.source, state.cursor)).read;
        ahead = undefined;
        if ('error' in read) {
          // Stopped while it read: the read was aborted, and its error is no failure of S3.
          if (signal.aborted || ctx.reason || ctx.ended) return;
          const e = read.error;
          if (e instanceof SourceReadError) return await this.failSource(e.reason, e.line);
          ctx.storeError(e, ++failures);
          if (failures >= READ_TRIES) return this.readFailed(`its source could not be read: ${errorText(e)}`);
          await s.clock.sleep(wait, signal);
          wait = Math.min(wait * 2, 10_000);
          continue;
        }
        const { page, rows } = read;
        const count = rows.count;
        failures = 0;
        wait = s.moveBackoffMs;
        const total = state.total + count;
        if (total > s.maxSourceItems) {
          return await this.failSource(
            `item count: the source holds more than ${s.maxSourceItems} items; the limit is ${s.maxSourceItems} (LEASEHOLD_MAX_SOURCE_ITEMS)`,
            null,
          );
        }
        if (page.done && total === 0) return await this.failSource('the source holds no items', null);
        // The next page, read (and made into JSON) while this one is stored.
        if (!page.done) ahead = this.startRead(state.source, page.cursor);
        const stored = await this.storePage(state.pages, page, rows);
        if (typeof stored === 'string') return await this.failSource(`two items of the source have the key ${stored}`, null);
        if (!stored) {
          // No longer the reader of this state (or the lease is gone): claim it again.
          state = undefined;
          continue;
        }
        state = { source: state.source, cursor: page.cursor, pages: state.pages + 1, total };
        this.d.mayBeDue();
        ctx.wake();
        if (page.done) {
          // The total is final: the flusher judges the failures stored while reading against a
          // percent now (one statement at a time stays the flusher's).
          this.d.judgeLater();
          ctx.wake();
          return;
        }
      } catch (e) {
        // The store kept failing: hand off, so another run reads on from the stored cursor.
        ctx.storeError(e, s.moveTries);
        return this.readFailed(`its source's pages could not be stored: ${errorText(e)}`);
      }
    }
  }

  /**
   * Store a page read after `pages` stored ones, with its cursor: whether it was stored, or the
   * key a page repeated. A key read twice is the source's fault (a CSV key column with a
   * repeated value), not the store's: it is answered, not retried.
   */
  private async storePage(pages: number, page: SourcePage, rows: PageRows): Promise<boolean | string> {
    const ctx = this.ctx;
    const r = await ctx.store(() =>
      qs
        .storePage(ctx.sql, {
          batchId: ctx.batch.id,
          run: ctx.id,
          pages,
          cursor: page.cursor,
          keys: rows.keys,
          inputs: rows.inputs,
          count: rows.count,
          done: page.done,
        })
        .catch((e: unknown) => {
          const dup = duplicateKey(e);
          if (dup === undefined) throw e;
          return dup;
        }),
    );
    if (typeof r === 'string') return r;
    // The page raised the target past the runs live or on their way: the worker sends them now.
    if (r.stored && r.wanted > 0) ctx.s.onEvent({ type: 'batch-wants-runs', batchId: ctx.batch.id, runs: r.wanted });
    return r.stored;
  }

  /** Begin reading the page at `cursor`, abortable on its own ({@link abortReads} aborts it too). */
  private startRead(source: unknown, cursor: unknown): Reading {
    const abort = new AbortController();
    this.reading.add(abort);
    const read = this.readSourcePage(source, cursor, abort.signal).finally(() => this.reading.delete(abort));
    return { read, abort };
  }

  /**
   * Read one page of the source from `cursor` and make its items the rows a store takes
   * (checked as a start's items are: an item the store would refuse is a {@link SourceReadError};
   * JSON Lines come as those rows already);
   * a failure is answered, never thrown.
   */
  private async readSourcePage(source: unknown, cursor: unknown, signal: AbortSignal): Promise<PageRead> {
    const s = this.ctx.s;
    try {
      const read = async () =>
        readPage(await this.ctx.s3(), source as StoredSource, cursor as SourceCursor | null, {
          maxInputBytes: s.maxInputBytes,
          rangeBytes: s.sourceRangeBytes,
          pageObjects: s.sourcePageObjects,
          asJson: true,
          signal,
          slowDown: { clock: s.clock },
          streams: this.streams,
        });
      // A span per page read when tracing (docs/design.md, "Traces").
      const t = this.ctx.trace;
      const page = await (t ? t.sourcePage(source as StoredSource, read) : read());
      if (page.rows) return { page, rows: page.rows };
      let rows;
      try {
        rows = pageRows(page.items, s.maxInputBytes);
      } catch (e) {
        throw new SourceReadError((e as Error).message);
      }
      // Only the rows and the cursor are kept while the page waits for its store: the items
      // they were made from go now.
      return { page: { items: [], cursor: page.cursor, done: page.done }, rows };
    } catch (error) {
      return { error };
    }
  }

  /**
   * Reading could not go on here (`why`): the run hands off (its row goes, so another run reads
   * on), and that handoff counts as a stalled run, so a reader failing run after run gets the
   * batch given up (docs/design.md, "Stalled-run give-up") rather than handed around for ever.
   */
  private readFailed(why: string): void {
    if (this.ctx.reason) return;
    this.ctx.stalledBy = why;
    this.d.stop();
  }

  /** End the batch `failed`: its source cannot be read into items (`reason`, the first bad line). */
  private async failSource(reason: string, line: number | null): Promise<void> {
    const ctx = this.ctx;
    this.failed = await ctx.store(() => qs.failSource(ctx.sql, { batchId: ctx.batch.id, run: ctx.id, reason, line }));
    // The batch is over (or another end came first): this run's lease is gone either way.
    ctx.markLost();
  }
}

/** The key of a unique violation of the items' primary key (two items with one key), else undefined. */
function duplicateKey(e: unknown): string | undefined {
  const err = e as { code?: unknown; constraint_name?: unknown; detail?: unknown; cause?: unknown } | null;
  const inner = (err?.code === undefined ? (err?.cause as typeof err) : err) ?? null;
  if (inner?.code !== '23505' || inner.constraint_name !== 'leasehold_items_pkey') return undefined;
  const m =
    typeof inner.detail === 'string'
      ? /^Key \(batch_id, key\)=\([0-9a-f-]{36}, (.*)\) already exists\.$/s.exec(inner.detail)
      : null;
  return m ? JSON.stringify(m[1]) : '(unknown)';
}
