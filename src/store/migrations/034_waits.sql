-- An item that waits for the outside world (docs/design.md, "Waiting items: callbacks and
-- sleeps"; issue 40): `ctx.waitForCallback` and `ctx.sleep` park an item in the state `waiting`,
-- holding no run slot and no Lambda time, until a completion, a heartbeat's lapse, its timeout or
-- its wake time makes it due again.
--
-- Additive only (docs/development.md, "Migrations"): a looser check on the item state (not
-- valid: no row is scanned; the old check held for every row), one nullable column without a
-- default (no rewrite), and a new table with its indexes, so no index is built over the items.
-- Code of the release before stops on this schema version (SUPPORTED_SCHEMA) before it meets a
-- waiting item.

alter table leasehold_items drop constraint if exists leasehold_items_state_check;
alter table leasehold_items add constraint leasehold_items_state_check
  check (state in ('pending', 'running', 'waiting', 'done', 'failed')) not valid;

-- How the item's last wait ended ({ id, kind, attempt, status, result?, error?, reason? }), read by
-- the claim and handed to the next attempt as `ctx.callback`; null: none. Written by the wake.
alter table leasehold_items add column if not exists woke jsonb;

-- One row per wait an item's attempt registered and that has not woken yet: the index of waiting
-- items (the items table gets none). Inserted by the attempt (fenced on its run's lease while the
-- item runs under it), deleted by the wake (a completion, the expiry pass, the run's own wake of an
-- answer that came before its move). A row whose item no longer waits for it (the attempt failed
-- after it registered, its run died) is deleted by the expiry pass when its wake_at comes.
create table if not exists leasehold_waits (
  batch_id uuid not null references leasehold_batches (id) on delete cascade,
  key text not null,
  -- The wait's id (random): the token names it, so a token of an earlier wait matches nothing.
  id uuid not null,
  -- callback | sleep
  kind text not null check (kind in ('callback', 'sleep')),
  -- The attempt that registered it (the item's attempts while it ran).
  attempt integer not null,
  -- When the wait ends by time: its timeout or wake time, brought forward by a heartbeat timeout;
  -- now() once answered (database clock).
  wake_at timestamptz not null,
  -- The callback's overall timeout (database clock); null for a sleep.
  timeout_at timestamptz,
  heartbeat_timeout_ms integer,
  payload jsonb,
  -- The completion ({ status: 'succeeded', result } or { status: 'failed', error }); null: none yet.
  answer jsonb,
  created_at timestamptz not null default now(),
  primary key (batch_id, key)
);

-- The expiry pass: waits due by time, soonest first, across every batch; with the whole key, so
-- the pass walks it one entry after the other (each step a row comparison on the index).
create index if not exists leasehold_waits_wake on leasehold_waits (wake_at, batch_id, key);

-- The key callback tokens are signed with (HMAC-SHA-256), made once here from the server's strong
-- random source (gen_random_uuid: 122 random bits each), read by the workers that sign and the API
-- that checks. Whoever can read this table can write the items too: it adds no new trust.
create table if not exists leasehold_callback_keys (
  id integer primary key check (id = 1),
  secret text not null
);
insert into leasehold_callback_keys (id, secret)
  values (1, replace(gen_random_uuid()::text || gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
  on conflict (id) do nothing;
