-- Item heartbeats and checkpoints (docs/design.md, "Item heartbeats and checkpoints"): a running
-- item's work may beat on its own row (keeping its claim alive and reporting its progress) and
-- store a small checkpoint that its next attempt receives. A run recovers its own items whose
-- heartbeat is older than the job's `itemStaleMs` (database clock), as a takeover recovers a gone
-- run's items.
--
-- Additive only (docs/development.md, "Migrations"): nullable columns without a default, none
-- rewrites or scans its table. Code before this migration never reads them.
-- The last heartbeat (or checkpoint) of the item's work, database clock; null: none yet.
alter table leasehold_items add column if not exists heartbeat_at timestamptz;
-- The progress the last heartbeat reported (JSON, at most 8 KiB); null: none reported.
alter table leasehold_items add column if not exists progress jsonb;
-- The state the item's work last stored with `checkpoint` (JSON, at most 64 KiB), handed to its
-- next attempt; null: none.
alter table leasehold_items add column if not exists checkpoint jsonb;
