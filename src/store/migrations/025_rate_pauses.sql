-- A rate-limit key paused fleet-wide (docs/design.md, "Rate limits"): an item of the key was told to
-- wait (RetryAfterError, a Lambda throttle, an HTTP 429/503 with Retry-After), so the key's bucket
-- grants no token before this time (database clock), to any run of any process. Null: not paused.
--
-- Additive only (docs/development.md, "Migrations"): a nullable column, no rewrite or scan of an
-- existing table. Code before this migration never reads it.
alter table leasehold_rate_buckets add column if not exists paused_until timestamptz;
