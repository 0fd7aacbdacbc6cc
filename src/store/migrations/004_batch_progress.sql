-- Runs that made no item progress, and why a batch ended (docs/design.md, "Batches").

-- Runs in a row (takeovers included) that stored no item move; a run's first landed move sets
-- it back to 0. A batch whose runs keep failing before they store anything ends `failed` once
-- this passes the runner's limit, instead of being taken over for ever.
alter table leasehold_batches add column stalled_runs integer not null default 0;

-- Why the batch ended when that is not told by its items (for example it was given up).
alter table leasehold_batches add column reason text;
