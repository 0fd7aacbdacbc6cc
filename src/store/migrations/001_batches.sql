-- Batches: one-off runs of a job over a finite list of items (docs/design.md, "Batches").

-- One row per (tenant, datasource); locked while a batch starts so that the maxOpen
-- check and the insert are decided one at a time per datasource.
create table leasehold_datasources (
  tenant text not null,
  datasource text not null,
  primary key (tenant, datasource)
);

create table leasehold_batches (
  id uuid primary key default gen_random_uuid(),
  tenant text not null,
  datasource text not null,
  job text not null,
  params jsonb not null,
  request_key text not null,
  -- open | succeeded | failed (finished with failures) | cancelled
  status text not null default 'open'
    check (status in ('open', 'succeeded', 'failed', 'cancelled')),
  total integer not null,
  -- The run that owns the batch (fencing token) and the process it belongs to.
  owner_run uuid,
  owner_process uuid,
  -- The owner's last beat, by the database clock; null when never started or handed off.
  beat_at timestamptz,
  handed_off_at timestamptz,
  -- When a run last took the batch over, and when the scheduler or API last asked a worker
  -- to run it: a dispatch no run has answered yet is not repeated within the cooldown.
  taken_at timestamptz,
  dispatched_at timestamptz,
  runs integer not null default 0,
  created_at timestamptz not null default now(),
  finished_at timestamptz,
  unique (tenant, request_key)
);

-- Open batches per datasource (maxOpen) and the scheduler's look-up of stale ones.
create index leasehold_batches_open on leasehold_batches (tenant, datasource) where status = 'open';
create index leasehold_batches_open_beat on leasehold_batches (beat_at nulls first) where status = 'open';
create index leasehold_batches_tenant_status on leasehold_batches (tenant, status, created_at desc);

create table leasehold_items (
  batch_id uuid not null references leasehold_batches (id) on delete cascade,
  key text not null,
  input jsonb,
  -- pending | running | done | failed
  state text not null default 'pending'
    check (state in ('pending', 'running', 'done', 'failed')),
  attempts integer not null default 0,
  -- Earliest time a pending item may be claimed (retry backoff), by the database clock.
  run_after timestamptz not null default now(),
  output jsonb,
  error text,
  -- The run that made the last move on this item.
  run_id uuid,
  updated_at timestamptz not null default now(),
  primary key (batch_id, key)
);

-- Claims: pending items of a batch in run_after order.
create index leasehold_items_pending on leasehold_items (batch_id, run_after) where state = 'pending';
-- Takeover: items a dead run left running.
create index leasehold_items_running on leasehold_items (batch_id) where state = 'running';
