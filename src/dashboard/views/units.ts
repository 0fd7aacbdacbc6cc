// Units and outbox, per tenant: the units and their owners, and for outbox-delivery tenants the
// backlog, last error and Retry-After pause of each endpoint.
import { html } from 'htm/preact';
import { api, type Outbox, type Unit } from '../api.js';
import { ErrorNote, Time, message, usePoll } from '../components.js';
import { duration, shortId } from '../format.js';

interface TenantData {
  tenant: string;
  units: Unit[];
  outbox?: Outbox;
  outboxError?: string;
}

async function loadTenants(): Promise<TenantData[]> {
  const units = await api.units();
  const byTenant = new Map<string, Unit[]>();
  for (const u of units) byTenant.set(u.tenant, [...(byTenant.get(u.tenant) ?? []), u]);
  return Promise.all(
    [...byTenant].map(async ([tenant, list]) => {
      if (!list.some((u) => u.job === 'outbox-delivery')) return { tenant, units: list };
      try {
        return { tenant, units: list, outbox: await api.outbox(tenant) };
      } catch (e) {
        return { tenant, units: list, outboxError: message(e) };
      }
    }),
  );
}

export function UnitsView() {
  const polled = usePoll(loadTenants, []);
  return html`<section aria-labelledby="units-title">
    <h2 id="units-title">Units and outbox</h2>
    <${ErrorNote} error=${polled.error} />
    ${
      polled.data === undefined
        ? html`<p>Loading…</p>`
        : polled.data.length === 0
          ? html`<p>No units. Register some with <code>leasehold units put TENANT --job outbox-delivery --shards 4 --endpoint URL</code>.</p>`
          : polled.data.map((t) => html`<${Tenant} key=${t.tenant} data=${t} />`)
    }
  </section>`;
}

function Tenant({ data }: { data: TenantData }) {
  const { tenant, units, outbox } = data;
  const owners = new Map<string, number>();
  for (const u of units) owners.set(u.owner ?? '', (owners.get(u.owner ?? '') ?? 0) + 1);
  const weight = units.reduce((a, u) => a + u.weight, 0);
  const quarantined = units.filter((u) => u.quarantinedUntil);
  const id = `tenant-${tenant.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  return html`<article class="tenant" aria-labelledby=${id} data-tenant=${tenant}>
    <h3 id=${id}>${tenant}</h3>
    <p>
      ${units.length} unit${units.length === 1 ? '' : 's'} of ${[...new Set(units.map((u) => u.job))].join(', ')}, weight ${weight}; owners:
      ${[...owners].map(([owner, n]) => html` <span class="owner"><code>${owner ? shortId(owner) : 'unowned'}</code> × ${n}</span>`)}
    </p>
    ${
      quarantined.length
        ? html`<p class="error quarantine">
            Quarantined, their job having crashed its process again and again:
            ${quarantined.map(
              (u) =>
                html` <span class="quarantined" data-shard=${u.shard}
                  >shard ${u.shard} (${u.crashes} crash${u.crashes === 1 ? '' : 'es'} in a row) until <${Time} at=${u.quarantinedUntil} /></span
                >`,
            )}
            — lift with <code>leasehold units release ${tenant} SHARD</code>.
          </p>`
        : null
    }
    <details>
      <summary>Units of ${tenant}</summary>
      <table class="units">
        <thead>
          <tr><th scope="col" class="num">Shard</th><th scope="col">Job</th><th scope="col" class="num">Weight</th><th scope="col">Owner</th><th scope="col">Claimed</th><th scope="col" class="num">Crashes</th><th scope="col">Quarantined until</th></tr>
        </thead>
        <tbody>
          ${units.map(
            (u) => html`<tr>
              <td class="num">${u.shard}</td>
              <td>${u.job}</td>
              <td class="num">${u.weight}</td>
              <td><code title=${u.owner ?? ''}>${u.owner ? shortId(u.owner) : 'unowned'}</code></td>
              <td><${Time} at=${u.claimedAt} /></td>
              <td class="num">${u.crashes}</td>
              <td class=${u.quarantinedUntil ? 'item-error' : 'muted'}>${u.quarantinedUntil ? html`<${Time} at=${u.quarantinedUntil} />` : '–'}</td>
            </tr>`,
          )}
        </tbody>
      </table>
    </details>
    ${data.outboxError ? html`<p class="error">Outbox: ${data.outboxError}</p>` : null}
    ${
      outbox
        ? html`<table class="outbox">
          <caption>Outbox of ${tenant}, per endpoint</caption>
          <thead>
            <tr>
              <th scope="col">Endpoint</th>
              <th scope="col" class="num">Backlog</th>
              <th scope="col" class="num">Oldest waiting</th>
              <th scope="col" class="num">Failures in a row</th>
              <th scope="col">Last error</th>
              <th scope="col">Last delivered</th>
              <th scope="col">Paused (Retry-After)</th>
            </tr>
          </thead>
          <tbody>
            ${outbox.endpoints.map(
              (e) => html`<tr data-endpoint=${e.url}>
                <td><code>${e.url}</code></td>
                <td class="num">${e.backlog}</td>
                <td class="num" title=${e.oldest ? `message ${e.oldest.id}` : ''}>${e.oldest ? duration(e.oldest.ageMs) : '–'}</td>
                <td class="num">${e.failures}</td>
                <td class=${e.lastError ? 'item-error' : 'muted'}>${e.lastError ? html`${e.lastError.message} (<${Time} at=${e.lastError.at} />)` : 'none'}</td>
                <td><${Time} at=${e.lastDeliveredAt} /></td>
                <td class=${e.pause ? 'paused' : 'muted'}>
                  ${
                    e.pause
                      ? html`${duration(e.pause.remainingMs)} left (until <${Time} at=${e.pause.until} />; asked
                        ${duration(e.pause.askedMs)})`
                      : 'no'
                  }
                </td>
              </tr>`,
            )}
          </tbody>
        </table>`
        : null
    }
  </article>`;
}
