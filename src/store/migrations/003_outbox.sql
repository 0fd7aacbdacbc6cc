-- Per-tenant outbox delivered by the `outbox-delivery` unit job (src/units/outbox-delivery.ts).

create table leasehold_outbox (
  id bigserial primary key,
  tenant text not null,
  -- The unit (tenant, shard) whose owner delivers the message: hash of key mod the shard count.
  shard integer not null check (shard >= 0),
  key text not null,
  payload jsonb not null,
  created_at timestamptz not null default now(),
  -- Delivery attempts made (failed ones, plus the one that succeeded).
  attempts integer not null default 0,
  -- Due from this time (database clock); pushed back by backoff with jitter after a failure.
  next_attempt_at timestamptz not null default now(),
  -- Set once, by a statement fenced on the deliverer still owning the unit.
  delivered_at timestamptz,
  last_error text
);

-- Undelivered messages of a unit in due order: what an owner reads each interval.
create index leasehold_outbox_pending on leasehold_outbox (tenant, shard, next_attempt_at)
  where delivered_at is null;
