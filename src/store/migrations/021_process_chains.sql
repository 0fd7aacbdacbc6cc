-- Process chains (docs/design.md, "Process chains"): a worker that reaches its deadline invokes
-- its replacement (a fleet process) or a continuation (a batch process), and leaves; the new
-- process has a new id. Each process row says which process it replaced and which chain it
-- belongs to, so the fleet can be read as chains that go on rather than processes that vanish.
--
-- Additive only (docs/development.md, "Migrations"): nullable or defaulted columns, no rewrite.
-- Rows of code before this migration leave them unset: the reads take such a row as the first
-- of its own chain.
alter table leasehold_processes
  -- The process whose deadline invocation started this one; null when the scheduler, a
  -- dispatch or a start invoked it (the first of its chain).
  add column replaces uuid,
  -- The chain: the id of its first process.
  add column chain_id uuid,
  -- When the chain's first process started (database clock).
  add column chain_started_at timestamptz,
  -- Processes before this one in its chain: how many times the chain's process was replaced.
  add column replacements integer not null default 0;
