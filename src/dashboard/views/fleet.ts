// The fleet: live processes with the weight each owns against the fair share, the desired count
// against the live one (and a control to change it), and expired processes not yet swept.
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { api, type Fleet, type Process } from '../api.js';
import { ErrorNote, WeightBar, evenSharePercent, message, round2, usePoll } from '../components.js';
import { duration, shortId, when } from '../format.js';

interface FleetData {
  processes: Process[];
  fleet: Fleet;
  desired: number;
  /** Load time by this page's clock, only to show how long until a process expires. */
  readAt: number;
}

async function loadFleet(): Promise<FleetData> {
  const [{ processes, fleet }, concurrency] = await Promise.all([api.processes(), api.concurrency()]);
  let merged: Fleet = { ...(concurrency as Fleet), ...fleet };
  if (merged.fairShare === undefined) {
    // APIs without a fleet summary: the fair share from the units' claimable weight.
    const units = await api.units();
    const weight = units.reduce((a, u) => a + u.weight, 0);
    const live = processes.filter((p) => p.live).length;
    merged = { ...merged, totalWeight: weight, fairShare: live > 0 ? Math.ceil(weight / live) : undefined };
  }
  return { processes, fleet: merged, desired: concurrency.desired, readAt: Date.now() };
}

export function FleetView() {
  const polled = usePoll(loadFleet, []);
  const d = polled.data;
  const live = d?.processes.filter((p) => p.live) ?? [];
  const expired = d?.processes.filter((p) => !p.live) ?? [];
  const fairShare = d?.fleet.fairShare;
  const evenShare = d?.fleet.evenShare;
  const scale = Math.max(1, fairShare ?? 0, ...live.map((p) => p.weight)) * 1.15;
  return html`<section aria-labelledby="fleet-title">
    <h2 id="fleet-title">Fleet</h2>
    <${ErrorNote} error=${polled.error} />
    ${
      d === undefined
        ? html`<p>Loading…</p>`
        : html`
          <dl class="facts">
            <div><dt>Live processes</dt><dd data-live=${d.fleet.live ?? live.length}>${d.fleet.live ?? live.length}</dd></div>
            <div><dt>Desired</dt><dd data-desired=${d.desired}>${d.desired}</dd></div>
            ${d.fleet.coming !== undefined ? html`<div><dt>Coming</dt><dd>${d.fleet.coming}</dd></div>` : null}
            ${d.fleet.retiring !== undefined ? html`<div><dt>Retiring</dt><dd>${d.fleet.retiring}</dd></div>` : null}
            ${d.fleet.batch !== undefined ? html`<div><dt>Batch workers</dt><dd>${d.fleet.batch}</dd></div>` : null}
            <div><dt>Claimable weight</dt><dd>${d.fleet.totalWeight ?? '–'}</dd></div>
            <div><dt>Fair share</dt><dd>${fairShare ?? '–'}</dd></div>
            ${evenShare ? html`<div><dt>Even share</dt><dd data-even-share=${evenShare}>${round2(evenShare)}</dd></div>` : null}
          </dl>
          <${DesiredControl} desired=${d.desired} onDone=${polled.reload} />
          <h3>Live processes</h3>
          ${
            live.length === 0
              ? html`<p>No live process.</p>`
              : html`<table class="processes">
                <thead>
                  <tr>
                    <th scope="col">Process</th>
                    <th scope="col">Host</th>
                    <th scope="col">Role</th>
                    <th scope="col" class="num">Units</th>
                    <th scope="col" class="wide">Weight against the fair share${fairShare === undefined ? '' : ` (${fairShare})`}</th>
                    <th scope="col">Started</th>
                    <th scope="col" class="num">Expires in</th>
                  </tr>
                </thead>
                <tbody>
                  ${live.map(
                    (p) => html`<tr data-process=${p.id}>
                      <td><code title=${p.id}>${shortId(p.id)}</code></td>
                      <td>${p.hostname}</td>
                      <td>${p.role ?? '–'}${p.retiring ? ' (retiring)' : ''}</td>
                      <td class="num">${p.units}</td>
                      <td>
                        <${WeightBar} weight=${p.weight} fairShare=${fairShare} evenShare=${evenShare} scale=${scale} />
                        <span class="muted weight-text">${p.weight}${evenShare && p.role !== 'batch' ? html` · <span data-share-percent>${evenSharePercent(p.weight, evenShare)} %</span>` : null}</span>
                      </td>
                      <td>${when(p.startedAt)}</td>
                      <td class="num">${duration(Date.parse(p.expiresAt) - d.readAt)}</td>
                    </tr>`,
                  )}
                </tbody>
              </table>
              <ul class="legend" aria-label="Legend of the weight bars" data-weight-legend>
                <li><span class="swatch owned"></span>weight owned</li>
                <li><span class="swatch over"></span>above the fair share</li>
                <li><span class="swatch share-mark"></span>the fair share (the exact share rounded up)</li>
                ${evenShare ? html`<li>N %: the weight against the even share, ${round2(evenShare)} (a process's real part of the work)</li>` : null}
              </ul>`
          }
          <h3>Expired, not yet swept</h3>
          ${
            expired.length === 0
              ? html`<p>None.</p>`
              : html`<table class="processes expired">
                <thead>
                  <tr>
                    <th scope="col">Process</th>
                    <th scope="col">Host</th>
                    <th scope="col" class="num">Units still held</th>
                    <th scope="col">Expired at</th>
                  </tr>
                </thead>
                <tbody>
                  ${expired.map(
                    (p) => html`<tr data-process=${p.id}>
                      <td><code title=${p.id}>${shortId(p.id)}</code></td>
                      <td>${p.hostname}</td>
                      <td class="num">${p.units}</td>
                      <td>${when(p.expiresAt)}</td>
                    </tr>`,
                  )}
                </tbody>
              </table>`
          }
        `
    }
  </section>`;
}

/** Set the desired count of live processes (0..1000). */
function DesiredControl({ desired, onDone }: { desired: number; onDone: () => void }) {
  const [value, setValue] = useState<string>();
  const [note, setNote] = useState<{ ok: boolean; text: string }>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const n = Number(value ?? desired);
    if (!Number.isInteger(n) || n < 0 || n > 1000) {
      setNote({ ok: false, text: 'The desired count is a whole number from 0 to 1000.' });
      return;
    }
    setBusy(true);
    try {
      const r = await api.setDesired(n);
      setNote({ ok: true, text: `Desired count set to ${r.desired}; the scheduler follows it on its next run.` });
      setValue(undefined);
      onDone();
    } catch (err) {
      setNote({ ok: false, text: message(err) });
    } finally {
      setBusy(false);
    }
  };
  return html`<form class="filters" onSubmit=${submit}>
    <label
      >Desired live processes
      <input name="desired" type="number" min="0" max="1000" step="1" required value=${value ?? String(desired)} onInput=${(e: Event) => setValue((e.target as HTMLInputElement).value)} />
    </label>
    <button type="submit" disabled=${busy}>Set desired count</button>
    <span role="status" class=${note && !note.ok ? 'error' : 'ok'}>${note?.text ?? ''}</span>
  </form>`;
}
