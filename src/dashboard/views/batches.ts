// All batches: priority, status, progress, items/s, age and runs; filtered by tenant (with its usage
// over the last 30 days) and status; pause, resume and cancel.
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, type Batch } from '../api.js';
import { ErrorNote, ProgressBar, StatusBadge, message, usePoll } from '../components.js';
import { duration, rate, shortId, usageText } from '../format.js';

const STATUSES = ['', 'open', 'running', 'paused', 'succeeded', 'failed', 'cancelled'] as const;

/** The batches view; the filter lives in the address (`#/batches?tenant=…&status=…`). */
export function BatchesView({
  tenant,
  status,
  onFilter,
}: {
  tenant: string;
  status: string;
  onFilter: (f: { tenant: string; status: string }) => void;
}) {
  const polled = usePoll(
    () => api.listBatches({ tenant: tenant || undefined, status: status || undefined, limit: 100 }),
    [tenant, status],
  );
  const [draft, setDraft] = useState(tenant);
  const list = polled.data?.batches;
  const retentionDays = polled.data?.retentionDays;
  const tenants = [...new Set((list ?? []).map((b) => b.tenant))].sort();
  return html`<section aria-labelledby="batches-title">
    <h2 id="batches-title">Batches</h2>
    ${retentionDays === undefined ? null : html`<p class="muted small" data-retention>${retentionText(retentionDays)}</p>`}
    <form
      class="filters"
      onSubmit=${(e: Event) => {
        e.preventDefault();
        onFilter({ tenant: draft.trim(), status });
      }}
    >
      <label>Tenant <input name="tenant" list="tenants" value=${draft} onInput=${(e: Event) => setDraft((e.target as HTMLInputElement).value)} placeholder="all" /></label>
      <datalist id="tenants">${tenants.map((t) => html`<option value=${t}></option>`)}</datalist>
      <label
        >Status
        <select name="status" value=${status} onChange=${(e: Event) => onFilter({ tenant: draft.trim(), status: (e.target as HTMLSelectElement).value })}>
          ${STATUSES.map((s) => html`<option value=${s}>${s || 'all'}</option>`)}
        </select>
      </label>
      <button type="submit">Filter</button>
    </form>
    <${ErrorNote} error=${polled.error} />
    ${tenant ? html`<${TenantUsageLine} tenant=${tenant} />` : null}
    ${
      list === undefined
        ? html`<p>Loading…</p>`
        : list.length === 0
          ? html`<p>No batches${tenant || status ? ' match the filter' : ' yet'}.</p>`
          : html`<table class="batches">
            <thead>
              <tr>
                <th scope="col">Batch</th>
                <th scope="col">Job</th>
                <th scope="col">Tenant / datasource</th>
                <th scope="col" class="num opt" title="0–9: higher runs first within its tenant">Priority</th>
                <th scope="col">Status</th>
                <th scope="col" class="wide">Progress</th>
                <th scope="col" class="num opt">Items/s</th>
                <th scope="col" class="num">Age</th>
                <th scope="col" class="num opt">Runs</th>
                <th scope="col" class="row-actions"><span class="sr-only">Actions</span></th>
              </tr>
            </thead>
            <tbody>
              ${list.map((b) => html`<${BatchRow} key=${b.id} batch=${b} onChanged=${polled.reload} />`)}
            </tbody>
          </table>`
    }
  </section>`;
}

/** The filtered tenant's usage over the last 30 days, for charging back (docs/design.md, "Usage and cost"). */
function TenantUsageLine({ tenant }: { tenant: string }) {
  const usage = usePoll(() => api.tenantUsage(tenant), [tenant]);
  if (!usage.data) return null;
  return html`<p class="muted small" data-tenant-usage>${tenant}, last 30 days: ${usageText(usage.data)}</p>`;
}

/** How long finished batches are kept, in words. */
function retentionText(days: number): string {
  if (days === 0) return 'Finished batches are kept for ever.';
  return `Finished batches are kept ${days} day${days === 1 ? '' : 's'}, then deleted with their items.`;
}

function BatchRow({ batch: b, onChanged }: { batch: Batch; onChanged: () => void }) {
  return html`<tr data-batch=${b.id} data-status=${b.status}>
    <td><a href=${`#/batches/${b.id}`} title=${b.id}><code>${shortId(b.id)}</code></a></td>
    <td>${b.job}</td>
    <td class="name">${b.tenant} / ${b.datasource}</td>
    <td class="num opt">${b.priority ?? '–'}</td>
    <td>
      <${StatusBadge} status=${shownStatus(b)} />
      ${
        b.status === 'succeeded' && b.counts.failed > 0
          ? html`<br /><span class="muted small" data-tolerated>${b.counts.failed} failed, tolerated</span>`
          : null
      }
    </td>
    <td><${ProgressBar} batch=${b} /></td>
    <td class="num opt">${rate(b.itemsPerSecond)}</td>
    <td class="num" data-age>${b.ageMs === undefined ? '–' : duration(b.ageMs)}</td>
    <td class="num opt">${b.runs}${b.redrives ? html`<br /><span class="muted small">${b.redrives} redrive${b.redrives === 1 ? '' : 's'}</span>` : null}</td>
    <td class="row-actions">
      ${
        b.status === 'open'
          ? html`<${PauseButton} batch=${b} onDone=${onChanged} /> <${CancelButton} batch=${b} onDone=${onChanged} />`
          : null
      }
    </td>
  </tr>`;
}

/** The status a badge shows: `paused` for an open batch its operator paused (not waiting for workers). */
export function shownStatus(b: Pick<Batch, 'status' | 'paused'>): string {
  return b.status === 'open' && b.paused ? 'paused' : b.status;
}

/**
 * Pause or resume an open batch, in one press (neither is for good): a paused batch's runs hand
 * off within a beat and nothing runs until it resumes.
 */
export function PauseButton({ batch, onDone }: { batch: Batch; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const paused = batch.paused === true;
  const toggle = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await (paused ? api.resumeBatch(batch.id) : api.pauseBatch(batch.id));
      onDone();
    } catch (e) {
      setError(message(e));
    } finally {
      setBusy(false);
    }
  };
  const label = paused ? 'Resume' : 'Pause';
  return html`<button type="button" disabled=${busy} onClick=${toggle} aria-label=${`${label} batch ${shortId(batch.id)}`}>
      ${label}
    </button>
    ${error ? html`<span class="error" role="alert">${error}</span>` : null}`;
}

/**
 * Cancel, in two steps: cancel is for good, so the first press asks. The question takes the
 * button's place (in the batch list it floats over the row, so the column keeps its width);
 * focus goes to "Keep it", and Escape keeps the batch too.
 */
export function CancelButton({ batch, onDone }: { batch: Batch; onDone: () => void }) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const keep = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) keep.current?.focus();
  }, [asking]);
  const cancel = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await api.cancelBatch(batch.id);
      setAsking(false);
      onDone();
    } catch (e) {
      setError(message(e));
    } finally {
      setBusy(false);
    }
  };
  if (!asking)
    return html`<button type="button" class="danger" onClick=${() => setAsking(true)} aria-label=${`Cancel batch ${shortId(batch.id)}`}>Cancel</button>`;
  // The button stays, unseen, under the question: the cell keeps the width it had.
  return html`<button type="button" class="danger placeholder" tabindex="-1" aria-hidden="true" disabled>Cancel</button>
    <span
    class="confirm"
    role="group"
    aria-label=${`Cancel batch ${shortId(batch.id)} for good?`}
    onKeyDown=${(e: KeyboardEvent) => e.key === 'Escape' && setAsking(false)}
  >
    <button type="button" class="danger" disabled=${busy} onClick=${cancel}>Yes, cancel for good</button>
    <button type="button" ref=${keep} disabled=${busy} onClick=${() => setAsking(false)}>Keep it</button>
    ${error ? html`<span class="error" role="alert">${error}</span>` : null}
  </span>`;
}
