// The dashboard page: batches, one batch, one bulk action (`#/actions/ID`), the fleet, units with their outbox, and
// concurrency pools (`#/pools`, one pool at `#/pools/NAME`). Views are
// chosen by the address's hash (`#/batches/ID`), so the server only serves one page, and every
// view reloads what it shows every 2 s.
import { html } from 'htm/preact';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { POLL_MS } from './components.js';
import { ActionView } from './views/action.js';
import { BatchView } from './views/batch.js';
import { BatchesView } from './views/batches.js';
import { FleetView } from './views/fleet.js';
import { PoolView, PoolsView } from './views/pools.js';
import { UnitsView } from './views/units.js';

type Route =
  | { view: 'batches'; tenant: string; status: string }
  | { view: 'batch'; id: string }
  | { view: 'action'; id: string }
  | { view: 'fleet' }
  | { view: 'units' }
  | { view: 'pools' }
  | { view: 'pool'; name: string }
  | { view: 'unknown'; path: string };

function parseHash(hash: string): Route {
  const [path, query = ''] = hash.replace(/^#/, '').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'batches' && parts[1]) return { view: 'batch', id: parts[1] };
  if (parts[0] === 'actions' && parts[1] && parts.length === 2) return { view: 'action', id: parts[1] };
  if (parts[0] === 'fleet') return { view: 'fleet' };
  if (parts[0] === 'units') return { view: 'units' };
  if (parts[0] === 'pools' && parts[1] && parts.length === 2) return { view: 'pool', name: parts[1] };
  if (parts[0] === 'pools' && parts.length === 1) return { view: 'pools' };
  // Only the batches list's own addresses show it: any other says it is not a page.
  if (parts.length > 1 || (parts[0] !== undefined && parts[0] !== 'batches')) return { view: 'unknown', path };
  const q = new URLSearchParams(query);
  return { view: 'batches', tenant: q.get('tenant') ?? '', status: q.get('status') ?? '' };
}

function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

const TABS = [
  { view: 'batches', href: '#/batches', label: 'Batches' },
  { view: 'fleet', href: '#/fleet', label: 'Fleet' },
  { view: 'units', href: '#/units', label: 'Units and outbox' },
  { view: 'pools', href: '#/pools', label: 'Pools' },
] as const;

function App() {
  const route = useRoute();
  const current = route.view === 'batch' ? 'batches' : route.view === 'pool' ? 'pools' : route.view;
  useEffect(() => {
    const titles = {
      batches: 'Batches',
      batch: 'Batch',
      action: 'Action',
      fleet: 'Fleet',
      units: 'Units and outbox',
      pools: 'Pools',
      pool: 'Pool',
      unknown: 'No such page',
    };
    document.title = `${titles[route.view]} · leasehold`;
  }, [route.view]);
  let view;
  if (route.view === 'batch') view = html`<${BatchView} key=${route.id} id=${route.id} />`;
  else if (route.view === 'action') view = html`<${ActionView} key=${route.id} id=${route.id} />`;
  else if (route.view === 'fleet') view = html`<${FleetView} />`;
  else if (route.view === 'units') view = html`<${UnitsView} />`;
  else if (route.view === 'pools') view = html`<${PoolsView} />`;
  else if (route.view === 'pool') view = html`<${PoolView} key=${route.name} name=${route.name} />`;
  else if (route.view === 'unknown')
    view = html`<section aria-labelledby="unknown-title" data-unknown-route>
      <h2 id="unknown-title">No such page</h2>
      <p>The dashboard has no page at <code>#${route.path}</code>. <a href="#/batches">See the batches</a>.</p>
    </section>`;
  else {
    view = html`<${BatchesView}
      tenant=${route.tenant}
      status=${route.status}
      onFilter=${(f: { tenant: string; status: string }) => {
        const q = new URLSearchParams(Object.entries(f).filter(([, v]) => v));
        location.hash = `#/batches${q.size ? `?${q}` : ''}`;
      }}
    />`;
  }
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <header>
      <h1>leasehold</h1>
      <nav aria-label="Views">
        <ul>
          ${TABS.map((t) => html`<li><a href=${t.href} aria-current=${current === t.view ? 'page' : undefined}>${t.label}</a></li>`)}
        </ul>
      </nav>
      <p class="muted live">Live: updates every ${POLL_MS / 1000} s</p>
    </header>
    <main id="main" tabindex="-1">${view}</main>
  `;
}

render(html`<${App} />`, document.getElementById('app')!);
