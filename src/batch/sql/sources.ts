// Statements of reading a batch's source (leasehold_batches.source…, leasehold_items): who
// reads, each page with its cursor, a source that cannot be read (docs/design.md, "Sources and
// results"). Every statement is fenced on the reading run's own lease: its row in
// leasehold_runs, locked key share before the batch row, as every run statement locks them
// (sql/index.ts), so an end of the batch (which deletes the run rows first) is ordered with it.
import type { Sql } from '../../store/index.js';
import { storableText } from '../values.js';
import { RUN_ITEMS } from './shared.js';
import { writeEndEvent } from './event-writes.js';
import { endInTransaction, noLateRuns } from './ends.js';

/** What a run that became (or stays) the reader of its batch's source knows of it. */
export interface ReaderState {
  /** The source as stored (see `StoredSource`). */
  source: unknown;
  /** Where reading goes on; null before the first page. */
  cursor: unknown;
  /** Pages stored so far: the compare-and-set of the next page. */
  pages: number;
  /** Items stored so far. */
  total: number;
}

// Makes run `run` the reader of its open, still reading batch when no live run reads it (the
// reader's row is gone, or none was ever named) or it reads it already; answers the cursor to
// go on from. Changes nothing (answers undefined) when another live run reads, the batch no
// longer reads, or the run lost its lease.
export async function claimReader(sql: Sql, batchId: string, run: string): Promise<ReaderState | undefined> {
  const [r] = await sql<{ source: unknown; source_cursor: unknown; source_pages: number; total: number }[]>`with own as (
      select id from leasehold_runs where id = ${run} for key share
    )
    update leasehold_batches b set reader_run = ${run}
    where b.id = ${batchId} and b.status = 'open' and b.reading and exists (select 1 from own)
      and (b.reader_run is null or b.reader_run = ${run}
           or not exists (select 1 from leasehold_runs r where r.id = b.reader_run))
    returning b.source, b.source_cursor, b.source_pages, b.total`;
  return r && { source: r.source, cursor: r.source_cursor, pages: r.source_pages, total: r.total };
}

/**
 * What {@link storePage} takes: the page's items as `keys`, the JSON text of the array of their
 * keys, and `inputs`, their inputs' JSON texts one a line, in the keys' order (`PageRows`, items.ts).
 */
export interface PageArgs {
  batchId: string;
  run: string;
  /** `source_pages` as the reader read it: the page is stored only while it still is. */
  pages: number;
  cursor: unknown;
  keys: string;
  inputs: string;
  count: number;
  /** The source is read to its end with this page: the batch's total is fixed. */
  done: boolean;
}

// Stores one page: its items are inserted and the cursor, page count, total and target move on,
// in one statement, only while `run` holds its lease, is the batch's reader, and the batch has
// stored exactly `pages` pages (so a page is never stored twice, whoever read it). The target
// grows with the items read: min(max_concurrency, ceil(total / RUN_ITEMS)); the reason a reader
// that kept failing left on the open batch (handOffRun's `stalledBy`) is cleared, since reading
// goes on. Answers whether it stored the page, and how many more runs the batch wants than are
// live or on their way (its target less its live runs and its workers invoked and not yet
// started: `leasehold_invocations` within their window), so the reader's process can send them
// at once rather than leave them to the scheduler's next pass. A key already in the batch fails the statement (primary key). The keys and
// the inputs are zipped (rows from): each input line is made jsonb alone, SQL null for a JSON
// null, as a start's items are (starts.ts, itemRows); one JSON array of whole items lexed the
// text three times, and cost a third more (20,000 rows of 100 bytes: 800 against 560-620 ms,
// PostgreSQL 15 under load). An input line more than keys leaves a null key, which fails the
// statement: the two never pair up wrongly.
export async function storePage(sql: Sql, a: PageArgs): Promise<{ stored: boolean; wanted: number }> {
  const [r] = await sql<{ stored: number; wanted: number | null }[]>`with own as (
      select id from leasehold_runs where id = ${a.run} for key share
    ), page as (
      update leasehold_batches b
      set source_cursor = ${sql.json(a.cursor as never)}, source_pages = b.source_pages + 1,
          total = b.total + ${a.count}, reading = not ${a.done}, reason = null,
          -- A paused batch keeps target 0 (migration 030) while its pages are stored.
          target = case when b.paused_at is not null then 0
            else least(b.max_concurrency, greatest(1, ceil((b.total + ${a.count}) / ${RUN_ITEMS}::float8)::int)) end
      where b.id = ${a.batchId} and b.status = 'open' and b.reading and b.reader_run = ${a.run}
        and b.source_pages = ${a.pages} and exists (select 1 from own)
      returning b.id, b.target - b.live_runs - (select count(*) from leasehold_invocations v
        where v.batch_id = b.id and v.confirm_by > now())::int as wanted
    ), ins as (
      insert into leasehold_items (batch_id, key, input)
      select ${a.batchId}, x.k, nullif(x.i::jsonb, 'null')
      from rows from (json_array_elements_text(${a.keys}::text::json), string_to_table(${a.inputs}::text, E'\n')) as x(k, i)
      where exists (select 1 from page)
      returning 1
    )
    select (select count(*) from page)::int as stored, (select count(*) from ins)::int as inserted,
      (select wanted from page) as wanted`;
  return { stored: r.stored === 1, wanted: Math.max(0, r.wanted ?? 0) };
}

// Ends a batch whose source cannot be read: `failed` with `reason` and the first bad line, its
// items still pending or running `failed` with the reason (the batch's items are not what was
// asked for). Every run row of the batch is deleted first, then the batch row is updated, as
// every end does (sql/ends.ts), and its Batch Finished event is written last, in the same
// transaction (sql/events.ts); fenced on `run` holding its lease. Answers whether it ended it.
export async function failSource(
  sql: Sql,
  a: { batchId: string; run: string; reason: string; line: number | null },
): Promise<boolean> {
  // The reason may quote the object's own bytes (a parse error of a binary object holds NUL,
  // which PostgreSQL text refuses): refused, the end itself failed, the run handed off and the
  // next read the same range again for ever (docs/design.md, "Sources and results").
  const reason = storableText(a.reason);
  return endInTransaction(sql, async (t, lastTry) => {
    const [r] = await t<{ ended: number }[]>`with gone as (
        delete from leasehold_runs
        where batch_id = ${a.batchId} and exists (select 1 from leasehold_runs where id = ${a.run})
        returning id
      ), ended as (
        update leasehold_batches
        set status = 'failed', reason = ${reason}, source_error_line = ${a.line}, reading = false, source_failed = true,
            finished_at = now(), live_runs = 0
        where id = ${a.batchId} and status = 'open' and ${a.run}::uuid in (select id from gone)
        returning id
      ), failed as (
        update leasehold_items i set state = 'failed', error = ${storableText('the source could not be read: ' + a.reason)},
          updated_at = now()
        where i.batch_id = ${a.batchId} and i.state in ('pending', 'running', 'waiting') and exists (select 1 from ended)
        returning 1
      )
      select (select count(*) from ended)::int as ended`;
    // Runs that joined while the end ran: tried again, their rows first (sql/ends.ts, noLateRuns).
    if (r.ended === 1) {
      await noLateRuns(t, a.batchId, lastTry);
      await writeEndEvent(t, a.batchId);
    }
    return r.ended === 1;
  }) as Promise<boolean>;
}
