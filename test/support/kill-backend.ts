// Test-only: statement triggers that terminate their own backend, once per arming, on inserts
// into `leasehold_items` (a start writing its items) and into a scratch table `kill_copy`. A
// sequence counts the firings, so the terminated transaction's rollback does not re-arm it.
import type { Sql } from '../../src/store/index.js';

/** Create the triggers in `sql`'s schema (after the migrations), disarmed. */
export async function installBackendKiller(sql: Sql): Promise<void> {
  await sql.unsafe(`
    create sequence kill_once;
    select setval('kill_once', 1);
    create function kill_once() returns trigger language plpgsql as $$
    begin
      if nextval('kill_once') = 1 then perform pg_terminate_backend(pg_backend_pid()); end if;
      return null;
    end $$;
    create trigger kill_once after insert on leasehold_items for each statement execute function kill_once();
    create table kill_copy (x integer);
    create trigger kill_once after insert on kill_copy for each statement execute function kill_once();
  `);
}

/** The statement that arms it: the next insert into `leasehold_items` or `kill_copy` terminates its backend. */
export const ARM_BACKEND_KILLER = `select setval('kill_once', 1, false)`;
