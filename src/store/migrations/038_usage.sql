-- Usage and cost per batch and per tenant (docs/design.md, "Usage and cost"; issue 39): one row
-- per run, written once when the run ends (the worker time it spent, its memory size and
-- architecture, the item attempts it started and the S3 requests it sent), or, for a run that
-- died without reporting, by the takeover that replaced it (from its start to its last beat,
-- `died`). Never one write per item: a run's figures are counted in memory and stored at its end.
--
-- Additive only (docs/development.md, "Migrations"): a new table and its indexes; old code never
-- reads it. A batch's usage is its rows (by `batch_id`); a tenant's over a time range, its rows by
-- `(tenant, recorded_at)`. No foreign key: a tenant's usage outlives the batches retention deletes.
create table if not exists leasehold_run_usage (
  run_id uuid primary key,
  batch_id uuid not null,
  tenant text not null,
  process uuid not null,
  recorded_at timestamptz not null default now(),
  worker_ms double precision not null check (worker_ms >= 0),
  memory_mb integer not null check (memory_mb > 0),
  architecture text not null check (architecture in ('x86_64', 'arm64')),
  items integer not null default 0,
  s3_get integer not null default 0,
  s3_put integer not null default 0,
  s3_list integer not null default 0,
  died boolean not null default false
);
create index if not exists leasehold_run_usage_batch on leasehold_run_usage (batch_id);
create index if not exists leasehold_run_usage_tenant on leasehold_run_usage (tenant, recorded_at);
