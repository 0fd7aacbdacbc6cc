-- A firing deferred at maxOpen keeps its caller's W3C trace context (docs/design.md, "Traces";
-- issue 41), so the batch the scheduler starts for it later continues the sender's trace as a
-- firing started at once does: the event's `detail.traceparent`, or the Batch Finished event's
-- a chained start follows.
--
-- Additive only (docs/development.md, "Migrations"): one nullable column, no rewrite, no default.
-- Written once by the deferral's insert and read by the scheduler's retry.
alter table leasehold_deferred_starts add column if not exists trace_context text;
