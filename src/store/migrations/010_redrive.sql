-- Redrive (src/batch/redrive.ts): a finished batch's failed items go back to pending with fresh
-- attempts and the batch opens again. Each redrive is recorded; one with an idempotency key is
-- done once per (batch, key), and a repeat answers the recorded one.

-- How many times the batch was redriven.
alter table leasehold_batches add column redrives integer not null default 0;

create table leasehold_redrives (
  batch_id uuid not null references leasehold_batches (id) on delete cascade,
  -- 1 for the batch's first redrive, 2 for the next, …
  number integer not null,
  -- The request's Idempotency-Key, or null when it sent none.
  idempotency_key text,
  -- Failed items put back to pending.
  items integer not null,
  created_at timestamptz not null default now(),
  primary key (batch_id, number),
  unique (batch_id, idempotency_key)
);

-- A batch's failed items in key order: what a redrive resets and the dashboard lists, without
-- reading the batch's other items.
create index leasehold_items_failed on leasehold_items (batch_id, key) where state = 'failed';
