-- Bulk actions (docs/design.md, "Bulk actions"; issue 39): one request cancels, pauses, resumes or
-- redrives every batch a filter matches, as one tracked action worked in bounded chunks.
--
-- Additive only (docs/development.md, "Migrations"): two new tables nobody else reads.

-- One row per action: what it does, the filter it was asked with, how far it is. The request key
-- makes it idempotent: a repeated request answers the action that key made.
create table if not exists leasehold_actions (
  id uuid primary key,
  request_key text not null unique,
  action text not null check (action in ('cancel', 'pause', 'resume', 'redrive')),
  filter jsonb not null,
  matched int not null,
  done int not null default 0,
  skipped int not null default 0,
  created_at timestamptz not null default now(),
  finished_at timestamptz
);

-- The actions not finished yet, oldest first: the scheduler's actions service reads them here.
create index if not exists leasehold_actions_unfinished on leasehold_actions (created_at) where finished_at is null;

-- The batches an action matched when it was made (its snapshot; batches started later are not
-- its), each with its outcome once worked: 'done', or 'skipped' with a reason. A chunk claims
-- unworked rows with FOR UPDATE SKIP LOCKED and marks them taken until `taken_until` (database
-- clock), so two workers of one action never work one batch at once and a worker that died
-- leaves its chunk to the next after that instant. `tries` counts the tries a busy batch (a lock
-- a worker held) was left for later.
create table if not exists leasehold_action_batches (
  action_id uuid not null references leasehold_actions (id) on delete cascade,
  batch_id uuid not null,
  outcome text check (outcome in ('done', 'skipped')),
  reason text,
  tries int not null default 0,
  taken_until timestamptz,
  primary key (action_id, batch_id)
);

-- An action's batches not worked yet: a chunk's claim reads its first entries.
create index if not exists leasehold_action_batches_todo on leasehold_action_batches (action_id, batch_id)
  where outcome is null;
