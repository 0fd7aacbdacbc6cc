-- Concurrency pools and early completion (docs/design.md, "Concurrency pools" and "End"; issue 39).
--
-- A pool caps the items in flight across every run of every batch that names it, fleet-wide: one
-- row per pool with its limits, changeable while batches run (PUT /pools/{name}), and one lease
-- row per (pool, run, key) counting the permits that run holds. A lease lapses at its expires_at
-- (database clock: the run's staleMs after its last take or renewal), so a run that dies returns
-- its permits without anyone cleaning up. Takers lock the pool's row, so two runs never share a
-- permit.
--
-- Additive only (docs/development.md, "Migrations"): new tables and nullable columns, none
-- rewrites or scans an existing table. Code before this migration never reads them.
create table if not exists leasehold_pools (
  name text primary key,
  -- Most permits out at once across all keys.
  total integer not null check (total >= 1),
  -- Most permits out at once per key; null: no per-key cap (one limit for the pool).
  per_key integer check (per_key >= 1),
  updated_at timestamptz not null default now()
);

create table if not exists leasehold_pool_leases (
  pool text not null,
  run_id uuid not null,
  key text not null,
  -- Permits the run holds for the key (items it runs, or is about to start).
  held integer not null check (held >= 1),
  -- After this (database clock) the permits count for nobody: the run is dead or lost.
  expires_at timestamptz not null,
  primary key (pool, run_id, key)
);
-- Fillfactor below 100: every take rewrites its rows; a HOT update stays on the page.
alter table leasehold_pool_leases set (fillfactor = 70);
alter table leasehold_pools set (fillfactor = 70);

-- The pool a start named (it wins over the job's); null: the job's, or none.
alter table leasehold_batches add column if not exists pool text;
-- Early completion: the batch ends `succeeded` once this many of its items are done, the rest
-- never run. Null: every item runs.
alter table leasehold_batches add column if not exists min_succeeded integer;
-- Done items the batch's runs reported (early-completion batches only): when it reaches
-- min_succeeded the done items are counted exactly. A cheap trigger that may run high (a move
-- sent again after a lost answer counts twice), never the judge. A constant default: no rewrite.
alter table leasehold_batches add column if not exists done_seen integer not null default 0;
