-- Retry-After pauses of the outbox, per endpoint of a tenant (docs/design.md, "Outbox"; issue 38).
-- Until now a pause sat on the endpoint's status row of one unit (tenant, shard), so the owners
-- of the tenant's other shards — other containers — kept posting to an endpoint that had asked
-- for a pause. One row per (tenant, endpoint) is read by every shard's due-deliveries statement,
-- on every process, against the database clock.
--
-- Additive only (docs/development.md, "Migrations"): a new table; code of the release before
-- never reads it (it keeps reading leasehold_outbox_endpoints.paused_until, which this code no
-- longer writes).
create table if not exists leasehold_outbox_pauses (
  tenant text not null,
  -- The endpoint URL exactly as the unit's config lists it.
  endpoint text not null,
  -- No delivery to the endpoint before this time (database clock): when it asked for a pause,
  -- plus the wait it asked for, capped (the outbox's `maxRetryAfterMs`, default 15 minutes).
  paused_until timestamptz not null,
  -- The wake-up is spread past paused_until: shard s of the tenant may post again from
  -- paused_until + jitter_ms × frac(wake_offset + s × 0.618…), so the tenant's shards (and the
  -- endpoints paused at the same moment) do not all come back in the same instant. wake_offset is
  -- uniform in [0, 1), drawn per pause.
  jitter_ms double precision not null default 0,
  wake_offset double precision not null default 0,
  -- The wait the endpoint asked for, ms (before the cap), and when it asked (database clock).
  asked_ms double precision not null,
  asked_at timestamptz not null default now(),
  primary key (tenant, endpoint)
);

-- Pauses in force carry over, one per (tenant, endpoint), the latest of the tenant's shards.
insert into leasehold_outbox_pauses (tenant, endpoint, paused_until, asked_ms)
select tenant, endpoint, max(paused_until), extract(epoch from max(paused_until) - now()) * 1000
from leasehold_outbox_endpoints
where paused_until > now()
group by tenant, endpoint
on conflict do nothing;
