-- Items from S3, results to S3 (docs/design.md, "Sources and results"). A batch may name a
-- source instead of items: an S3 prefix (one item per object) or one object (JSON Lines or CSV,
-- one item per line or row). Its runs read the source in pages; each page's items are inserted
-- in the statement that stores the page's cursor, fenced on the reading run's lease and on the
-- number of pages stored so far, so a takeover resumes after the last stored page and no page is
-- read into items twice. While `reading` the batch never finishes; the page that reaches the end
-- clears it, and the batch's total is fixed from then on.
--
-- A batch may also name where its results go: when it finishes, JSON Lines parts and a manifest
-- are written there, and the manifest's location is kept on the row.
--
-- Additive only (docs/development.md, "Migrations"): nullable or defaulted columns and one
-- partial index. Code of the release before stops on this schema version (SUPPORTED_SCHEMA), so
-- no old run finishes a batch that is still reading.
alter table leasehold_batches
  -- The source as started: {"s3": {"bucket", "prefix"}} or {"s3": {"bucket", "key", "format",
  -- "keyColumn"?, "size", "etag"}}; null for items given at start.
  add column source jsonb,
  -- Where reading goes on: {"token"} of ListObjectsV2, or {"offset", "line", "row", "columns"?}
  -- of an object (the byte after the last complete line stored). Null before the first page.
  add column source_cursor jsonb,
  -- Pages stored so far: the compare-and-set of every page statement.
  add column source_pages integer not null default 0,
  -- The run that reads the source now (one at a time); another run reads once its row is gone.
  add column reader_run uuid,
  -- The source has not been read to its end: the batch does not finish.
  add column reading boolean not null default false,
  -- The first line (or row) of the object that could not be read into an item, when reading failed.
  add column source_error_line bigint,
  -- Where results go: {"s3": {"bucket", "prefix"}}; null: none are written.
  add column results jsonb,
  -- When a writer last began writing the results (database clock): another writer waits a while.
  add column results_started_at timestamptz,
  -- The manifest's location once written (s3://bucket/key), last of all.
  add column results_manifest text,
  -- Writes of the results begun so far (each writer counts one as it begins): after 8 the batch
  -- is no longer due, and `results_error` says why the last one failed.
  add column results_tries integer not null default 0,
  -- Why the last write of the results failed; null when none failed, or once written.
  add column results_error text;

-- Finished batches whose results are still to be written, with tries left: what the scheduler
-- writes (the 8 is RESULTS_MAX_TRIES of src/batch/sql/results.ts).
create index if not exists leasehold_batches_results_due on leasehold_batches (finished_at)
  where results is not null and results_manifest is null and results_tries < 8 and status in ('succeeded', 'failed');
