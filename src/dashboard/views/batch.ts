// One batch: its counts, its usage and estimated cost, items by state with paging, failed items with their errors and
// attempts, pause and resume, redrive and cancel, a chart of items finished over time, and its pool (linked to its view).
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ITEM_STATES, type Batch, type Item, type ItemState } from '../api.js';
import { CountsLegend, ErrorNote, ProgressBar, StatusBadge, Time, WaitNote, message, usePoll } from '../components.js';
import { brief, duration, rate, shortId, usageText } from '../format.js';
import { CancelButton, PauseButton, shownStatus } from './batches.js';
import { FinishedChart } from './chart.js';
import { poolHref } from './pools.js';

const PAGE = 20;

/**
 * The batch from its progress stream (docs/api.md, "Progress stream") while the API serves one:
 * `live` while it streams, `data` its latest reading (kept once the stream ended).
 */
function useBatchStream(id: string): { data?: Batch; live: boolean } {
  const [state, setState] = useState<{ data?: Batch; live: boolean }>({ live: false });
  useEffect(() => {
    let alive = true;
    const stop = new AbortController();
    void (async () => {
      const events = await api.batchEvents(id, stop.signal);
      if (!events) return;
      for await (const data of events) {
        if (!alive) return;
        setState({ data, live: true });
      }
      if (alive) setState((s) => ({ data: s.data, live: false }));
    })();
    return () => {
      alive = false;
      stop.abort();
    };
  }, [id]);
  return state;
}

export function BatchView({ id }: { id: string }) {
  const stream = useBatchStream(id);
  const live = useRef(false);
  live.current = stream.live;
  // Polled only while no stream is live (an API that serves none, a stream that broke).
  const batch = usePoll(
    () => api.getBatch(id),
    [id],
    () => live.current,
  );
  const series = usePoll(() => api.finished(id, 60), [id]);
  // Once the stream ended (the batch finished, or it broke), the batch is read again at once.
  const reloadBatch = batch.reload;
  useEffect(() => {
    if (!stream.live && stream.data) reloadBatch();
  }, [stream.live, reloadBatch]);
  const b = stream.live ? stream.data : (batch.data ?? stream.data);
  const reload = () => {
    batch.reload();
    series.reload();
  };
  return html`<section aria-labelledby="batch-title" data-live=${stream.live ? 'stream' : 'poll'}>
    <p><a href="#/batches">← All batches</a></p>
    <h2 id="batch-title">Batch <code>${id}</code></h2>
    <${ErrorNote} error=${batch.error} />
    ${
      b === undefined
        ? batch.error
          ? // Nothing to wait for: the error says why (404: no such batch, or retention deleted it).
            html`<p data-no-batch><a href="#/batches">See the batches</a>.</p>`
          : html`<p>Loading…</p>`
        : html`
          <dl class="facts">
            <div><dt>Status</dt><dd><${StatusBadge} status=${shownStatus(b)} /></dd></div>
            <div><dt>Job</dt><dd>${b.job}</dd></div>
            <div><dt>Tenant / datasource</dt><dd>${b.tenant} / ${b.datasource}</dd></div>
            <div><dt>Items/s</dt><dd>${rate(b.itemsPerSecond)}</dd></div>
            <div><dt>Age</dt><dd>${b.ageMs === undefined ? '–' : duration(b.ageMs)}</dd></div>
            <div>
              <dt>Runs</dt>
              <dd data-runs>
                ${
                  b.liveRuns === undefined
                    ? b.runs
                    : b.status !== 'open'
                      ? `none (finished) · ${b.runs} in all`
                      : b.paused
                        ? `${b.liveRuns.length} live, paused: none wanted (max ${b.maxConcurrency ?? '?'}) · ${b.runs} in all`
                        : `${b.liveRuns.length} live of ${b.target ?? '?'} wanted (max ${b.maxConcurrency ?? '?'}) · ${b.runs} in all`
                }
              </dd>
            </div>
            <div><dt>Redrives</dt><dd>${b.redrives ?? 0}</dd></div>
            <div><dt>Created</dt><dd><${Time} at=${b.createdAt} /></dd></div>
            <div><dt>Finished</dt><dd><${Time} at=${b.finishedAt} /></dd></div>
            ${
              b.toleratedFailures !== undefined
                ? html`<div><dt>Tolerated failures</dt><dd data-tolerance>${toleranceText(b)}</dd></div>`
                : null
            }
            ${b.pool ? html`<div><dt>Pool</dt><dd data-pool><a href=${poolHref(b.pool)}>${b.pool}</a></dd></div>` : null}
            ${
              b.completion
                ? html`<div><dt>Completion</dt><dd data-completion>once ${b.completion.minSucceeded} succeeded</dd></div>`
                : null
            }
            ${b.deadline ? html`<div><dt>Deadline</dt><dd data-deadline><${Time} at=${b.deadline} /></dd></div>` : null}
            ${b.reason ? html`<div class="wide"><dt>Reason</dt><dd data-reason>${b.reason}</dd></div>` : null}
            ${b.usage ? html`<div class="wide"><dt>Usage</dt><dd data-usage>${usageText(b.usage)}</dd></div>` : null}
            ${b.reading ? html`<div class="wide"><dt>Source</dt><dd data-reading>reading… ${b.total} items so far</dd></div>` : null}
            ${
              b.resultsManifest
                ? html`<div class="wide">
                  <dt>Results</dt>
                  <dd data-results><a href=${s3Console(b.resultsManifest)} target="_blank" rel="noopener">${b.resultsManifest}</a></dd>
                </div>`
                : null
            }
          </dl>
          <${ProgressBar} batch=${b} />
          <${CountsLegend} batch=${b} />
          <${Runs} batch=${b} />
          <div class="actions">
            <${RedriveButton} batch=${b} onDone=${reload} />
            ${b.status === 'open' ? html`<${PauseButton} batch=${b} onDone=${reload} />` : null}
            ${b.status === 'open' ? html`<${CancelButton} batch=${b} onDone=${reload} />` : null}
          </div>
          <h3>Items finished over time</h3>
          <${ErrorNote} error=${series.error} />
          ${series.data ? html`<${FinishedChart} series=${series.data} />` : series.error ? null : html`<p>Loading…</p>`}
          <${Items} batch=${b} />
        `
    }
  </section>`;
}

/** The batch's live runs: each run's process, speed and last beat (docs/design.md, "Fan-out"). */
function Runs({ batch }: { batch: Batch }) {
  const runs = batch.liveRuns ?? [];
  if (runs.length === 0) return null;
  return html`<h3>Runs</h3>
    <table class="runs" data-run-list>
      <thead>
        <tr><th>Run</th><th>Process</th><th>Items/s</th><th>Settled</th><th>Last beat</th></tr>
      </thead>
      <tbody>
        ${runs.map(
          (r) =>
            html`<tr key=${r.id}>
              <td><code>${shortId(r.id)}</code></td>
              <td><code>${shortId(r.process)}</code></td>
              <td>${rate(r.itemsPerSecond)}</td>
              <td>${r.settled}</td>
              <td><${Time} at=${r.beatAt} /></td>
            </tr>`,
        )}
      </tbody>
    </table>`;
}

/**
 * What a batch tolerates: `2 failed items`, `5 % of the items (2 of 40)`, or none (any failed
 * item fails the batch once all items ran); with how many it has now when some failed.
 */
export function toleranceText(b: Batch): string {
  const t = b.toleratedFailures;
  const now = b.counts.failed > 0 && t ? ` · ${b.counts.failed} failed` : '';
  if (!t) return 'none: any failed item fails the batch';
  if ('count' in t) return `${t.count} failed item${t.count === 1 ? '' : 's'}${now}`;
  return `${t.percent} % of the items (${b.allowedFailures ?? '?'} of ${b.total})${now}`;
}

/**
 * Redrive a finished batch's failed items. The Idempotency-Key names the redrive this press
 * asks for (the batch's next), so a double press or a retry redrives once.
 */
function RedriveButton({ batch, onDone }: { batch: Batch; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [note, setNote] = useState<{ ok: boolean; text: string }>();
  // A failed batch's unrun items (the API's notRun: its deadline, or its failures, ended it first) run with a redrive too.
  const unrun = batch.status === 'failed' ? (batch.notRun ?? 0) : 0;
  const can = (batch.status === 'succeeded' || batch.status === 'failed') && (batch.counts.failed > 0 || unrun > 0);
  const redrive = async () => {
    setBusy(true);
    setNote(undefined);
    try {
      const r = await api.redriveBatch(batch.id, `dashboard:${batch.id}:${(batch.redrives ?? 0) + 1}`);
      setNote({
        ok: true,
        text:
          `Redrive ${r.redrive.number}: ${r.redrive.items} failed item${r.redrive.items === 1 ? '' : 's'} pending again` +
          (unrun > 0 ? `, ${unrun} unrun item${unrun === 1 ? '' : 's'} to run.` : '.'),
      });
      onDone();
    } catch (e) {
      setNote({ ok: false, text: message(e) });
    } finally {
      setBusy(false);
    }
  };
  return html`<span>
    <button type="button" disabled=${!can || busy} onClick=${redrive} aria-describedby="redrive-help">Redrive failed items</button>
    <span id="redrive-help" class="muted">
      ${
        can
          ? ` ${batch.counts.failed} failed item${batch.counts.failed === 1 ? '' : 's'} go back to pending with fresh attempts` +
            (unrun > 0 ? `, and the ${unrun} the batch left unrun run too.` : '.')
          : batch.status === 'cancelled'
            ? ' A cancelled batch is never redriven: cancel is for good. Start a new batch for its items.'
            : ' Only a finished batch with failed items, or a failed one with unrun items, can be redriven.'
      }
    </span>
    ${' '}
    <span role="status" class=${note && !note.ok ? 'error' : 'ok'}>${note?.text ?? ''}</span>
  </span>`;
}

/**
 * Items of one state (or all), a page at a time, in key order (`waiting`: `GET
 * /batches/{id}/items?state=waiting`). Opens on the failed items, else the waiting ones.
 */
function Items({ batch }: { batch: Batch }) {
  // Failed items first; else, for a batch whose items wait on callbacks or sleeps, those.
  const [state, setState] = useState<ItemState | ''>(
    batch.counts.failed > 0 ? 'failed' : (batch.counts.waiting ?? 0) > 0 ? 'waiting' : '',
  );
  // Cursors of the pages before this one (the first page's is undefined).
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const after = cursors[cursors.length - 1];
  // `readAt`: this page's clock at the load, that a waiting item's deadlines are measured from.
  const page = usePoll(
    async () => ({ ...(await api.items(batch.id, { state: state || undefined, after, limit: PAGE })), readAt: Date.now() }),
    [batch.id, state, after],
  );
  const readAt = page.data?.readAt ?? Date.now();
  const choose = (s: ItemState | '') => {
    setState(s);
    setCursors([undefined]);
  };
  return html`<section aria-labelledby="items-title">
    <h3 id="items-title">Items</h3>
    <div class="filters">
      <label
        >State
        <select name="state" value=${state} onChange=${(e: Event) => choose((e.target as HTMLSelectElement).value as ItemState | '')}>
          <option value="">all (${batch.total})</option>
          ${ITEM_STATES.map((s) => html`<option value=${s}>${s} (${batch.counts[s] ?? 0})</option>`)}
        </select>
      </label>
    </div>
    <${ErrorNote} error=${page.error} />
    ${
      page.data === undefined
        ? html`<p>Loading…</p>`
        : page.data.items.length === 0
          ? html`<p>No ${state || ''} items${cursors.length > 1 ? ' on this page' : ''}.</p>`
          : html`<table class="items">
            <thead>
              <tr>
                <th scope="col">Key</th>
                <th scope="col">State</th>
                <th scope="col" class="num">Attempts</th>
                <th scope="col">Error, output or wait</th>
              </tr>
            </thead>
            <tbody>
              ${page.data.items.map(
                (i) => html`<tr data-item=${i.key} data-state=${i.state}>
                  <td><code>${i.key}</code></td>
                  <td>${
                    notRun(batch, i)
                      ? html`<span class="state notrun" title=${`${i.state} when the batch ${batch.status === 'cancelled' ? 'was cancelled' : 'ended'}`}>not run</span>`
                      : html`<span class=${`state ${i.state}`}>${i.state}</span>`
                  }</td>
                  <td class="num">${i.attempts}</td>
                  ${
                    i.state === 'waiting' && i.wait && !notRun(batch, i)
                      ? html`<td><${WaitNote} wait=${i.wait} now=${readAt} /></td>`
                      : html`<td class=${i.error ? 'item-error' : 'muted'}>${i.error ?? brief(i.output)}</td>`
                  }
                </tr>`,
              )}
            </tbody>
          </table>`
    }
    <nav class="pager" aria-label="Item pages">
      <button type="button" disabled=${cursors.length <= 1} onClick=${() => setCursors(cursors.slice(0, -1))}>Previous page</button>
      <span>Page ${cursors.length}</span>
      <button type="button" disabled=${!page.data?.next} onClick=${() => page.data?.next && setCursors([...cursors, page.data.next])}>Next page</button>
    </nav>
  </section>`;
}

/**
 * An unfinished item of a finished batch (running, waiting or pending): no run works it any
 * more, so it shows as `not run`, as the counts have it (components.ts, shownCounts), and a
 * waiting one without its deadlines.
 */
const notRun = (batch: Batch, i: Item) => batch.status !== 'open' && i.state !== 'done' && i.state !== 'failed';

/** The AWS console's page of an `s3://bucket/key` location (locally it names the object all the same). */
function s3Console(location: string): string {
  const m = /^s3:\/\/([^/]+)\/(.*)$/.exec(location);
  return m ? `https://s3.console.aws.amazon.com/s3/object/${m[1]}?prefix=${encodeURIComponent(m[2])}` : location;
}
