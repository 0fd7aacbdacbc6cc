-- A batch ended because its source could not be read (docs/design.md, "Sources and results"):
-- its items are only the pages read before the bad one. A redrive would reopen it with reading
-- over and succeed over part of the source, so it is refused (409 `source_failed`); a new batch
-- reads the fixed source. Set by the statement that ends such a batch; a constant default adds
-- the column without rewriting the table.
alter table leasehold_batches add column source_failed boolean not null default false;
