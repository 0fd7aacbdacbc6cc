// The fleet: live processes with the weight each owns against the fair share, the desired count
// against the live one (and a control to change it), and expired processes not yet swept.
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { api, type Fleet, type Process } from '../api.js';
import { ErrorNote, Time, WeightBar, evenSharePercent, message, round2, usePoll } from '../components.js';
import { duration, shortId } from '../format.js';

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
  return html`<section aria-labelledby="fleet-title">
    <h2 id="fleet-title">Fleet</h2>
    <${ErrorNote} error=${polled.error} />
    ${
      d === undefined
        ? html`<p>Loading…</p>`
        : html`
          <${FleetFacts} data=${d} />
          <${DesiredControl} desired=${d.desired} onDone=${polled.reload} />
          <h3>Live processes</h3>
          <p class="muted small" data-turnover>
            A worker lives until its deadline (its timeout less a margin: about 20 s under${' '}
            <code>leasehold dev</code>, up to 15 minutes deployed), then hands its work back and invokes its
            replacement, a new process with a new id. So rows come and go at that pace: the Chain column follows each
            line of replacements, and a process that died instead shows below, expired.
          </p>
          <${LiveProcesses} data=${d} />
          <h3>Expired, not yet swept</h3>
          <${ExpiredProcesses} processes=${d.processes.filter((p) => !p.live)} />
        `
    }
  </section>`;
}

/** The fleet's figures: live against desired, coming, retiring, the weight and the shares. */
function FleetFacts({ data: d }: { data: FleetData }) {
  const live = d.fleet.live ?? d.processes.filter((p) => p.live).length;
  const evenShare = d.fleet.evenShare;
  return html`<dl class="facts">
    <div><dt>Live processes</dt><dd data-live=${live}>${live}</dd></div>
    <div><dt>Desired</dt><dd data-desired=${d.desired}>${d.desired}</dd></div>
    ${d.fleet.coming !== undefined ? html`<div><dt>Coming</dt><dd>${d.fleet.coming}</dd></div>` : null}
    ${d.fleet.retiring !== undefined ? html`<div><dt>Retiring</dt><dd>${d.fleet.retiring}</dd></div>` : null}
    ${d.fleet.batch !== undefined ? html`<div><dt>Batch workers</dt><dd>${d.fleet.batch}</dd></div>` : null}
    <div><dt>Claimable weight</dt><dd>${d.fleet.totalWeight ?? '–'}</dd></div>
    <div><dt>Fair share</dt><dd>${d.fleet.fairShare ?? '–'}</dd></div>
    ${evenShare ? html`<div><dt>Even share</dt><dd data-even-share=${evenShare}>${round2(evenShare)}</dd></div>` : null}
  </dl>`;
}

/** Live processes: the weight each owns against the fair share, its chain, when it expires. */
function LiveProcesses({ data: d }: { data: FleetData }) {
  const live = d.processes.filter((p) => p.live);
  const { fairShare, evenShare } = d.fleet;
  const scale = Math.max(1, fairShare ?? 0, ...live.map((p) => p.weight)) * 1.15;
  if (live.length === 0) return html`<p>No live process.</p>`;
  return html`<table class="processes">
      <thead>
        <tr>
          <th scope="col">Process</th>
          <th scope="col">Host</th>
          <th scope="col">Role</th>
          <th scope="col" class="num">Units</th>
          <th scope="col" class="wide">Weight against the fair share${fairShare === undefined ? '' : ` (${fairShare})`}</th>
          <th scope="col">Started</th>
          <th scope="col">Chain</th>
          <th scope="col" class="num">Expires in</th>
        </tr>
      </thead>
      <tbody>
        ${live.map(
          (p) => html`<tr data-process=${p.id} data-chain=${p.chainId}>
            <td><code title=${p.id}>${shortId(p.id)}</code></td>
            <td>${p.hostname}</td>
            <td>${p.role ?? '–'}${p.retiring ? ' (retiring)' : ''}</td>
            <td class="num">${p.units}</td>
            <td>
              <${WeightBar} weight=${p.weight} fairShare=${fairShare} evenShare=${evenShare} scale=${scale} />
              <span class="muted weight-text">${p.weight}${evenShare && p.role !== 'batch' ? html` · <span data-share-percent>${evenSharePercent(p.weight, evenShare)} %</span>` : null}</span>
            </td>
            <td><${Time} at=${p.startedAt} /></td>
            <td><${Chain} process=${p} /></td>
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
    </ul>`;
}

/** Expired processes not yet swept, with the units they still hold. */
function ExpiredProcesses({ processes: expired }: { processes: Process[] }) {
  if (expired.length === 0) return html`<p>None.</p>`;
  return html`<table class="processes expired">
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
        (p) => html`<tr data-process=${p.id} data-chain=${p.chainId}>
          <td><code title=${p.id}>${shortId(p.id)}</code></td>
          <td>${p.hostname}</td>
          <td class="num">${p.units}</td>
          <td><${Time} at=${p.expiresAt} /></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

/**
 * Where a process stands in its chain (docs/design.md, "Process chains"): how many times the
 * chain's process was replaced at its deadline, since when, and the process it replaced.
 */
function Chain({ process: p }: { process: Process }) {
  if (p.replacements === undefined) return html`<span class="muted">–</span>`;
  if (p.replacements === 0 || !p.replaces) return html`<span class="muted" data-replacements="0">first of its chain</span>`;
  return html`<span data-replacements=${p.replacements}
      >replaced ${p.replacements} time${p.replacements === 1 ? '' : 's'} since <${Time} at=${p.chainStartedAt} /></span
    ><br /><span class="muted small">after <code title=${p.replaces} data-replaces=${p.replaces}>${shortId(p.replaces)}</code></span>`;
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
