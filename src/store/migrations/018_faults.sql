-- Poison units (docs/design.md, "Crashes and quarantine"): a unit whose job kills its process
-- (exhausts memory, exits, hangs the event loop) would otherwise crash every process that claims
-- it, for ever. A unit's owner marks each run of its job (running_since) and clears the mark when
-- the run ends; a claim, sweep or takeover that frees the unit of an expired owner while the
-- mark is set counts a crash. After LEASEHOLD_UNIT_MAX_CRASHES crashes in a row the unit is
-- quarantined: unowned and not claimed until quarantined_until (database clock), a backoff that
-- doubles per quarantine. A clean end of a run sets crashes back to 0; a registration or
-- POST /tenants/{t}/units/{shard}/release lifts the quarantine.
--
-- Additive only (docs/development.md, "Migrations"): nullable or defaulted columns (no table
-- rewrite, no long lock) and new indexes; leasehold_units_unowned stays for code of the release
-- before, which claims through it and knows nothing of quarantine.
alter table leasehold_units
  -- When the owner's current run of the unit job started; null while no run is in flight.
  add column running_since timestamptz,
  -- Crashes in a row: runs during which the owner died (or its lease lapsed).
  add column crashes integer not null default 0,
  -- Quarantines so far: the next one lasts quarantine × 2^quarantines, at most the cap.
  add column quarantines integer not null default 0,
  -- Quarantined (never claimed) until then; null when claimable.
  add column quarantined_until timestamptz;

-- Claimable units, in position order: unowned, with weight, not quarantined.
create index leasehold_units_claimable on leasehold_units (pos)
  where owner is null and weight > 0 and quarantined_until is null;
-- Quarantined units, by the end of their quarantine: what the scheduler lifts.
create index leasehold_units_quarantined on leasehold_units (quarantined_until) where quarantined_until is not null;

-- Late and repeated worker events (docs/design.md, "Late and repeated worker events"): the
-- first worker that starts with an invocation id claims it (claimed = true, still counted as
-- coming until its first heartbeat deletes it), so a second delivery of the same event, or
-- one delivered after its confirmation window, finds it claimed or gone and returns at once.
alter table leasehold_invocations add column claimed boolean not null default false;
