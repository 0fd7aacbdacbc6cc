// The move + claim of a run in pooler mode goes through migration 043's `leasehold_step`, a
// server-side function whose plans each server session keeps (issue 36), and otherwise through
// `stepStatement`. The two are the same statement written twice: here each of them takes the same
// steps on a batch of its own, and their answers and the rows they leave must be the same.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { encodeMoves, stepCall, stepStatement, type MoveRow, type StepArgs } from '../../src/batch/sql/moves.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

type Way = 'statement' | 'function';

interface Answer {
  moved: number;
  claimed: { key: string; attempts: number; waits: number; due_in_ms: number }[] | null;
  next_due_ms: number | null;
  beat: { surplus: boolean; rate: number | null; paused: boolean; past_deadline: boolean | null } | null;
}

/** A batch of 12 items with one run of its own; its stalled runs at 2, so a first move resets them. */
async function batchWithRun(): Promise<{ batch: string; run: string }> {
  const { batch } = await createBatch(db.sql, newBatch(12, { maxConcurrency: 4 }));
  const run = randomUUID();
  await db.sql`insert into leasehold_runs (id, batch_id, process) values (${run}, ${batch.id}, ${randomUUID()})`;
  await db.sql`update leasehold_batches set live_runs = 1, taken_at = now(), runs = 1, stalled_runs = 2 where id = ${batch.id}`;
  return { batch: batch.id, run };
}

async function stepBy(way: Way, a: StepArgs): Promise<Answer> {
  const f = way === 'function' ? stepCall(db.sql, a) : stepStatement(db.sql, a);
  const [r] = await db.sql<Answer[]>`${f}`;
  return {
    moved: r.moved,
    // Due times are the database clock's at each call: whole seconds compare.
    claimed:
      r.claimed?.map((c) => ({ key: c.key, attempts: c.attempts, waits: c.waits, due_in_ms: Math.round(c.due_in_ms / 1000) })) ??
      null,
    next_due_ms: r.next_due_ms === null ? null : Math.round(r.next_due_ms / 1000),
    beat: r.beat,
  };
}

/** The rows the steps leave: the items (their due time as whole seconds from now), the run's count, the batch's stalled runs. */
async function rowsOf(batch: string, run: string) {
  const items = await db.sql`select key, state, attempts, waits, output, error, run_id = ${run} as ours,
      round(extract(epoch from run_after - now()))::int as due_s
    from leasehold_items where batch_id = ${batch} order by key`;
  const runs =
    await db.sql`select settled, beat_at >= now() - interval '1 minute' as beat_recent from leasehold_runs where id = ${run}`;
  const [b] = await db.sql`select stalled_runs from leasehold_batches where id = ${batch}`;
  return { items: [...items], runs: [...runs], stalledRuns: b.stalled_runs };
}

const moves = (rows: MoveRow[]) => encodeMoves(rows);

async function takeSteps(way: Way) {
  const { batch, run } = await batchWithRun();
  const base = { batchId: batch, run, aheadMs: 0 };
  const answers: Answer[] = [];
  // A claim alone: the run's row is only locked.
  answers.push(await stepBy(way, { ...base, moves: moves([]), claim: 5, recordProgress: false }));
  // Moves of each kind, settling two, with a beat and the batch's progress, and a claim.
  const settledMoves: MoveRow[] = [
    { key: 'k000', state: 'done', claimed: 1, attempts: 1, output: '{"ok":1}', error: null, delayMs: 0 },
    { key: 'k001', state: 'pending', claimed: 1, attempts: 1, output: null, error: 'again', delayMs: 60_000 },
    { key: 'k002', state: 'failed', claimed: 1, attempts: 1, output: null, error: 'boom', delayMs: 0 },
    { key: 'k003', state: 'pending', claimed: 1, attempts: 0, output: null, error: 'wait', delayMs: 0, waits: 1 },
  ];
  const settled = { ...base, moves: moves(settledMoves), settled: 2, claim: 3, recordProgress: true, beat: true };
  answers.push(await stepBy(way, settled));
  // The same moves again (a retry whose first try landed): each counts as moved, nothing is claimed.
  answers.push(await stepBy(way, { ...settled, claim: 0, recordProgress: false }));
  // Moves without a settled item (a retry and a give-back) and a claim further ahead.
  answers.push(
    await stepBy(way, {
      ...base,
      moves: moves([{ key: 'k004', state: 'pending', claimed: 1, attempts: 1, output: null, error: 'x', delayMs: 30_000 }]),
      claim: 20,
      aheadMs: 45_000,
      recordProgress: false,
    }),
  );
  const kept = await rowsOf(batch, run);
  // The run lost its lease: nothing moves, nothing is claimed, the beat says so.
  await db.sql`delete from leasehold_runs where id = ${run}`;
  answers.push(
    await stepBy(way, {
      ...base,
      moves: moves([{ key: 'k005', state: 'done', claimed: 1, attempts: 1, output: null, error: null, delayMs: 0 }]),
      settled: 1,
      claim: 4,
      recordProgress: false,
      beat: true,
    }),
  );
  return { answers, kept, lost: await rowsOf(batch, run) };
}

describe('the move + claim as a server-side function (pooler mode)', () => {
  it('answers and writes as the statement does, step by step', async () => {
    const byStatement = await takeSteps('statement');
    const byFunction = await takeSteps('function');
    expect(byFunction).toEqual(byStatement);
    // And what they did is what each step asked for (so the comparison is not of two no-ops).
    // A statement reads the batch as it stood when it began: the items its own moves made
    // pending are neither claimed by it nor its next due time (the next statement sees them).
    const [claim, move, again, ahead, lost] = byStatement.answers;
    expect(claim.claimed?.map((c) => c.key)).toEqual(['k000', 'k001', 'k002', 'k003', 'k004']);
    expect(move).toMatchObject({ moved: 4, next_due_ms: null });
    expect(move.claimed?.map((c) => c.key)).toEqual(['k005', 'k006', 'k007']);
    expect(move.beat).toEqual({ surplus: false, rate: null, paused: false, past_deadline: null });
    expect(again).toMatchObject({ moved: 4, claimed: null, next_due_ms: 60 });
    // By due time: the items never claimed, then k003, given back (due again at once, one
    // Retry-After wait counted); k001 is due in 60 s, past the 45 s window.
    expect(ahead.moved).toBe(1);
    expect(ahead.claimed?.map((c) => [c.key, c.waits])).toEqual([
      ['k008', 0],
      ['k009', 0],
      ['k010', 0],
      ['k011', 0],
      ['k003', 1],
    ]);
    expect(ahead.next_due_ms).toBe(60);
    expect(lost).toEqual({ moved: 0, claimed: null, next_due_ms: 30, beat: null });
    // The run's count of settled items counts what each statement sent: the retry's 2 again.
    expect(byStatement.kept.runs).toEqual([{ settled: 4, beat_recent: true }]);
    expect(byStatement.kept.stalledRuns).toBe(0);
    const item = (key: string) => byStatement.lost.items.find((i) => i.key === key);
    expect(item('k000')).toMatchObject({ state: 'done', attempts: 1, output: { ok: 1 } });
    expect(item('k002')).toMatchObject({ state: 'failed', error: 'boom' });
    expect(item('k003')).toMatchObject({ state: 'running', attempts: 1, waits: 1, ours: true });
    expect(item('k005')).toMatchObject({ state: 'running', attempts: 1 });
  });
});
