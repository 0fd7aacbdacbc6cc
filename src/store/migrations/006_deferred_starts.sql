-- Scheduled firings refused because their datasource had maxOpen open batches: kept here until
-- a slot frees, then started by the scheduler under their own request key (src/runtime/trigger.ts).
create table leasehold_deferred_starts (
  tenant text not null,
  request_key text not null,
  datasource text not null,
  job text not null,
  -- The params as the event gave them; expanded again when the batch starts.
  params jsonb not null,
  created_at timestamptz not null default now(),
  -- Starts tried and refused again (the datasource still full), and the last refusal.
  tries integer not null default 0,
  last_error text,
  primary key (tenant, request_key)
);
-- Oldest first: firings of one datasource start in the order they were refused.
create index leasehold_deferred_starts_created on leasehold_deferred_starts (created_at);
