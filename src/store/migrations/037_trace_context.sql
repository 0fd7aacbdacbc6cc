-- Traces across start, runs and items (docs/design.md, "Traces"; issue 41): the W3C trace context
-- (`traceparent`, with `tracestate` after a space when there is one) of the span that created the
-- batch, so every run of the batch, in any process, continues the start's trace.
--
-- Additive only (docs/development.md, "Migrations"): one nullable column, no rewrite, no default.
-- Written once by the start's insert and only read afterwards (a takeover's `returning b.*`).
alter table leasehold_batches add column if not exists trace_context text;
