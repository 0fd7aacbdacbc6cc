// One bulk action (`#/actions/ID`): how far it is — matched, done, skipped with why, remaining —
// read again every 2 s until it is finished (docs/api.md, "Bulk actions").
import { html } from 'htm/preact';
import { api } from '../api.js';
import { ErrorNote, Time, usePoll } from '../components.js';
import { shortId } from '../format.js';

export function ActionView({ id }: { id: string }) {
  const polled = usePoll(() => api.getAction(id), [id]);
  const a = polled.data;
  const worked = a ? a.done + a.skipped : 0;
  return html`<section aria-labelledby="action-title" data-action>
    <h2 id="action-title">Action ${shortId(id)}</h2>
    <${ErrorNote} error=${polled.error} />
    ${
      a === undefined
        ? html`<p>Loading…</p>`
        : html`<p>
            <strong>${a.action}</strong> of the batches matching <code>${JSON.stringify(a.filter)}</code>, made
            <${Time} at=${a.createdAt} />; ${a.finishedAt ? html`finished <${Time} at=${a.finishedAt} />` : 'working'}.
          </p>
          <p>
            <progress max=${Math.max(1, a.matched)} value=${worked} aria-label="worked"></progress>
            <span data-action-progress>${worked} of ${a.matched} worked: ${a.done} done, ${a.skipped} skipped, ${a.remaining} left</span>
          </p>
          ${
            a.skippedReasons.length > 0 &&
            html`<ul data-action-skipped>
            ${a.skippedReasons.map((r) => html`<li key=${r.reason}>${r.count} skipped: ${r.reason}</li>`)}
          </ul>`
          }`
    }
  </section>`;
}
