-- Fan-out: many runs per batch (docs/design.md, "Fan-out"). Each run of a batch is a lease of
-- its own, a row of leasehold_runs: its id is the fencing token every move of the run checks,
-- its beat is its own, and a stale run is taken over alone. Cancel, finish and the ends a run
-- decides delete every run row of the batch first, so a run whose row exists works an open
-- batch; a move locks its run's row (key share), so a delete waits for the moves in flight and
-- every later move changes nothing.
--
-- The batch keeps how many runs it may have (max_concurrency, set at start and by PATCH), how
-- many it wants now (target: min(max_concurrency, one run per 100 items), lowered when a run
-- leaves for want of work) and how many it has (live_runs, kept by the statements that insert
-- and delete run rows). Tenants count runs, not batches, and how many of their open batches are
-- below target (wanting): the takeover serves the tenant running the fewest runs first.
--
-- owner_run, owner_process and beat_at of leasehold_batches are no longer written (a batch has
-- no one owner); they stay for code of the release before this one during a deploy, and are
-- dropped by a later migration.

alter table leasehold_batches add column max_concurrency integer not null default 1
  check (max_concurrency between 1 and 10000);
alter table leasehold_batches add column target integer not null default 1 check (target >= 1);
alter table leasehold_batches add column live_runs integer not null default 0 check (live_runs >= 0);

create table leasehold_runs (
  id uuid primary key,
  batch_id uuid not null references leasehold_batches (id) on delete cascade,
  process uuid not null,
  started_at timestamptz not null default now(),
  -- The run's last beat (database clock); older than staleMs: it may be taken over.
  beat_at timestamptz not null default now(),
  -- Items this run stored as done or failed (its speed: settled / (now − started_at)).
  settled bigint not null default 0
);

-- A batch's runs in the order they joined (the newest are the surplus when max_concurrency is
-- lowered). beat_at has no index: the table holds live runs only (a few per batch, rows deleted
-- when a run ends), so a look-up of stale runs reads a few pages, and beats stay HOT updates.
create index leasehold_runs_batch on leasehold_runs (batch_id, started_at, id);

-- Beaten every few seconds by every run: room on each page for HOT updates, and vacuum after a
-- fixed number of dead versions rather than a fraction of a small table.
alter table leasehold_runs set (
  fillfactor = 50,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
  autovacuum_vacuum_cost_delay = 0
);

alter table leasehold_tenants add column wanting integer not null default 0;

-- Open batches of a tenant below their target, in the order the tenant's turn takes them.
create index leasehold_batches_wanting on leasehold_batches (tenant, priority desc, created_at, id)
  where status = 'open' and live_runs < target;
-- Tenants with a batch below its target, in the order a worker chooses them.
create index leasehold_tenants_wanting on leasehold_tenants (running, served_at nulls first, tenant)
  where wanting > 0;
drop index leasehold_batches_waiting;
drop index leasehold_tenants_waiting;

-- A tenant's counts change by (d_open, d_running, d_wanting); a change of its running count
-- stamps served_at with the database clock.
create function leasehold_tenant_count(t text, d_open integer, d_running integer, d_wanting integer) returns void
language plpgsql set search_path from current as $$
begin
  if d_open = 0 and d_running = 0 and d_wanting = 0 then
    return;
  end if;
  insert into leasehold_tenants as x (tenant, open, running, wanting, served_at)
    values (t, d_open, d_running, d_wanting, case when d_running <> 0 then clock_timestamp() end)
  on conflict (tenant) do update
    set open = x.open + d_open, running = x.running + d_running, wanting = x.wanting + d_wanting,
        served_at = case when d_running <> 0 then clock_timestamp() else x.served_at end;
end $$;

-- An open batch counts 1 open, its live runs running, and 1 wanting while below its target.
create or replace function leasehold_batches_count() returns trigger
language plpgsql set search_path from current as $$
declare
  o_open integer := 0;
  o_running integer := 0;
  o_wanting integer := 0;
  n_open integer := 0;
  n_running integer := 0;
  n_wanting integer := 0;
begin
  if tg_op <> 'INSERT' and old.status = 'open' then
    o_open := 1;
    o_running := old.live_runs;
    o_wanting := (old.live_runs < old.target)::integer;
  end if;
  if tg_op <> 'DELETE' and new.status = 'open' then
    n_open := 1;
    n_running := new.live_runs;
    n_wanting := (new.live_runs < new.target)::integer;
  end if;
  perform leasehold_tenant_count(case when tg_op = 'DELETE' then old.tenant else new.tenant end,
    n_open - o_open, n_running - o_running, n_wanting - o_wanting);
  return null;
end $$;

drop trigger leasehold_batches_count_update on leasehold_batches;
create trigger leasehold_batches_count_update after update of status, live_runs, target on leasehold_batches
  for each row
  when (old.status is distinct from new.status or old.live_runs <> new.live_runs or old.target <> new.target)
  execute function leasehold_batches_count();

drop function leasehold_tenant_count(text, integer, integer);

-- Open batches a run of the release before owns become batches with one run of that id.
insert into leasehold_runs (id, batch_id, process, beat_at)
  select owner_run, id, owner_process, coalesce(beat_at, now()) from leasehold_batches
  where status = 'open' and owner_run is not null and owner_process is not null;
update leasehold_batches set live_runs = 1
  where status = 'open' and owner_run is not null and owner_process is not null;

-- Counts recomputed for the new meaning of running and wanting.
update leasehold_tenants t set open = 0, running = 0, wanting = 0;
update leasehold_tenants t set open = c.open, running = c.running, wanting = c.wanting
  from (select tenant, count(*)::integer as open, sum(live_runs)::integer as running,
          count(*) filter (where live_runs < target)::integer as wanting
        from leasehold_batches where status = 'open' group by tenant) c
  where t.tenant = c.tenant;

-- A worker invoked for a batch counts as coming, like one invoked for the fleet, until its first
-- heartbeat or its confirmation window: the worker limit (LEASEHOLD_MAX_WORKERS) caps live
-- processes and invocations on their way together. batch_id null: a fleet invocation.
alter table leasehold_invocations add column batch_id uuid;

-- A deferred trigger firing keeps the maxConcurrency its event asked for (null: the default).
alter table leasehold_deferred_starts add column max_concurrency integer;
