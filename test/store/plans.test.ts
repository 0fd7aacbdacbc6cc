// Every hot statement's cost is bounded by its own limit whatever the planner estimates
// (docs/design.md, "The database in production"; issue 16): EXPLAIN ANALYZE of each (rolled
// back) under five states of the database — fresh (never analyzed), analyzed before its data
// existed (empty, and with a little history: one finished batch of 100 items), analyzed with its
// data, and lived-in (5,000,000 finished items of 250 batches, 10,000 units, 1,000,000 delivered
// outbox rows, analyzed, then its data; a database of its own, copied from a template built once
// per server: test/support/lived-in.ts) — and no node of the plan may read more than
// `bound × 4 + 50` rows, where the bound is the statement's own limit (claim size, page size,
// keys moved; for a per-batch read the batch's own items).
//
// A new statement is one entry of `cases`: its name, its bound, and its fragment built from the
// fixture of the state (`Fixture`: the ids every state holds); a statement that reads rows an
// earlier statement of its transaction writes names that one as its `setup`.
import { randomUUID } from 'node:crypto';
import postgres, { type PendingQuery, type Row } from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { permitsStatement } from '../../src/batch/sql/pools.js';
import { unfinishedStatement } from '../../src/batch/sql/redrives.js';
import {
  beatStatement,
  doneSeenStatement,
  endCompletedStatement,
  claimDispatchStatement,
  encodeMoves,
  endIntolerableStatement,
  finishStatement,
  getBatchStatement,
  giveBackRunningStatement,
  handOffStatement,
  itemsPageStatement,
  listBatchesStatement,
  NO_LIMIT,
  recoverRunningStatement,
  releaseOrphansStatement,
  step,
  stepCall,
  stepStatement,
  type StepArgs,
  takeOverStatement,
  waitStateStatement,
} from '../../src/batch/sql/index.js';
import { claimChunkStatement } from '../../src/batch/sql/actions.js';
import {
  chunkStatusesStatement,
  deleteChunkRunsStatement,
  endChunkStatement,
  lateRunsStatement,
} from '../../src/batch/sql/cancels.js';
import { cancelEventsStatement, writeCancelEvents } from '../../src/batch/sql/events.js';
import { beatItemStatement, recoverStaleStatement } from '../../src/batch/sql/heartbeats.js';
import { expiryStatement, parkStatement, registerWaitStatement, wakeSleepsStatement } from '../../src/batch/sql/waits.js';
import { batchActivityStatement, finishedBucketsStatement } from '../../src/batch/sql/progress.js';
import { tenantBatchesStatement, tenantStateStatement } from '../../src/batch/sql/tenants.js';
import {
  claimStatement,
  heartbeatStatement,
  ownedUnitsStatement,
  releaseAllStatement,
  releaseUnitsStatement,
  shareStateStatement,
  type Me,
} from '../../src/lease/sql/ownership.js';
import { sweepStatement } from '../../src/lease/sql/sweep.js';
import { liftQuarantinesStatement, listProcessesStatement, listUnitsStatement } from '../../src/lease/sql/units.js';
import type { Sql } from '../../src/store/index.js';
import {
  assignStatement,
  dueDeliveriesStatement,
  markDeliveredStatement,
  markFailedStatement,
} from '../../src/units/sql/outbox.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { analyzeSchema, loadHistory } from '../support/history.js';
import { livedInDatabase } from '../support/lived-in.js';
import { expectBounded, readRows, type PlanNode } from '../support/plans.js';

/** Items of the open batch every state holds (and of which `RUNNING` are running under its run). */
const ITEMS = 20_000;
const RUNNING = 64;
/** Waiting items of the parked batch (docs/design.md, "Waiting items: callbacks and sleeps"). */
const WAITING = 1_000;
/** Live fleet processes (the fixture's own included) and expired ones, each owning `OWNED` units. */
const LIVE = 20;
const EXPIRED = 5;
const OWNED = 40;
/** Unowned claimable units. */
const UNOWNED = 3_000;
/** The outbox unit's backlog: unassigned messages, and assigned ones with a pending delivery per endpoint. */
const UNASSIGNED = 5_000;
const ASSIGNED = 2_000;
const ENDPOINTS = ['https://plans.invalid/a', 'https://plans.invalid/b'];

/** The ids a state's statement data holds (the same shape in every state). */
interface Fixture {
  /** The open batch of {@link ITEMS} pending items, worked by `run` of `me` and one other run, beat now. */
  batch: string;
  run: string;
  /** Keys of the batch's items running under `run` (attempt 1). */
  running: string[];
  /** An open batch of another tenant waiting for a run (no owner), 100 items. */
  waiting: string;
  /** A parked batch (target 0, no run): {@link WAITING} waiting items, half of their waits due. */
  parked: string;
  /** A live fleet process owning {@link OWNED} units and the outbox unit. */
  me: Me;
  /** Units `me` owns (tenant `plan-own-0`). */
  owned: { tenant: string; shard: number }[];
  /** The outbox unit `me` owns, its endpoints, and one pending delivery on it. */
  outbox: { tenant: string; shard: number };
  delivery: { id: string; endpoint: string };
}

/** A hot statement: its bound (rows a node may read, before the allowance) and its fragment. */
interface Case {
  name: string;
  bound: number;
  /** `made`: what `setup` answered (its plan is not read), when the case has one. */
  statement: (sql: Sql, d: Fixture, made: string[]) => PendingQuery<Row[]>;
  /** Writes, in the statement's rolled-back transaction and before it, the rows it reads; answers their ids. */
  setup?: (tx: Sql, d: Fixture) => Promise<string[]>;
}

/** A bulk action's chunk size (src/batch/actions.ts). */
const CHUNK = 100;

/**
 * A bulk cancel's chunk of {@link CHUNK} batch ids: the fixture's three open batches (all it
 * holds), the rest ids of no batch.
 */
const chunk = (d: Fixture): string[] => [
  d.batch,
  d.waiting,
  d.parked,
  ...Array.from({ length: CHUNK - 3 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`),
];

const cases: Case[] = [
  // Batches (src/batch/sql/).
  {
    // A bulk action's chunk: the first unworked entries of its partial index (migration 032), of
    // an action of 11,200 batches: 1,000 done, then two chunks other workers hold, then 10,000.
    name: 'bulk action chunk claim',
    bound: CHUNK,
    setup: async (tx) => {
      const [{ id }] = await tx<{ id: string }[]>`insert into leasehold_actions (id, request_key, action, filter, matched)
        values (gen_random_uuid(), ${`plan-${randomUUID()}`}, 'cancel', '{}'::jsonb, 11200) returning id`;
      await tx`insert into leasehold_action_batches (action_id, batch_id, outcome, taken_until)
        select ${id}, ('00000000-0000-4000-8000-' || lpad(k::text, 12, '0'))::uuid,
          case when k < 1000 then 'done' end, case when k < 1200 then now() + interval '1 minute' end
        from generate_series(0, 11199) k`;
      return [id];
    },
    statement: (sql, _d, [actionId]) => claimChunkStatement(sql, { actionId, limit: CHUNK, takeMs: 60_000 }),
  },
  // A bulk cancel's chunk (src/batch/sql/cancels.ts), its statements in their order: the run
  // rows, the events (built from each batch's row and, open, its items' counts), the batch rows
  // ended, the late runs, and the others' statuses.
  { name: 'bulk cancel: delete run rows', bound: CHUNK, statement: (sql, d) => deleteChunkRunsStatement(sql, chunk(d)) },
  // An open batch's event counts its own items (as the one-batch end's does): the bound is the
  // chunk's open batches' items, not the chunk's size.
  {
    name: 'bulk cancel: write events',
    bound: ITEMS + 100 + WAITING,
    statement: (sql, d) => cancelEventsStatement(sql, chunk(d)),
  },
  {
    name: 'bulk cancel: end batch rows',
    bound: CHUNK,
    setup: (tx, d) => writeCancelEvents(tx, chunk(d)),
    statement: (sql, _d, events) => endChunkStatement(sql, events),
  },
  { name: 'bulk cancel: late runs', bound: CHUNK, statement: (sql, d) => lateRunsStatement(sql, chunk(d)) },
  { name: 'bulk cancel: statuses of the others', bound: CHUNK, statement: (sql, d) => chunkStatusesStatement(sql, chunk(d)) },
  {
    name: 'claim',
    bound: 64,
    statement: (sql, d) =>
      stepStatement(sql, { batchId: d.batch, run: d.run, moves: encodeMoves([]), claim: 64, aheadMs: 0, recordProgress: false }),
  },
  {
    name: 'move + claim',
    bound: 64,
    statement: (sql, d) =>
      stepStatement(sql, {
        batchId: d.batch,
        run: d.run,
        moves: encodeMoves(
          d.running.map((key) => ({
            key,
            state: 'done',
            claimed: 1,
            attempts: 1,
            output: '{"ok":true}',
            error: null,
            delayMs: 0,
          })),
        ),
        claim: 64,
        aheadMs: 0,
        recordProgress: true,
      }),
  },
  {
    name: 'move + claim, beating',
    bound: 64,
    statement: (sql, d) =>
      stepStatement(sql, {
        batchId: d.batch,
        run: d.run,
        moves: encodeMoves(
          d.running.map((key) => ({ key, state: 'done', claimed: 1, attempts: 1, output: null, error: null, delayMs: 0 })),
        ),
        settled: d.running.length,
        claim: 64,
        aheadMs: 0,
        recordProgress: false,
        beat: true,
      }),
  },
  {
    name: 'takeover (fairest waiting batch)',
    bound: 1,
    statement: (sql, d) => takeOverStatement(sql, { run: randomUUID(), process: d.me.id, staleMs: 30_000, maxRunning: NO_LIMIT }),
  },
  {
    name: 'takeover (the batch it was sent)',
    bound: 1,
    statement: (sql, d) =>
      takeOverStatement(sql, {
        run: randomUUID(),
        process: d.me.id,
        staleMs: 30_000,
        maxRunning: NO_LIMIT,
        batchId: d.waiting,
        orFairer: true,
      }),
  },
  {
    name: 'handoff',
    bound: RUNNING,
    statement: (sql, d) =>
      handOffStatement(sql, { batchId: d.batch, run: d.run, moves: encodeMoves([]), hold: '[]', recordProgress: false }),
  },
  // A run that found no work leaves only while another run is live (decided on the batch row).
  {
    name: 'leave (no work left here)',
    bound: RUNNING,
    statement: (sql, d) =>
      handOffStatement(sql, {
        batchId: d.batch,
        run: d.run,
        moves: encodeMoves([]),
        hold: '[]',
        recordProgress: false,
        leave: true,
      }),
  },
  {
    name: 'recover running items',
    bound: RUNNING,
    statement: (sql, d) => recoverRunningStatement(sql, { batchId: d.batch, run: d.run, attempts: 3 }),
  },
  {
    name: 'release orphans',
    bound: RUNNING,
    statement: (sql, d) => releaseOrphansStatement(sql, { batchId: d.batch, run: d.run }),
  },
  { name: 'beat', bound: 1, statement: (sql, d) => beatStatement(sql, { batchId: d.batch, run: d.run }) },
  // Item heartbeats and checkpoints (src/batch/sql/heartbeats.ts): one item by its key; the
  // recovery of stale attempts, the candidates the run names.
  {
    name: 'item heartbeat with a checkpoint',
    bound: 1,
    statement: (sql, d) =>
      beatItemStatement(sql, {
        batchId: d.batch,
        run: d.run,
        key: d.running[0],
        claimed: 1,
        progress: '{"done":1}',
        checkpoint: '{"offset":10}',
      }),
  },
  {
    name: 'recover stale attempts',
    bound: RUNNING,
    statement: (sql, d) =>
      recoverStaleStatement(sql, {
        batchId: d.batch,
        run: d.run,
        items: JSON.stringify(d.running.map((key) => ({ key, claimed: 1 }))),
        staleMs: 1_000,
        attempts: 3,
      }),
  },
  // The finish check reads the first pending and running entries and the failed items only.
  { name: 'finish check', bound: 1, statement: (sql, d) => finishStatement(sql, { batchId: d.batch, run: d.run }) },
  {
    name: 'intolerable end check',
    bound: 1,
    statement: (sql, d) => endIntolerableStatement(sql, { batchId: d.batch, run: d.run }),
  },
  // Early completion: the count a flush adds (one row), and the exact count once it says enough
  // (the batch's own items, up to its minSucceeded: read once).
  {
    name: 'early completion count',
    bound: 1,
    statement: (sql, d) => doneSeenStatement(sql, { batchId: d.batch, run: d.run, done: 3 }),
  },
  {
    name: 'early completion end',
    bound: ITEMS,
    statement: (sql, d) => endCompletedStatement(sql, { batchId: d.batch, run: d.run }),
  },
  // A pool's take (docs/design.md, "Concurrency pools"): the pool's live leases and the run's keys.
  {
    name: 'pool permits take',
    bound: 64,
    statement: (sql, d) =>
      permitsStatement(
        sql,
        {
          pool: 'plans',
          run: d.run,
          targets: [
            { key: '', target: 4 },
            { key: 'b', target: 2 },
          ],
          leaseMs: 30_000,
        },
        { total: 20, perKey: 10 },
      ),
  },
  // A redrive's count of a failed batch's unfinished items: its pending and running items through
  // their partial indexes, its waits through their key (the fixture's batch holds its ITEMS pending
  // and RUNNING running; the waiting batch its WAITING waits).
  {
    name: 'redrive: unfinished items',
    bound: ITEMS + RUNNING,
    statement: (sql, d) => unfinishedStatement(sql, d.batch),
  },
  {
    name: 'redrive: unfinished items of a batch with waits',
    bound: ITEMS + RUNNING + WAITING,
    statement: (sql, d) => unfinishedStatement(sql, d.waiting),
  },
  // After an intolerable end, in its transaction: the items still running go back.
  {
    name: 'intolerable end: give back running items',
    bound: RUNNING,
    statement: (sql, d) => giveBackRunningStatement(sql, { batchId: d.batch }),
  },
  { name: 'wait state', bound: 1, statement: (sql, d) => waitStateStatement(sql, { batchId: d.batch, run: d.run }) },
  // Waiting items (src/batch/sql/waits.ts): a wait registered by one running item; the expiry
  // pass's look-up of due waits (its limit), across batches; the park's check, of a batch with
  // pending items and of a parked one (the first waiting item ends it).
  {
    name: 'register a wait',
    bound: 1,
    statement: (sql, d) =>
      registerWaitStatement(sql, {
        batchId: d.batch,
        run: d.run,
        key: d.running[0],
        claimed: 1,
        id: randomUUID(),
        kind: 'callback',
        wakeInMs: 60_000,
        heartbeatTimeoutMs: 10_000,
        payload: '{"to":"ana"}',
      }),
  },
  { name: 'waits expiry', bound: 100, statement: (sql) => expiryStatement(sql, { limit: 100 }) },
  { name: 'park check', bound: 1, statement: (sql, d) => parkStatement(sql, { batchId: d.batch, run: d.run }) },
  {
    name: 'park check of a parked batch',
    bound: 1,
    statement: (sql, d) => parkStatement(sql, { batchId: d.parked, run: d.run }),
  },
  {
    name: 'dispatch',
    bound: 2,
    statement: (sql) => claimDispatchStatement(sql, { staleMs: 30_000, cooldownMs: 0, limit: 100, maxRunning: NO_LIMIT }),
  },
  // An open batch's counts read its own items (its bound); a finished one's, its row.
  { name: 'show a batch', bound: ITEMS, statement: (sql, d) => getBatchStatement(sql, { id: d.batch }) },
  { name: 'list batches', bound: ITEMS + 100, statement: (sql) => listBatchesStatement(sql, { limit: 50 }) },
  { name: 'list finished batches', bound: 50, statement: (sql) => listBatchesStatement(sql, { status: 'succeeded', limit: 50 }) },
  // Running and paused read the open batches' index, and the counts of those they keep.
  {
    name: 'list running batches',
    bound: ITEMS + 100 + WAITING,
    statement: (sql) => listBatchesStatement(sql, { status: 'running', limit: 50 }),
  },
  {
    name: 'list paused batches',
    bound: ITEMS + 100 + WAITING,
    statement: (sql) => listBatchesStatement(sql, { status: 'paused', limit: 50 }),
  },
  {
    name: "list a tenant's batches",
    bound: 50,
    statement: (sql) => listBatchesStatement(sql, { tenant: 'history-1', limit: 50 }),
  },
  { name: 'items page', bound: 100, statement: (sql, d) => itemsPageStatement(sql, { batchId: d.batch, limit: 100 }) },
  {
    name: 'items page after a key',
    bound: 100,
    statement: (sql, d) => itemsPageStatement(sql, { batchId: d.batch, after: '0010000', limit: 100 }),
  },
  {
    name: 'failed items page',
    bound: 100,
    statement: (sql, d) => itemsPageStatement(sql, { batchId: d.batch, state: 'failed', limit: 100 }),
  },
  // Waiting items with their waits (one probe of leasehold_waits each), of the parked batch.
  {
    name: 'waiting items page',
    bound: 100,
    statement: (sql, d) => itemsPageStatement(sql, { batchId: d.parked, state: 'waiting', limit: 100 }),
  },
  {
    name: 'items page of a parked batch',
    bound: 100,
    statement: (sql, d) => itemsPageStatement(sql, { batchId: d.parked, limit: 100 }),
  },
  // Tenants and progress (src/batch/sql/tenants.ts, progress.ts).
  { name: 'tenant state', bound: 1, statement: (sql) => tenantStateStatement(sql, 'plan-w') },
  {
    name: 'tenant running batches',
    bound: 20,
    statement: (sql) => tenantBatchesStatement(sql, 'plan-t', { running: true, limit: 20 }),
  },
  {
    name: 'tenant waiting batches',
    bound: 20,
    statement: (sql) => tenantBatchesStatement(sql, 'plan-w', { running: false, limit: 20 }),
  },
  { name: 'finished buckets of a batch', bound: ITEMS, statement: (sql, d) => finishedBucketsStatement(sql, d.batch, 60_000) },
  { name: 'activity of batches', bound: ITEMS, statement: (sql, d) => batchActivityStatement(sql, [d.batch, d.waiting], 60_000) },
  // Process membership and unit ownership (src/lease/sql/ownership.ts, units.ts).
  {
    name: 'heartbeat',
    bound: 1,
    statement: (sql, d) =>
      heartbeatStatement(sql, {
        ...d.me,
        role: 'fleet',
        hostname: 'plan',
        version: 'v',
        ttlMs: 15_000,
        units: OWNED + 1,
        weight: OWNED + 1,
      }),
  },
  { name: 'share state', bound: LIVE + EXPIRED, statement: (sql, d) => shareStateStatement(sql, d.me) },
  { name: 'owned units', bound: OWNED + 1, statement: (sql, d) => ownedUnitsStatement(sql, d.me) },
  { name: 'unit claim', bound: 64, statement: (sql, d) => claimStatement(sql, d.me, { budget: 64, limit: 64, from: 0, to: 1 }) },
  {
    name: 'unit claim (no abandoned units)',
    bound: 64,
    statement: (sql, d) => claimStatement(sql, d.me, { budget: 64, limit: 64, from: 0.5, to: 1, abandoned: false }),
  },
  // The shed may find the listed units through the owner index: its bound is what the process owns.
  { name: 'shed', bound: OWNED + 1, statement: (sql, d) => releaseUnitsStatement(sql, d.me, d.owned.slice(0, 10)) },
  { name: 'release', bound: OWNED + 1, statement: (sql, d) => releaseAllStatement(sql, d.me) },
  { name: 'sweep', bound: EXPIRED * OWNED, statement: (sql) => sweepStatement(sql, 3_600_000) },
  // Quarantines that are over: through the partial index of quarantined units (none here).
  { name: 'lift quarantines', bound: 1, statement: (sql) => liftQuarantinesStatement(sql) },
  { name: 'list units', bound: 100, statement: (sql) => listUnitsStatement(sql, undefined, 100) },
  { name: 'list units of a tenant', bound: 100, statement: (sql) => listUnitsStatement(sql, 'plan-own-0', 100) },
  { name: 'list processes', bound: (LIVE + EXPIRED) * OWNED + 1, statement: (sql) => listProcessesStatement(sql) },
  // The outbox (src/units/sql/outbox.ts).
  {
    name: 'outbox assign',
    bound: 100 * ENDPOINTS.length,
    statement: (sql, d) => assignStatement(sql, d.outbox, d.me.id, ENDPOINTS, 100),
  },
  {
    name: 'due deliveries',
    bound: 50 * ENDPOINTS.length,
    statement: (sql, d) => dueDeliveriesStatement(sql, d.outbox, ENDPOINTS, 50),
  },
  {
    name: 'mark delivered',
    bound: 1,
    statement: (sql, d) => markDeliveredStatement(sql, d.outbox, d.me.id, d.delivery.id, d.delivery.endpoint),
  },
  {
    name: 'mark failed',
    bound: 1,
    statement: (sql, d) =>
      markFailedStatement(sql, d.outbox, d.me.id, { ...d.delivery, error: 'refused', backoffMs: 1_000, maxBackoffMs: 60_000 }),
  },
  // A run's wake of its own sleeps: ten of the parked batch's waits made sleeps that came due,
  // among 20,000 more of its waits (last of the cases: the rolled-back rows stay in the table's
  // pages and index, and would change later cases' plans of the parked batch's waits) (the fixture's 1,010 fit in a few pages, which a plan reads
  // whole for less than ten look-ups; a batch with many waits is the case to bound).
  {
    name: "a run's wake of its sleeps",
    bound: 10,
    setup: async (tx, d) => {
      await tx`insert into leasehold_waits (batch_id, key, id, kind, attempt, wake_at)
        select ${d.parked}, 'more-' || lpad(k::text, 7, '0'), gen_random_uuid(), 'callback', 1, now() + interval '1 hour'
        from generate_series(1, 20000) k`;
      const made = await tx<{ id: string; key: string }[]>`update leasehold_waits
        set kind = 'sleep', created_at = now() - interval '1 minute'
        where batch_id = ${d.parked} and key <= '0000010' returning id, key`;
      return made.map((r) => JSON.stringify(r));
    },
    statement: (sql, d, made) =>
      wakeSleepsStatement(sql, {
        batchId: d.parked,
        sleeps: made.map((m) => ({ ...(JSON.parse(m) as { id: string; key: string }), ms: 1_000 })),
      }),
  },
];

/** Writes the statements' data into the schema: the batches, processes, units and outbox of {@link Fixture}. */
async function createData(sql: Sql): Promise<Fixture> {
  const me: Me = { id: randomUUID(), token: randomUUID() };
  const run = randomUUID();
  await sql`insert into leasehold_processes (id, token, role, hostname, version, expires_at)
    values (${me.id}, ${me.token}, 'fleet', 'plan', 'v', now() + interval '1 hour')`;
  await sql`insert into leasehold_processes (id, role, hostname, version, started_at, expires_at)
    select gen_random_uuid(), 'fleet', 'plan', 'v', now() - interval '3 hours',
      case when k < ${LIVE - 1} then now() + interval '1 hour' else now() - interval '2 hours' end
    from generate_series(0, ${LIVE + EXPIRED - 2}) k`;
  // Each process owns OWNED units of its own tenant; `me` is plan-own-0.
  await sql`insert into leasehold_units (tenant, shard, job, weight, owner, claimed_at)
    select 'plan-own-' || p.n, s, 'sync', 1, p.id, now()
    from (select id, row_number() over (order by id = ${me.id} desc, id) - 1 as n from leasehold_processes where hostname = 'plan') p,
      generate_series(0, ${OWNED - 1}) s`;
  await sql`insert into leasehold_units (tenant, shard, job, weight)
    select 'plan-free-' || (i / 100), i % 100, 'sync', 1 from generate_series(0, ${UNOWNED - 1}) i`;
  const outbox = { tenant: 'plan-outbox', shard: 0 };
  await sql`insert into leasehold_units (tenant, shard, job, weight, config, owner, claimed_at)
    values (${outbox.tenant}, 0, 'outbox-delivery', 1, ${sql.json({ endpoints: ENDPOINTS })}, ${me.id}, now())`;
  await sql`insert into leasehold_outbox (tenant, shard, key, payload, created_at, assigned_at)
    select ${outbox.tenant}, 0, 'plan-' || x, '{"n":1}'::jsonb, now() - interval '1 minute',
      case when x < ${ASSIGNED} then now() - interval '1 minute' end
    from generate_series(0, ${ASSIGNED + UNASSIGNED - 1}) x`;
  await sql`insert into leasehold_outbox_deliveries (message_id, endpoint, tenant, shard, next_attempt_at)
    select o.id, e, o.tenant, o.shard, o.created_at
    from leasehold_outbox o cross join jsonb_array_elements_text(${sql.json(ENDPOINTS)}) e
    where o.tenant = ${outbox.tenant} and o.assigned_at is not null`;
  const [delivery] = await sql<{ id: string; endpoint: string }[]>`select message_id::text as id, endpoint
    from leasehold_outbox_deliveries where tenant = ${outbox.tenant} order by message_id, endpoint limit 1`;

  // Worked by two runs (migration 016): `run` of `me`, and one of another process, both beat now.
  const [{ id: batch }] = await sql<{ id: string }[]>`insert into leasehold_batches
      (tenant, datasource, job, params, request_key, total, max_concurrency, target, live_runs, taken_at, runs)
    values ('plan-t', 'plan', 'noop', '{}'::jsonb, ${`plan-${run}`}, ${ITEMS}, 8, 8, 2, now(), 2)
    returning id`;
  await sql`insert into leasehold_runs (id, batch_id, process)
    values (${run}, ${batch}, ${me.id}), (${randomUUID()}, ${batch}, ${randomUUID()})`;
  await sql`insert into leasehold_items (batch_id, key, input, state, attempts, run_id)
    select ${batch}, lpad(k::text, 7, '0'), jsonb_build_object('n', k),
      case when k <= ${RUNNING} then 'running' else 'pending' end, (k <= ${RUNNING})::int,
      case when k <= ${RUNNING} then ${run}::uuid end
    from generate_series(1, ${ITEMS}) k`;
  const [{ id: waiting }] = await sql<{ id: string }[]>`insert into leasehold_batches
      (tenant, datasource, job, params, request_key, total)
    values ('plan-w', 'plan', 'noop', '{}'::jsonb, ${`plan-w-${run}`}, 100) returning id`;
  await sql`insert into leasehold_items (batch_id, key, input)
    select ${waiting}, lpad(k::text, 7, '0'), jsonb_build_object('n', k) from generate_series(1, 100) k`;
  const [{ id: parked }] = await sql<{ id: string }[]>`insert into leasehold_batches
      (tenant, datasource, job, params, request_key, total, target)
    values ('plan-p', 'plan', 'noop', '{}'::jsonb, ${`plan-p-${run}`}, ${WAITING}, 0) returning id`;
  await sql`insert into leasehold_items (batch_id, key, input, state)
    select ${parked}, lpad(k::text, 7, '0'), jsonb_build_object('n', k), 'waiting' from generate_series(1, ${WAITING}) k`;
  await sql`insert into leasehold_waits (batch_id, key, id, kind, attempt, wake_at, timeout_at)
    select ${parked}, lpad(k::text, 7, '0'), gen_random_uuid(), 'callback', 1,
      now() + (k - ${WAITING / 2}) * interval '1 second', now() + interval '1 day'
    from generate_series(1, ${WAITING}) k`;
  const running = Array.from({ length: RUNNING }, (_, i) => String(i + 1).padStart(7, '0'));
  const owned = Array.from({ length: OWNED }, (_, shard) => ({ tenant: 'plan-own-0', shard }));
  return { batch, run, running, waiting, parked, me, owned, outbox, delivery };
}

/** A state of the database: its schema and the fixture written into it. */
interface State {
  name: string;
  db: TestDatabase;
  d: Fixture;
  /** ANALYZE runs its tables had when it was made (see {@link analyzes}). */
  analyzed: number;
}

/**
 * How many times the schema's tables were analyzed (by anyone): a bare `ANALYZE` in another
 * session of the same database analyzes them too and changes the state under the test.
 */
async function analyzes(sql: Sql, schema: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select coalesce(sum(analyze_count + autoanalyze_count), 0)::int as n
    from pg_stat_user_tables where schemaname = ${schema}`;
  return r.n;
}

const STATES = ['fresh', 'analyzed empty', 'analyzed with a little history', 'analyzed with its data', 'lived-in'] as const;
type StateName = (typeof STATES)[number];

/**
 * A migrated schema whose tables autovacuum never analyzes (so the state stays the one it was
 * made to be while the file runs), prepared as `name` says.
 */
async function makeState(name: StateName): Promise<State> {
  if (name === 'lived-in') {
    // Built once per server and copied (test/support/lived-in.ts): migrated, autovacuum off, its
    // history loaded and analyzed; then its data.
    const db = await livedInDatabase({ max: 2 });
    console.log(
      `lived-in: ${db.template ? `copy of ${db.template}` : 'loaded'}, built in ${Math.round(db.builtMs)} ms, copied in ${Math.round(db.copiedMs)} ms`,
    );
    return { name, db, d: await createData(db.sql), analyzed: await analyzes(db.sql, db.schema) };
  }
  const db = await testDatabase({ max: 2 });
  const tables = await db.sql<{ name: string }[]>`select tablename as name from pg_tables where schemaname = ${db.schema}`;
  for (const t of tables) await db.sql.unsafe(`alter table "${t.name}" set (autovacuum_enabled = false)`);
  if (name === 'analyzed empty') await analyzeSchema(db.sql);
  // Statistics of a little earlier work: every batch_id and state the planner knows of is that
  // batch's, so it estimates a new batch at 1 row.
  if (name === 'analyzed with a little history')
    await loadHistory(db.sql, { items: 100, batches: 1, tenants: 1, units: 10, outbox: 10 });
  const d = await createData(db.sql);
  if (name === 'analyzed with its data') await analyzeSchema(db.sql);
  return { name, db, d, analyzed: await analyzes(db.sql, db.schema) };
}

const states = new Map<StateName, State>();
const started = performance.now();

beforeAll(async () => {
  // The lived-in state first and alone (a copy in 2-10 s; built, 45-75 s on a loaded two-core machine): the small ones take a second each.
  for (const name of [...STATES].reverse()) {
    const t0 = performance.now();
    states.set(name, await makeState(name));
    console.log(`state "${name}" ready in ${Math.round(performance.now() - t0)} ms`);
  }
}, 480_000);

afterAll(async () => {
  await Promise.all([...states.values()].map((s) => s.db.close()));
  console.log(`plans.test.ts: ${Math.round(performance.now() - started)} ms in all`);
});

describe.each(STATES)('the database %s', (stateName) => {
  it.each(cases)('$name reads at most its bound ($bound) a plan node', async (c) => {
    const s = states.get(stateName);
    if (!s) throw new Error(`state "${stateName}" was not made`);
    if ((await analyzes(s.db.sql, s.db.schema)) !== s.analyzed) {
      throw new Error(
        `the state "${stateName}" was analyzed again from outside (a bare ANALYZE in another session?): its plans no longer show that state`,
      );
    }
    let made: string[] = [];
    const setup = c.setup && (async (tx: Sql) => void (made = await c.setup!(tx, s.d)));
    await expectBounded(s.db.sql, `${c.name} [${stateName}]`, (tx) => c.statement(tx, s.d, made), c.bound, { setup });
  });
});

/** Thrown inside a transaction to roll it back. */
class Rollback extends Error {}

/** The move + claim of the fixture: its running items done, the next 64 claimed. */
const stepArgs = (d: Fixture): StepArgs => ({
  batchId: d.batch,
  run: d.run,
  moves: encodeMoves(
    d.running.map((key) => ({ key, state: 'done', claimed: 1, attempts: 1, output: '{"ok":true}', error: null, delayMs: 0 })),
  ),
  settled: d.running.length,
  claim: RUNNING,
  aheadMs: 0,
  recordProgress: false,
});

/** A plan auto_explain sent back as a notice: the statement's text and its plan. */
interface Explained {
  'Query Text': string;
  Plan: PlanNode;
}

/**
 * The plans of `explained`, executed on a connection of its own to state `s`'s schema, in a
 * transaction rolled back after it (auto_explain, its plans sent back as notices; with `nested`,
 * those of the statements inside functions too). `before` runs first in the same transaction,
 * unexplained.
 */
async function explainedPlans(
  s: State,
  explained: (t: Sql) => Promise<unknown>,
  o: { before?: (t: Sql) => Promise<void>; nested?: boolean } = {},
): Promise<Explained[]> {
  const plans: string[] = [];
  const one = postgres(s.db.url, {
    max: 1,
    fetch_types: false,
    connection: { search_path: s.db.schema },
    onnotice: (n) => void (n.message.includes('plan:') && plans.push(n.message)),
  }) as unknown as Sql;
  try {
    await one.begin(async (tx) => {
      const t = tx as unknown as Sql;
      await o.before?.(t);
      await t`load 'auto_explain'`;
      await t`select set_config('auto_explain.log_min_duration', '0', true), set_config('auto_explain.log_analyze', 'on', true),
        set_config('auto_explain.log_format', 'json', true), set_config('auto_explain.log_level', 'notice', true),
        set_config('auto_explain.log_nested_statements', ${o.nested ? 'on' : 'off'}, true),
        set_config('client_min_messages', 'notice', true)`;
      await explained(t);
      throw new Rollback();
    });
  } catch (e) {
    if (!(e instanceof Rollback)) throw e;
  } finally {
    await one.end();
  }
  return plans.map((p) => JSON.parse(p.slice(p.indexOf('{'))) as Explained);
}

// The move + claim statement is a run's every statement: planning it anew at each call cost
// 20 % of its server time (docs/development.md, "Where an item's time goes"). Its claim size
// is hidden from every plan, so the plan cache keeps its generic plan after the five custom
// ones it always makes; that plan, executed (auto_explain, sent back as a notice), must read
// no more than the custom one may. Behind a transaction-mode pooler nothing is prepared by
// name (every call is planned), and its own connection's startup settings would be refused.
describe.each(STATES)('the database %s', (stateName) => {
  it('the move + claim statement is planned once per connection, its plan bounded (skipped through a pooler: nothing is prepared there)', async ({
    skip,
  }) => {
    const s = states.get(stateName);
    if (!s) throw new Error(`state "${stateName}" was not made`);
    if (s.db.pooled) skip();
    let cache: { generic: number; custom: number } | undefined;
    const plans = await explainedPlans(s, (t) => step(t, stepArgs(s.d)), {
      before: async (t) => {
        for (let i = 0; i < 10; i++) await step(t, stepArgs(s.d));
        [cache] = await t<{ generic: number; custom: number }[]>`
          select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements
          where statement like '%set settled = settled +%'`;
      },
    });
    expect(cache, 'the statement was prepared on the connection').toBeDefined();
    expect(cache!.custom, `custom plans of ${cache!.custom + cache!.generic} executions`).toBeLessThanOrEqual(5);
    expect(plans).toHaveLength(1);
    const over = readRows(plans[0].Plan).filter((r) => r.rows > RUNNING * 4 + 50);
    expect(over, 'nodes of the generic plan reading beyond the bound').toEqual([]);
  });
});

// In pooler mode the move + claim is a call of `leasehold_step` (migration 043), whose statement
// is planned generic from the first call (`plan_cache_mode = force_generic_plan`, the function's
// own) and kept by the server session. That plan, executed (auto_explain of the nested statement,
// sent back as a notice), must read no more than the statement's own generic plan above. Its
// connection of its own passes settings at startup, which a transaction-mode pooler refuses.
describe.each(STATES)('the database %s', (stateName) => {
  it('the move + claim function runs its generic plan, bounded (skipped through a pooler: startup settings)', async ({
    skip,
  }) => {
    const s = states.get(stateName);
    if (!s) throw new Error(`state "${stateName}" was not made`);
    if (s.db.pooled) skip();
    const plans = await explainedPlans(s, (t) => t`${stepCall(t, stepArgs(s.d))}`, { nested: true });
    // The call's own plan (a function scan) and the statement inside it.
    const step = plans.filter((p) => p['Query Text'].includes('own_update'));
    expect(step, 'the statement inside the function, explained').toHaveLength(1);
    const over = readRows(step[0].Plan).filter((r) => r.rows > RUNNING * 4 + 50);
    expect(over, 'nodes of the generic plan reading beyond the bound').toEqual([]);
    // A generic plan: the fences' gates still read the parameter (a custom plan folds
    // `p_settled > 0` to a constant and drops the fence it rules out).
    expect(JSON.stringify(step[0].Plan)).toContain('"One-Time Filter":"($4 > 0)"');
  });
});
