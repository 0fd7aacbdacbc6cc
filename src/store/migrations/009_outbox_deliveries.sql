-- Delivery state per endpoint for the outbox (src/units/outbox-delivery.ts). Until now a message
-- counted as delivered only once every endpoint accepted it, so each retry for a failing endpoint
-- re-posted it to the endpoints that had already taken it. Now the owner of a message's unit
-- assigns it to the unit's endpoints (one delivery each), and each delivery is attempted,
-- retried with its own backoff, and marked on its own.

-- When the owner of the message's unit assigned it to the unit's endpoints (one row each in
-- leasehold_outbox_deliveries); null until then. Messages are enqueued unassigned.
alter table leasehold_outbox add column assigned_at timestamptz;

-- Messages every endpoint took before this migration: nothing left to assign. Messages still
-- undelivered stay unassigned: the owner of their unit assigns them afresh to its endpoints
-- (their per-message attempts and backoff are not carried over; they are due at once).
update leasehold_outbox set assigned_at = delivered_at where delivered_at is not null;

drop index leasehold_outbox_pending;
alter table leasehold_outbox
  drop column attempts,
  drop column next_attempt_at,
  drop column delivered_at,
  drop column last_error;

-- Unassigned messages of a unit, oldest first: what its owner assigns each interval.
create index leasehold_outbox_unassigned on leasehold_outbox (tenant, shard, id) where assigned_at is null;

-- One message to one endpoint.
create table leasehold_outbox_deliveries (
  message_id bigint not null references leasehold_outbox (id) on delete cascade,
  -- The endpoint URL exactly as the unit's config lists it.
  endpoint text not null,
  tenant text not null,
  -- The unit whose owner delivers it (the message's shard; moved with it when the shard count shrinks).
  shard integer not null check (shard >= 0),
  -- Attempts made (failed ones, plus the one that succeeded).
  attempts integer not null default 0,
  -- Due from this time (database clock); pushed back by backoff with jitter after a failure.
  next_attempt_at timestamptz not null default now(),
  -- Set once, by a statement fenced on the deliverer still owning the unit.
  delivered_at timestamptz,
  last_error text,
  primary key (message_id, endpoint)
);

-- Pending deliveries of a unit per endpoint in due order: what an owner reads each interval;
-- also the range a shrink of the shard count moves, and the backlog per endpoint.
create index leasehold_outbox_deliveries_pending on leasehold_outbox_deliveries (tenant, shard, endpoint, next_attempt_at, message_id)
  where delivered_at is null;

-- How each endpoint of each unit fares: written once per endpoint per run by the unit's owner.
create table leasehold_outbox_endpoints (
  tenant text not null,
  shard integer not null check (shard >= 0),
  endpoint text not null,
  -- Failed attempts since the last accepted one.
  failures integer not null default 0,
  last_error text,
  last_error_at timestamptz,
  last_delivered_at timestamptz,
  primary key (tenant, shard, endpoint)
);
