// Concurrency pools (docs/design.md, "Concurrency pools"): every pool with its limit and the items
// in flight now against it (`#/pools`, `GET /pools`), and one pool (`#/pools/NAME`, `GET
// /pools/{name}`) with its runs and, for a per-key pool, its busiest keys.
import { html } from 'htm/preact';
import { api, type Pool } from '../api.js';
import { ErrorNote, PoolBar, Time, usePoll } from '../components.js';
import { poolLimit } from '../format.js';

/** The address of pool `name`'s own view. */
export const poolHref = (name: string) => `#/pools/${encodeURIComponent(name)}`;

export function PoolsView() {
  const polled = usePoll(() => api.pools(), []);
  const list = polled.data;
  return html`<section aria-labelledby="pools-title">
    <h2 id="pools-title">Pools</h2>
    <p class="muted small">
      A pool caps the items in flight across every batch and job naming it, fleet-wide; its limit changes while
      they run (<code>leasehold pool set NAME --limit N</code>).
    </p>
    <${ErrorNote} error=${polled.error} />
    ${
      list === undefined
        ? html`<p>Loading…</p>`
        : list.length === 0
          ? html`<p data-no-pools>
              No pools yet. Create one with <code>leasehold pool set NAME --limit 20</code>, then start batches with
              <code>--pool NAME</code>.
            </p>`
          : html`<${PoolsTable} pools=${list} />`
    }
  </section>`;
}

/** The pools as a table: name (linked to its view), limit, items in flight now against it, runs holding them. */
export function PoolsTable({ pools }: { pools: Pool[] }) {
  return html`<table class="pools">
    <thead>
      <tr>
        <th scope="col">Pool</th>
        <th scope="col" class="num">Limit</th>
        <th scope="col" class="num">In flight</th>
        <th scope="col" class="wide">Of the limit</th>
        <th scope="col" class="num">Runs</th>
        <th scope="col" class="opt">Limit set</th>
      </tr>
    </thead>
    <tbody>
      ${pools.map(
        (p) => html`<tr key=${p.name} data-pool=${p.name}>
          <td class="name"><a href=${poolHref(p.name)}>${p.name}</a></td>
          <td class="num" data-limit>${poolLimit(p)}</td>
          <td class="num" data-in-flight>${p.inFlight}</td>
          <td><${PoolBar} pool=${p} /></td>
          <td class="num">${p.runs}</td>
          <td class="opt"><${Time} at=${p.updatedAt} /></td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

/** One pool: its limits, the items in flight now and the runs holding them, and a per-key pool's busiest keys. */
export function PoolView({ name }: { name: string }) {
  const polled = usePoll(() => api.getPool(name), [name]);
  const p = polled.data;
  return html`<section aria-labelledby="pool-title" data-pool-view>
    <p><a href="#/pools">← All pools</a></p>
    <h2 id="pool-title">Pool <code>${name}</code></h2>
    <${ErrorNote} error=${polled.error} />
    ${
      p === undefined
        ? polled.error
          ? // Nothing to wait for: the error says why (404: no such pool).
            html`<p data-no-pool><a href="#/pools">See the pools</a>.</p>`
          : html`<p>Loading…</p>`
        : html`
          <dl class="facts">
            <div><dt>Limit</dt><dd data-limit>${poolLimit(p)}</dd></div>
            <div><dt>In flight</dt><dd data-in-flight>${p.inFlight}</dd></div>
            <div><dt>Runs</dt><dd>${p.runs}</dd></div>
            <div><dt>Limit set</dt><dd><${Time} at=${p.updatedAt} /></dd></div>
          </dl>
          <${PoolBar} pool=${p} />
          ${p.perKey === null ? null : html`<${PoolKeys} pool=${p} perKey=${p.perKey} />`}
        `
    }
  </section>`;
}

/** A per-key pool's keys with items in flight now, the busiest first (at most 100), each against `perKey`. */
function PoolKeys({ pool, perKey }: { pool: Pool; perKey: number }) {
  return html`<h3>Busiest keys</h3>
    ${
      pool.keys.length === 0
        ? html`<p>No key has items in flight.</p>`
        : html`<table class="pools keys">
          <thead>
            <tr>
              <th scope="col">Key</th>
              <th scope="col" class="num">In flight</th>
              <th scope="col" class="wide">Of ${perKey} per key</th>
            </tr>
          </thead>
          <tbody>
            ${pool.keys.map(
              (k) => html`<tr key=${k.key} data-key=${k.key}>
                <td class="name"><code>${k.key}</code></td>
                <td class="num">${k.inFlight}</td>
                <td><${PoolBar} pool=${{ inFlight: k.inFlight, total: perKey }} /></td>
              </tr>`,
            )}
          </tbody>
        </table>`
    }`;
}
