-- Operators steer a batch while it runs (docs/design.md, "Pause, deadline and startBy"; issue 39):
-- pause and resume one batch, a deadline for a whole batch, and startBy for deferred firings.
--
-- Additive only (docs/development.md, "Migrations"): nullable columns (no rewrite), a partial
-- index over the few open batches with a deadline, and a looser check on target. Code of the
-- release before stops on this schema version (SUPPORTED_SCHEMA) before it reads a target of 0.

-- When the batch was paused (database clock); null: not paused. A paused batch has target 0, so
-- every statement that looks for batches below their target (the takeover, the scheduler's
-- dispatch, the tenants' wanting count and its partial indexes) passes it by; its runs learn of
-- the pause from their next beat and hand off with no attempt used.
alter table leasehold_batches add column if not exists paused_at timestamptz;

-- target 0 means paused; a batch that runs still wants at least one run (set by the statements).
-- Not valid: existing rows are not scanned (the old check, target >= 1, held for them).
alter table leasehold_batches drop constraint if exists leasehold_batches_target_check;
alter table leasehold_batches add constraint leasehold_batches_target_check check (target >= 0) not valid;

-- A batch not finished by this instant (database clock) ends failed with reason 'deadline'.
alter table leasehold_batches add column if not exists deadline_at timestamptz;

-- The open batches with a deadline, soonest first: the scheduler's deadline service reads the
-- expired ones from here, never scanning the batches.
create index if not exists leasehold_batches_deadline on leasehold_batches (deadline_at)
  where status = 'open' and deadline_at is not null;

-- A deferred trigger firing not started by this instant is dropped with a reason; null: none.
alter table leasehold_deferred_starts add column if not exists start_by timestamptz;
