-- Tokens lent for longer (docs/design.md, "Rate limits"): at a rate far above what one run can
-- start in 50 ms, a take may grant a run a block it holds for longer (the lending time, 500 ms) instead of 50 ms, so the
-- run asks a few times a second, not once per claim. Such blocks count against the bucket's
-- burst until they lapse: the tokens a bucket holds plus the tokens it lent in this epoch and the
-- one before (epochs of the lending time, by the database clock) stay at most its burst, so a
-- window still sees at most `perSecond + burst` of them, and lending stops at half the burst.
--
-- Additive only (docs/development.md, "Migrations"): new columns with constant defaults, which
-- rewrite no table. Code before this migration never reads them and lends nothing.
alter table leasehold_rate_buckets
  -- The lending epoch (database clock in ms / lending time) that lent_now counts.
  add column if not exists lent_epoch bigint not null default 0,
  -- Tokens lent in epoch lent_epoch, and in the epoch before it.
  add column if not exists lent_now double precision not null default 0,
  add column if not exists lent_before double precision not null default 0,
  -- How long the run may hold the tokens the last take granted, ms (the take's answer).
  add column if not exists hold_ms integer not null default 0;
