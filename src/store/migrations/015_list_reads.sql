-- Reads whose cost is bounded by their page, whatever the planner estimates (docs/design.md,
-- "The database in production"): a finished batch keeps its item counts on its row, so a list
-- of batches reads one row per batch (counting a finished batch's items read all of them, for
-- every batch of every page), and the list has an index for each filter it takes, in its order.

-- Item counts by state ({"pending": n, "running": n, "done": n, "failed": n}), written by the
-- statement that finishes the batch (nothing pending or running: no move can change them after);
-- null otherwise (open, cancelled, given up, ended by its tolerance, or finished before this
-- migration): those are counted from their items. A redrive clears it.
alter table leasehold_batches add column final_counts jsonb;

-- Batches newest first: all of them, one tenant's, one status's (one tenant's of one status has
-- leasehold_batches_tenant_status).
create index leasehold_batches_created on leasehold_batches (created_at desc, id);
create index leasehold_batches_tenant_created on leasehold_batches (tenant, created_at desc, id);
create index leasehold_batches_status_created on leasehold_batches (status, created_at desc, id);

-- Open batches oldest first: what the scheduler's dispatch reads, never the finished ones.
create index leasehold_batches_open_created on leasehold_batches (created_at) where status = 'open';
