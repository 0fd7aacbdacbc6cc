-- Tenant fairness (docs/design.md, "Tenant fairness"): batch priorities, per-tenant counts of
-- open and running batches kept by triggers, per-tenant limits, and the indexes that let a
-- worker choose its next batch without reading every open batch.

-- 0 (lowest) to 9 (highest); orders batches within their tenant only.
alter table leasehold_batches add column priority smallint not null default 5
  check (priority between 0 and 9);

-- One row per tenant that ever had a batch (or a limit set through the API).
create table leasehold_tenants (
  tenant text primary key,
  -- Open batches, and those of them a run owns (a stale owner counts until taken over). Kept
  -- by the triggers below; open − running batches are waiting for a worker.
  open integer not null default 0,
  running integer not null default 0,
  -- Most batches of this tenant that run at once; null: the runner's default (maxRunning).
  max_running integer check (max_running >= 0),
  -- When the tenant's running count last changed (database clock): among tenants with as many
  -- runs, the one that changed longest ago is chosen first (round robin).
  served_at timestamptz
);

-- Tenants with waiting batches, in the order a worker chooses them.
create index leasehold_tenants_waiting on leasehold_tenants (running, served_at nulls first, tenant)
  where open > running;

-- A tenant's waiting batches (open, no owner) in the order its turn takes them.
create index leasehold_batches_waiting on leasehold_batches (tenant, priority desc, created_at, id)
  where status = 'open' and owner_run is null;

-- Adds the change one batch row makes to its tenant's counts. A change of the running count
-- stamps served_at with the database clock.
-- Both functions keep the search path of the migration, so they find this schema's tables
-- whatever the search path of the statement that fires them.
create function leasehold_tenant_count(t text, d_open integer, d_running integer) returns void
language plpgsql set search_path from current as $$
begin
  if d_open = 0 and d_running = 0 then
    return;
  end if;
  insert into leasehold_tenants as x (tenant, open, running, served_at)
    values (t, d_open, d_running, case when d_running <> 0 then clock_timestamp() end)
  on conflict (tenant) do update
    set open = x.open + d_open, running = x.running + d_running,
        served_at = case when d_running <> 0 then clock_timestamp() else x.served_at end;
end $$;

create function leasehold_batches_count() returns trigger
language plpgsql set search_path from current as $$
declare
  old_open integer := 0;
  old_running integer := 0;
  new_open integer := 0;
  new_running integer := 0;
begin
  if tg_op <> 'INSERT' and old.status = 'open' then
    old_open := 1;
    old_running := (old.owner_run is not null)::integer;
  end if;
  if tg_op <> 'DELETE' and new.status = 'open' then
    new_open := 1;
    new_running := (new.owner_run is not null)::integer;
  end if;
  if tg_op = 'DELETE' then
    perform leasehold_tenant_count(old.tenant, new_open - old_open, new_running - old_running);
  else
    perform leasehold_tenant_count(new.tenant, new_open - old_open, new_running - old_running);
  end if;
  return null;
end $$;

-- A start's insert is counted when it commits: the tenant's row is locked only for that moment,
-- not for the whole start (which writes every item), so runs of the tenant never wait for it.
create constraint trigger leasehold_batches_count_insert after insert on leasehold_batches
  deferrable initially deferred for each row execute function leasehold_batches_count();
-- Takeovers, handoffs, finishes, cancels and redrives change the counts at once.
create trigger leasehold_batches_count_update after update of status, owner_run on leasehold_batches
  for each row
  when (old.status is distinct from new.status or (old.owner_run is null) <> (new.owner_run is null))
  execute function leasehold_batches_count();
create trigger leasehold_batches_count_delete after delete on leasehold_batches
  for each row execute function leasehold_batches_count();

-- Counts of the batches that exist already.
insert into leasehold_tenants (tenant, open, running)
  select tenant, count(*) filter (where status = 'open'),
    count(*) filter (where status = 'open' and owner_run is not null)
  from leasehold_batches group by tenant;
