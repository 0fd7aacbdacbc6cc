-- Hot small tables stay small (docs/design.md, "The database in production"). The process rows,
-- tenant counters, unit totals, settings, invocations and the batch rows are updated many times
-- a second (heartbeats, beats, claims, takeovers), and every update leaves a dead row version.
-- With the default autovacuum settings a table is vacuumed only once 20 % of it is dead (50 rows
-- plus 20 %): on a 50-row table that is fine, but its indexes and pages still fill with dead
-- versions between runs, and a held snapshot makes it worse. Here each of them is vacuumed (and
-- analyzed) after a fixed number of dead rows, whatever its size, and its vacuum never sleeps
-- (cost delay 0: these tables are a few pages). How soon autovacuum looks at all is the server's
-- `autovacuum_naptime` (docs/deploy.md, "Database parameters").
--
-- `ALTER TABLE … SET (storage parameters)` takes only a SHARE UPDATE EXCLUSIVE lock: it waits
-- for no reader or writer and blocks none (heartbeats, beats, claims and moves go on); it
-- conflicts only with another such ALTER, a VACUUM or an index build of the same table.
-- `fillfactor` applies to pages written from now on: free room on each page lets an update that
-- changes no indexed column stay on its page (a HOT update), pruned without any vacuum.

alter table leasehold_processes set (
  fillfactor = 50,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 100,
  autovacuum_vacuum_cost_delay = 0
);

alter table leasehold_tenants set (
  fillfactor = 50,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 100,
  autovacuum_vacuum_cost_delay = 0
);

-- One row, rewritten by every statement that changes unit weights.
alter table leasehold_unit_totals set (
  fillfactor = 10,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 0
);

alter table leasehold_settings set (
  fillfactor = 50,
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 0
);

-- Inserted by the scheduler, deleted by each worker's first heartbeat: insert and delete churn.
alter table leasehold_invocations set (
  autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100,
  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000,
  autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 100,
  autovacuum_vacuum_cost_delay = 0
);

-- The batch rows are few that are open (beaten every few seconds, each beat a dead version) and
-- many that are finished (kept for the retention period, never updated again). A fixed 1,000
-- dead rows plus 1 % of the table: at 100,000 finished rows a vacuum runs after about 2,000 dead
-- versions (under two minutes of 100 runs beating every 5 s), where the default would wait for
-- 20,000. Vacuum skips the all-visible pages of finished rows (the visibility map), so a run
-- costs about the pages that changed. Statistics matter little (every hot statement's plan is
-- fixed by its shape), so analyze follows the defaults' order of magnitude.
alter table leasehold_batches set (
  autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
  autovacuum_analyze_scale_factor = 0.05, autovacuum_analyze_threshold = 1000,
  autovacuum_vacuum_cost_delay = 0
);
