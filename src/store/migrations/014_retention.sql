-- Retention (docs/design.md, "Retention"): the scheduler deletes batches finished longer ago than
-- LEASEHOLD_RETENTION_DAYS, oldest first, found through this index — never a scan of the batch
-- table, which holds months of finished rows. Open batches are not in it, so beats, takeovers and
-- moves never maintain it; a finish adds one entry.
--
-- A plain CREATE INDEX (migrations run in one transaction, where CONCURRENTLY is not allowed)
-- takes a SHARE lock on leasehold_batches: beats, takeovers and finishes wait while it is built,
-- about a second per million batch rows. Heartbeats (leasehold_processes) and item moves
-- (leasehold_items; their share lock of the batch row is a row lock) do not wait.
create index leasehold_batches_finished on leasehold_batches (finished_at) where status <> 'open';
