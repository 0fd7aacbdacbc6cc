-- Items keep their batch without a foreign key (docs/design.md, "The database in production",
-- "Items checked per statement"). The foreign key from leasehold_items to leasehold_batches
-- checked every inserted item on its own, a query and a key-share lock per row: it more than
-- doubled the cost of inserting items (500,000 rows: 5.7 s against 2.4 s on PostgreSQL 15), the
-- most of a source page's statement and of a large start. Two statement-level triggers keep what
-- it gave, at one check per batch a statement names:
-- - an insert of items naming a batch that does not exist fails with foreign_key_violation;
-- - deleting batches deletes their items (retention deletes a batch only once it has none), and
--   truncating the batches empties the items.
-- A batch cannot be deleted between the check and the commit: every insert of items holds its
-- batch row, inserted in the same transaction (a start) or updated by the same statement (a
-- source page, sql/sources.ts).
--
-- Additive (docs/development.md, "Migrations"): code of the release before inserts and deletes
-- as it did, and gets the same error code (foreign_key_violation; the message names the batch,
-- not the constraint, which nothing reads) and the same cascade.

-- The distinct batches of the inserted rows, each looked up on the primary key (a join with the
-- transition table, which has no statistics, could be planned as a scan of every batch).
create or replace function leasehold_items_check_batch() returns trigger
language plpgsql set search_path from current as $$
declare
  b uuid;
begin
  for b in select distinct batch_id from added loop
    perform 1 from leasehold_batches where id = b;
    if not found then
      raise foreign_key_violation using
        message = format('insert into leasehold_items: batch %s does not exist', b),
        table = 'leasehold_items', column = 'batch_id';
    end if;
  end loop;
  return null;
end $$;

drop trigger if exists leasehold_items_check_batch on leasehold_items;
create trigger leasehold_items_check_batch after insert on leasehold_items
  referencing new table as added for each statement execute function leasehold_items_check_batch();

-- The deleted batches' items, one batch at a time through the primary key's batch_id prefix. The
-- statement fires after every delete of batches, one that deleted none included; `= any` of the
-- deleted ids was planned for an array of unknown length and, once the statistics knew of few
-- large batches, as a scan of every item (0.5-0.8 s per call beside 2,000,000 items).
create or replace function leasehold_batches_delete_items() returns trigger
language plpgsql set search_path from current as $$
declare
  b uuid;
begin
  for b in select id from gone loop
    delete from leasehold_items where batch_id = b;
  end loop;
  return null;
end $$;

drop trigger if exists leasehold_batches_delete_items on leasehold_batches;
create trigger leasehold_batches_delete_items after delete on leasehold_batches
  referencing old table as gone for each statement execute function leasehold_batches_delete_items();

-- A delete, not a truncate: a truncate of both tables at once has the items table in use.
create or replace function leasehold_batches_truncate_items() returns trigger
language plpgsql set search_path from current as $$
begin
  delete from leasehold_items;
  return null;
end $$;

drop trigger if exists leasehold_batches_truncate_items on leasehold_batches;
create trigger leasehold_batches_truncate_items after truncate on leasehold_batches
  for each statement execute function leasehold_batches_truncate_items();

-- The foreign key itself, whatever it was named.
do $$
declare
  c text;
begin
  for c in select conname from pg_constraint
    where conrelid = 'leasehold_items'::regclass and contype = 'f' loop
    execute format('alter table leasehold_items drop constraint %I', c);
  end loop;
end $$;
