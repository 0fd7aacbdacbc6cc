-- Fleet-wide rate limits per key (docs/design.md, "Rate limits"): one token bucket row per job and
-- rate-limit key, shared by every run of every process; a run takes tokens from it in blocks,
-- refilled at the limit's rate by the database clock. A start may set its batch's own rate. And an
-- outbox endpoint that answered Retry-After is paused until then (docs/design.md, "Outbox").
--
-- Additive only (docs/development.md, "Migrations"): a new table and nullable columns, none
-- rewrites or scans an existing table. Code before this migration never reads them.
create table if not exists leasehold_rate_buckets (
  job text not null,
  key text not null,
  -- Tokens left at updated_at (fractional: the refill is continuous), at most the burst.
  tokens double precision not null,
  -- Tokens the last take granted (the take's answer; nothing else reads it).
  granted integer not null default 0,
  updated_at timestamptz not null default now(),
  primary key (job, key)
);
-- A start's own rate (items per second), which wins over the job's `rateLimit.perSecond`;
-- PATCH /batches/{id} may change it while the batch runs. Null: the job's.
alter table leasehold_batches add column if not exists rate_per_second double precision;
-- Nothing is posted to the endpoint before this time (database clock): it answered 429 or 503 with
-- Retry-After. Null: not paused.
alter table leasehold_outbox_endpoints add column if not exists paused_until timestamptz;
