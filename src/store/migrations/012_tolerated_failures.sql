-- Failure tolerance (docs/design.md, "Batches": "End"): a start may tolerate some failed items,
-- as a count or as a percent of its items. Neither set (the default): every item runs and the
-- batch ends `failed` when any item failed. Set: the batch ends `failed` at once when more items
-- have failed than allowed, and `succeeded` otherwise, its failed items listed.

-- How many failed items the batch tolerates; null: not given as a count.
alter table leasehold_batches add column tolerated_count integer
  check (tolerated_count >= 0);
-- What percent of its items may fail, 0 to 100; null: not given as a percent.
alter table leasehold_batches add column tolerated_percent numeric
  check (tolerated_percent >= 0 and tolerated_percent <= 100);
alter table leasehold_batches add constraint leasehold_batches_tolerance_one
  check (tolerated_count is null or tolerated_percent is null);
-- Failed items allowed: the count, or floor(percent × total / 100); null when no tolerance was
-- given. Follows `total` (set while the batch starts).
alter table leasehold_batches add column allowed_failures integer generated always as (
  case when tolerated_count is not null then tolerated_count
       when tolerated_percent is not null then floor(tolerated_percent * total / 100)::int end
) stored;

-- A trigger event deferred because its datasource was full keeps the tolerance it asked for
-- (`{ "count": n }` or `{ "percent": p }`; null: none), given to the batch when it starts.
alter table leasehold_deferred_starts add column tolerated_failures jsonb;
