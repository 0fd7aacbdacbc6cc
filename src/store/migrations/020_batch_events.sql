-- Batch Finished events (docs/design.md, "Events"): every end of a batch (finish, cancel,
-- give-up, tolerance) writes one row here in the transaction that ends it, so the event can never
-- be lost; a sender (the run that ended the batch, at once; the scheduler, for whatever is left)
-- sends it at least once with its stable id: to the stack's EventBridge bus (PutEvents) and,
-- when the start asked for it, as a signed webhook to the start's `notify.url`. A redriven batch
-- that ends again writes a new row, with a new id.
--
-- Additive only (docs/development.md, "Migrations"): a new table and a nullable column that code
-- of the release before never reads or writes (its ends write no event; a batch it started has
-- no notify URL).

-- The webhook a start asked for (`notify: { "url": … }`); null when none.
alter table leasehold_batches add column notify_url text;

create table leasehold_batch_events (
  -- The event's stable id: `detail.id` of every PutEvents and the webhook's id, whatever the
  -- number of sends. A chained batch's request key is made from it.
  id uuid primary key default gen_random_uuid(),
  batch_id uuid not null references leasehold_batches (id) on delete cascade,
  tenant text not null,
  -- The event's detail as sent, built in the ending transaction (status, counts, …).
  detail jsonb not null,
  created_at timestamptz not null default now(),
  -- EventBridge: when PutEvents accepted it (null until then), the sends tried, when the next
  -- send is due (a sender that takes the row pushes this on by its claim window, so a sender
  -- that dies leaves it to the next one after that), the last error.
  sent_at timestamptz,
  send_attempts integer not null default 0,
  send_after timestamptz not null default now(),
  send_error text,
  -- The webhook: its URL (null: none), when it was accepted (2xx), attempts, next due, last error.
  notify_url text,
  notified_at timestamptz,
  notify_attempts integer not null default 0,
  notify_after timestamptz not null default now(),
  notify_error text
);

-- Events still to send, by due time: what a sender reads.
create index leasehold_batch_events_unsent on leasehold_batch_events (send_after) where sent_at is null;
-- Webhooks still to deliver, by due time.
create index leasehold_batch_events_unnotified on leasehold_batch_events (notify_after)
  where notify_url is not null and notified_at is null;
-- A batch's events (the run that ended it sends them at once; retention's cascade).
create index leasehold_batch_events_batch on leasehold_batch_events (batch_id);

-- Sent and delivered events keep to the cleanup of a hot small table (docs/design.md, "Hot small tables").
alter table leasehold_batch_events set (fillfactor = 90, autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 0);
