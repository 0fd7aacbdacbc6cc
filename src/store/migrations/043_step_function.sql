-- The move + claim statement as a server-side function, for runs behind a transaction-mode
-- pooler (docs/design.md, "Database connections": pooler mode; docs/development.md, "Behind a
-- transaction-mode pooler every statement is planned"; issue 36). Such a pool makes no named
-- prepared statement (the next statement may reach another server session), so PostgreSQL parsed
-- and planned the run's hottest statement at every call: 0.41 ms of planning against 0.16 ms
-- executing, measured. A PL/pgSQL function's statements keep their plans in the server session
-- that ran them, as a named prepared statement does: every session a pooler lends plans the step
-- once in its life, not once per call. Its plan is the generic one from the first call
-- (`plan_cache_mode = force_generic_plan`, for the function's calls only): left to choose, the
-- plan cache kept making custom plans, since a custom plan drops the fence its parameters rule
-- out and so looks cheaper (0.45 ms a call against 0.07 ms with the generic plan, measured).
-- The generic plan is the one the statement is written for: the batch, the claim size and the
-- window are subqueries, which no plan folds to constants (moves.ts, `stepStatement`), and
-- `test/store/plans.test.ts` bounds what it reads in each of its five states of the database.
--
-- The statement is `stepStatement` of src/batch/sql/moves.ts with its three fences in one: the
-- run's row is updated when the moves settle items (`p_settled` > 0; with `p_beat` it beats too),
-- else locked key share. Each of the two parts is gated on a parameter, so a plan runs one of
-- them; the rest reads as in moves.ts, whose comments say why each part is written as it is.
-- `test/batch/step-function.test.ts` checks that both give the same answers and leave the same
-- rows, on PostgreSQL 14 and later. A change of one is a change of both.
--
-- Additive (docs/development.md, "Migrations"): a new function, which the code of the release
-- before never calls.
create or replace function leasehold_step(
  p_batch uuid, p_run uuid, p_moves text, p_settled integer, p_claim integer,
  p_ahead_ms double precision, p_record_progress boolean, p_beat boolean,
  out o_moved integer, out o_claimed json, out o_next_due_ms double precision, out o_beat json)
language plpgsql set plan_cache_mode = force_generic_plan as $fn$
#variable_conflict use_column
begin
  with own_update as (
    update leasehold_runs
    set settled = settled + p_settled, beat_at = case when p_beat then now() else beat_at end
    where id = p_run and p_settled > 0
    returning id, batch_id, started_at
  ), own_lock as (
    select id, batch_id, started_at from leasehold_runs where id = p_run and p_settled <= 0 for key share
  ), own as (
    select * from own_update union all select * from own_lock
  ), progress as (
    update leasehold_batches set stalled_runs = 0
    where p_record_progress and id = p_batch and stalled_runs > 0 and exists (select 1 from own)
    returning 1
  ), m as (
    select t.tid, v.* from jsonb_to_recordset(p_moves::jsonb)
      as v(key text, state text, claimed int, attempts int, output jsonb, error text, delay_ms double precision, waits int)
    cross join lateral (
      select x.ctid as tid from leasehold_items x where x.batch_id = (select p_batch) and x.key = v.key limit 1
    ) t
  ), moved as (
    update leasehold_items i
    set state = m.state, attempts = m.attempts, output = m.output, error = m.error,
        waits = coalesce(m.waits, i.waits),
        run_after = case when m.state = 'pending' then now() + make_interval(
          secs => least(greatest(coalesce(m.delay_ms, 0), 0), 86400000) / 1000.0) else i.run_after end,
        updated_at = now()
    from m
    where i.ctid = any(array(select tid from m)) and i.ctid = m.tid and i.run_id = p_run
      and exists (select 1 from own)
      and ((i.state = 'running' and i.attempts = m.claimed)
           or (i.state = m.state and i.attempts = m.attempts))
    returning 1
  ), picked as (
    select ctid from leasehold_items
    where batch_id = (select p_batch) and state = 'pending' and exists (select 1 from own)
      and run_after <= now() + make_interval(secs => (select p_ahead_ms / 1000.0))
    order by run_after
    limit (select p_claim)
    for update skip locked
  ), claimed as (
    update leasehold_items i
    set state = 'running', attempts = i.attempts + 1, run_id = p_run, updated_at = now()
    where i.ctid = any(array(select ctid from picked))
    returning i.key, i.input, i.attempts, i.waits, i.run_after, i.checkpoint, i.woke
  )
  select (select count(*) from moved)::int,
    (select json_agg(json_build_object('key', key, 'input', input, 'attempts', attempts, 'waits', waits,
        'due_in_ms', greatest(0, extract(epoch from run_after - now()) * 1000), 'checkpoint', checkpoint,
        'woke', woke)
        order by run_after, key)
      from claimed),
    (select extract(epoch from run_after - now()) * 1000 from leasehold_items
      where batch_id = (select p_batch) and state = 'pending'
        and run_after > now() + make_interval(secs => (select p_ahead_ms / 1000.0))
      order by run_after limit 1)::float8,
    case when p_beat and p_settled > 0 then (select row_to_json(x) from (select
      (select count(*) from leasehold_runs o
         where o.batch_id = r.batch_id and (o.started_at, o.id) < (r.started_at, r.id))
        >= (select max_concurrency from leasehold_batches where id = r.batch_id) as surplus,
      (select rate_per_second from leasehold_batches where id = r.batch_id) as rate,
      (select paused_at is not null from leasehold_batches where id = r.batch_id) as paused,
      (select deadline_at <= now() from leasehold_batches where id = r.batch_id) as past_deadline
      from own r) x) end
  into o_moved, o_claimed, o_next_due_ms, o_beat;
end
$fn$;
