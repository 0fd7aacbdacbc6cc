-- Flow control (docs/design.md, "Item timeouts", "Retry-After"): a start may set its items'
-- timeout, which wins over the job's own `timeoutMs` (null: the job's timeout, or none); an item
-- counts the waits a downstream asked for (Retry-After) that used no attempt.
--
-- Additive only (docs/development.md, "Migrations"): a nullable column and a column with a
-- constant default, neither rewrites or scans its table; the start checks the timeout's range
-- (1 ms up to what one worker invocation can give an item).
alter table leasehold_batches add column if not exists timeout_ms integer;
alter table leasehold_items add column if not exists waits integer not null default 0;
