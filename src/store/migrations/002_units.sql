-- Process membership and unit ownership (docs/design.md, "Process membership and unit ownership").

create table leasehold_processes (
  id uuid primary key,
  hostname text not null,
  version text not null,
  started_at timestamptz not null default now(),
  heartbeat_at timestamptz not null default now(),
  -- Live while expires_at > now() (database clock); set to now() + ttl by every heartbeat.
  expires_at timestamptz not null
);
create index leasehold_processes_expires on leasehold_processes (expires_at);

-- A (tenant, shard) slice of recurring work. weight 0 means nothing to do: never claimed.
create table leasehold_units (
  tenant text not null,
  shard integer not null check (shard >= 0),
  job text not null,
  weight integer not null default 1 check (weight >= 0),
  -- Unit configuration for its job (for example the tenant's webhook endpoints).
  config jsonb not null default '{}',
  -- Random position: claimers start from a random point so concurrent ones rarely collide.
  pos double precision not null default random(),
  -- Owning process (no foreign key: the sweep deletes processes and frees units in one statement).
  owner uuid,
  claimed_at timestamptz,
  primary key (tenant, shard)
);
-- Unowned claimable units, in position order.
create index leasehold_units_unowned on leasehold_units (pos) where owner is null and weight > 0;
-- Units per owner: a process's own units, and units of expired processes.
create index leasehold_units_owner on leasehold_units (owner, pos) where owner is not null;

-- Total claimable weight, kept by trigger so the fair share never needs a scan of the units.
create table leasehold_unit_totals (
  id boolean primary key default true check (id),
  weight bigint not null default 0,
  units bigint not null default 0
);
insert into leasehold_unit_totals (id) values (true);

-- Statement-level triggers with transition tables: one write of the totals row per statement
-- (a per-row trigger would rewrite that one row once per unit, which a bulk registration
-- pays quadratically). Claims and releases change no weight and write nothing here.
create function leasehold_unit_totals_add() returns trigger language plpgsql as $$
begin
  update leasehold_unit_totals t set weight = t.weight + d.weight, units = t.units + d.units
  from (select coalesce(sum(weight), 0) as weight, count(*) as units from new_units) d
  where d.units > 0;
  return null;
end $$;

create function leasehold_unit_totals_remove() returns trigger language plpgsql as $$
begin
  update leasehold_unit_totals t set weight = t.weight - d.weight, units = t.units - d.units
  from (select coalesce(sum(weight), 0) as weight, count(*) as units from old_units) d
  where d.units > 0;
  return null;
end $$;

create function leasehold_unit_totals_change() returns trigger language plpgsql as $$
begin
  update leasehold_unit_totals t set weight = t.weight + d.delta
  from (select (select coalesce(sum(weight), 0) from new_units) - (select coalesce(sum(weight), 0) from old_units) as delta) d
  where d.delta <> 0;
  return null;
end $$;

create trigger leasehold_unit_totals_insert after insert on leasehold_units
  referencing new table as new_units for each statement execute function leasehold_unit_totals_add();
create trigger leasehold_unit_totals_delete after delete on leasehold_units
  referencing old table as old_units for each statement execute function leasehold_unit_totals_remove();
create trigger leasehold_unit_totals_update after update on leasehold_units
  referencing old table as old_units new table as new_units for each statement execute function leasehold_unit_totals_change();

-- Desired count of live processes and the scheduler's invocations not yet live.
create table leasehold_settings (
  key text primary key,
  value jsonb not null
);
insert into leasehold_settings (key, value) values ('desired', '3');

create table leasehold_invocations (
  id uuid primary key,
  invoked_at timestamptz not null default now()
);
