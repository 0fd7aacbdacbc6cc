-- The fleet follows its knobs (docs/design.md, "Process membership and unit ownership").

alter table leasehold_processes
  -- Held only by the instance that created the row (a random value of its own): a heartbeat,
  -- claim, release or read of owned units with another token changes and sees nothing, so a
  -- second instance with a reused id never renews the row or acts on its units.
  add column token uuid not null default gen_random_uuid(),
  -- `fleet`: a worker counted against the desired count that owns units; `batch`: a worker sent
  -- for a batch, which owns no unit and is not counted.
  add column role text not null default 'fleet' check (role in ('fleet', 'batch')),
  -- Set by the scheduler on the surplus of live fleet processes when the desired count is
  -- lowered: the process stops claiming, releases its units, hands off its runs and leaves.
  add column retiring boolean not null default false,
  -- Units and weight the process owned at its last heartbeat (written by the heartbeat itself,
  -- no extra write): the balance of the fleet is read from the process rows, never the units.
  add column units integer not null default 0,
  add column weight bigint not null default 0;

-- Units heavier than 1, by weight: the fair share leaves out units heavier than itself (each is
-- one process's whole share) by reading the few heaviest through this index. Units of weight 1,
-- the common case, are not in it, so their claims and releases do not maintain it.
create index leasehold_units_heavy on leasehold_units (weight) where weight > 1;

-- An invocation counts as coming until its worker's first heartbeat confirms it (the worker
-- deletes the row) or until this time (the confirmation window, database clock): a dropped
-- invocation holds back the desired count for that window only.
alter table leasehold_invocations
  add column confirm_by timestamptz not null default now() + interval '30 seconds';
