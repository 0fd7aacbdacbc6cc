// Fan-out under real process faults (issue 17, "Tests"; docs/design.md, "Fan-out"): one batch
// worked by 8 runs in 8 child processes (fixtures/fanout-runner.ts, one Runner each), two of
// them killed with SIGKILL mid-batch and one frozen with SIGSTOP past staleMs, then thawed with
// SIGCONT once its run was taken over. Every update of an item, every change of the batch's
// status and every insert and delete of a run row is recorded by triggers (the idea of
// installAudit in helpers.ts, with the run that held an item before each change), and the
// checks read that record and the items afterwards.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { recoverRunning } from '../../src/batch/sql/index.js';
import { type TestDatabase } from '../support/db.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { waitFor } from '../support/waits.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/fanout-runner.ts', import.meta.url));
const PROCESSES = 8;
const ITEMS = 2_000;
const ITEM_MS = 5;
const BEAT_MS = 100;
const STALE_MS = 1_000;
// Each round: where the faults come (share of the items done), and whether the two spares are
// sent at the faults (they take stale runs over mid-batch) or after the batch (the survivors
// take the stale runs over at its tail, once they left it for want of work).
const ROUNDS = [
  { round: 0, name: 'faults at 15 %, spares sent after the batch', killAt: 0.15, sendSpares: false },
  { round: 1, name: 'faults at 35 %, spares sent at the faults', killAt: 0.35, sendSpares: true },
  { round: 2, name: 'faults at 55 %, spares sent at the faults', killAt: 0.55, sendSpares: true },
];

/** One JSON line a runner process wrote (see fixtures/fanout-runner.ts). */
interface Line {
  type: 'ready' | 'watching' | 'run-started' | 'run-ended' | 'item' | 'exec' | 'store-error' | 'closed';
  runId?: string;
  key?: string;
  attempt?: number;
  outcome?: string;
  ms?: number;
  error?: string | null;
}

/** A runner process of the fixture, with every line it wrote so far. */
class RunnerProcess {
  readonly processId = randomUUID();
  readonly child: ChildProcess;
  readonly lines: Line[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr = '';
  private partial = '';

  constructor(db: TestDatabase, spare = false) {
    const args = [db.url, db.schema, this.processId, String(ITEM_MS), String(BEAT_MS), String(STALE_MS), spare ? 'spare' : ''];
    this.child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(this);
    this.child.stdout!.setEncoding('utf8');
    this.child.stdout!.on('data', (d: string) => {
      const parts = (this.partial + d).split('\n');
      this.partial = parts.pop()!;
      for (const p of parts) if (p) this.lines.push(JSON.parse(p) as Line);
    });
    this.child.stderr!.on('data', (d) => (this.stderr += d));
    this.exited = new Promise((resolve) =>
      this.child.on('exit', (code, signal) => {
        live.delete(this);
        resolve({ code, signal });
      }),
    );
  }

  get pid(): number {
    return this.child.pid!;
  }

  has(type: Line['type'], runId?: string): boolean {
    return this.lines.some((l) => l.type === type && (runId === undefined || l.runId === runId));
  }

  /** The process's state letter in /proc (R, S, T: stopped, Z, …); undefined once it is gone. */
  state(): string | undefined {
    try {
      return /^\d+ \(.*\) (\S)/.exec(readFileSync(`/proc/${this.pid}/stat`, 'utf8'))?.[1];
    } catch {
      return undefined;
    }
  }
}

const live = new Set<RunnerProcess>();
/** The processes the next round starts with, and its spares (idle until sent). */
const fleet: RunnerProcess[] = [];
const nextSpares: RunnerProcess[] = [];

const db = useTestDatabase();
beforeAll(async () => {
  // The audit: every update of an item (with the run that held it before), every status change
  // of a batch, every insert and delete of a run row, numbered from one sequence.
  await db.sql.unsafe(`
    create sequence audit_seq;
    create table audit_items (
      seq bigint primary key default nextval('audit_seq'), batch_id uuid, key text,
      old_state text, state text, old_attempts int, attempts int, old_run_id uuid, run_id uuid);
    create table audit_batches (
      seq bigint primary key default nextval('audit_seq'), id uuid, old_status text, status text);
    create table audit_runs (
      seq bigint primary key default nextval('audit_seq'), op text, id uuid, batch_id uuid, process uuid,
      beat_age_ms float8);
    create function audit_items() returns trigger language plpgsql as $$
    begin
      insert into audit_items (batch_id, key, old_state, state, old_attempts, attempts, old_run_id, run_id)
      values (new.batch_id, new.key, old.state, new.state, old.attempts, new.attempts, old.run_id, new.run_id);
      return null;
    end $$;
    create function audit_batches() returns trigger language plpgsql as $$
    begin
      insert into audit_batches (id, old_status, status) values (new.id, old.status, new.status);
      return null;
    end $$;
    create function audit_runs() returns trigger language plpgsql as $$
    declare r record;
    begin
      if tg_op = 'DELETE' then r := old; else r := new; end if;
      insert into audit_runs (op, id, batch_id, process, beat_age_ms)
      values (tg_op, r.id, r.batch_id, r.process, extract(epoch from now() - r.beat_at) * 1000);
      return null;
    end $$;
    create trigger audit_items after update on leasehold_items for each row execute function audit_items();
    create trigger audit_batches after update of status on leasehold_batches for each row
      when (old.status is distinct from new.status) execute function audit_batches();
    create trigger audit_runs after insert or delete on leasehold_runs for each row execute function audit_runs();
  `);
});
afterAll(async () => {
  for (const p of live) {
    p.child.kill('SIGCONT');
    p.child.kill('SIGKILL');
  }
  await Promise.all([...live].map((p) => p.exited));
});

/** What one round measured (printed, and checked below). */
interface RoundReport {
  round: number;
  killedAtDone: number;
  pendingAtKill: number;
  heldByKilled: number;
  heldByFrozen: number;
  frozenBeatAgeMs: number;
  frozenExecsAcrossFreeze: number;
  frozenRunOutcome: string | undefined;
  maxRuns: number;
  runsStarted: number;
  /** Runs that joined after the first 8: `spare|survivor|thawed@<items done then>`. */
  joins: string[];
  /** How the runs of the batch ended (their processes' word), by outcome. */
  outcomes: Record<string, number>;
  storeErrors: string[];
  /** Seconds from the round's start to: every process ready, all 8 runs, the faults, the frozen run's row deleted, the batch finished. */
  phases: Record<string, number>;
}

async function round({ round: r, killAt, sendSpares }: (typeof ROUNDS)[number]): Promise<RoundReport> {
  const t0 = performance.now();
  const phases: Record<string, number> = {};
  const phase = (name: string) => (phases[name] = Math.round((performance.now() - t0) / 100) / 10);
  // The fleet: the processes left from the round before (the spares it sent among them), and
  // two spares, idle until they are sent (started at the faults of the round before).
  while (fleet.length < PROCESSES) fleet.push(new RunnerProcess(db));
  const procs = [...fleet];
  const spares = nextSpares.splice(0);
  while (sendSpares && spares.length < 2) spares.push(new RunnerProcess(db, true));
  await waitFor('every runner process ready', () => [...procs, ...spares].every((p) => p.has('ready')), {
    timeoutMs: 120_000,
    everyMs: 20,
  });
  phase('ready');

  const items = Array.from({ length: ITEMS }, (_, i) => ({ key: `k${String(i).padStart(4, '0')}` }));
  const { batch } = await createBatch(db.sql, {
    tenant: 'acme',
    datasource: `fanout-kill-${r}`,
    job: 'sleep',
    params: {},
    requestKey: `fanout-kill-${r}`,
    items,
    maxConcurrency: PROCESSES,
  });
  expect(batch.target).toBe(PROCESSES);
  const id = batch.id;

  // Sampled the whole round, each sample one snapshot: never more than maxConcurrency runs
  // (invariant 8), and the counts kept beside the run rows agree with them: the batch's live
  // runs, and its tenant's running runs and open and wanting batches (migration 016).
  let maxRuns = 0;
  const countsOff: unknown[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const [x] = await db.sql<{ n: number; ok: boolean; counts: unknown }[]>`select r.n,
          coalesce(b.live_runs = r.n and t.running = a.running and t.open = a.open and t.wanting = a.wanting,
                   false) as ok,
          json_build_object('runs', r.n, 'live_runs', b.live_runs, 'status', b.status, 'target', b.target,
            'tenant', row_to_json(t), 'actual', row_to_json(a)) as counts
        from (select count(*)::int as n from leasehold_runs where batch_id = ${id}) r
        cross join leasehold_batches b
        left join leasehold_tenants t on t.tenant = b.tenant
        cross join (select count(*)::int as open, coalesce(sum(live_runs), 0)::int as running,
                      count(*) filter (where live_runs < target)::int as wanting
                    from leasehold_batches where tenant = 'acme' and status = 'open') a
        where b.id = ${id}`;
      maxRuns = Math.max(maxRuns, x.n);
      if (!x.ok) countsOff.push(x.counts);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  try {
    const runs = await waitFor(
      'a run of the batch in each of the 8 processes',
      async () => {
        const rows = await db.sql<
          { id: string; process: string }[]
        >`select id, process from leasehold_runs where batch_id = ${id}`;
        return rows.length === PROCESSES ? rows : undefined;
      },
      { timeoutMs: 15_000 },
    );
    phase('joined');
    expect(new Set(runs.map((x) => x.process))).toEqual(new Set(procs.map((p) => p.processId)));

    // Mid-batch (later in each round): kill two processes, freeze a third.
    const threshold = Math.round(ITEMS * killAt);
    const done = () =>
      db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_items where batch_id = ${id} and state = 'done'`.then(
        ([x]) => x.n,
      );
    await waitFor(`${threshold} items done`, async () => (await done()) >= threshold, { timeoutMs: 30_000, everyMs: 5 });
    const [killedA, killedB, frozen] = procs;
    killedA.child.kill('SIGKILL');
    killedB.child.kill('SIGKILL');
    frozen.child.kill('SIGSTOP');
    const frozenFrom = frozen.lines.length;
    if (sendSpares) for (const p of spares) p.child.kill('SIGUSR1');
    while (spares.length < 2) spares.push(new RunnerProcess(db, true));
    // The next round's spares start now, so they are ready when it starts.
    if (r < ROUNDS.length - 1) nextSpares.push(new RunnerProcess(db, true), new RunnerProcess(db, true));
    phase('faults');
    const [{ done: killedAtDone, pending: pendingAtKill }] = await db.sql<{ done: number; pending: number }[]>`select
        count(*) filter (where state = 'done')::int as done, count(*) filter (where state = 'pending')::int as pending
      from leasehold_items where batch_id = ${id}`;
    expect(pendingAtKill, 'the faults came mid-batch').toBeGreaterThan(0);

    // The faults happened: the killed processes died of SIGKILL, the frozen one is stopped.
    for (const k of [killedA, killedB]) expect(await k.exited).toEqual({ code: null, signal: 'SIGKILL' });
    await waitFor('the frozen process stopped', () => frozen.state() === 'T', { timeoutMs: 5_000 });
    const runOf = (p: RunnerProcess) => {
      const x = runs.find((y) => y.process === p.processId);
      if (!x) throw new Error(`no run of process ${p.processId}`);
      return x.id;
    };
    const killedRuns = [runOf(killedA), runOf(killedB)];
    const frozenRun = runOf(frozen);
    const deadRuns = [...killedRuns, frozenRun];

    // The server's evidence of the freeze: the frozen run's beat turns older than staleMs by the
    // database clock; then its row is deleted (taken over, or ended with the batch) while the
    // process is still stopped.
    const frozenBeatAgeMs = await waitFor(
      'the frozen run stale by the database clock',
      async () => {
        const [x] = await db.sql<{ age: number }[]>`select (extract(epoch from now() - beat_at) * 1000)::float8 as age
          from leasehold_runs where id = ${frozenRun}`;
        if (x) return x.age > STALE_MS ? x.age : undefined;
        // Taken over between two looks (a loaded machine polls slowly): its age as the delete saw it.
        const [d] = await db.sql<{ beat_age_ms: number }[]>`select beat_age_ms from audit_runs
          where id = ${frozenRun} and op = 'DELETE'`;
        return d?.beat_age_ms;
      },
      { timeoutMs: 30_000 },
    );
    const gone = await waitFor(
      "the frozen run's row deleted",
      async () => {
        const [x] = await db.sql<{ seq: number; beat_age_ms: number }[]>`select seq::int, beat_age_ms from audit_runs
          where id = ${frozenRun} and op = 'DELETE'`;
        return x;
      },
      { timeoutMs: 30_000, everyMs: 20 },
    );
    phase('frozenTaken');
    expect(gone.beat_age_ms).toBeGreaterThan(STALE_MS);
    expect(frozen.state(), 'still stopped when its run was taken over').toBe('T');

    // Thaw it: its run learns of the loss, and whatever it still writes is fenced.
    frozen.child.kill('SIGCONT');
    await waitFor("the frozen run's end", () => frozen.has('run-ended', frozenRun), { timeoutMs: 15_000 });

    const final = await waitFor(
      'the batch finished',
      async () => {
        const [b] = await db.sql<{ status: string; final_counts: Record<string, number> | null }[]>`select status, final_counts
          from leasehold_batches where id = ${id}`;
        return b.status !== 'open' ? b : undefined;
      },
      { timeoutMs: 40_000, everyMs: 20 },
    );
    phase('finished');
    // The spares replace the killed in the fleet of the next round.
    if (!sendSpares) {
      await waitFor('the spares ready', () => spares.every((p) => p.has('ready')), { timeoutMs: 120_000, everyMs: 20 });
      for (const p of spares) p.child.kill('SIGUSR1');
    }
    await waitFor('the spares watching', () => spares.every((p) => p.has('watching')), { timeoutMs: 10_000 });
    fleet.splice(0, 2, ...spares);
    sampling = false;
    await sampler;

    // --- The checks.
    expect(final.status).toBe('succeeded');
    expect(final.final_counts).toEqual({ pending: 0, running: 0, done: ITEMS, failed: 0 });

    // Every item done, none lost.
    const rows = await db.sql<{ key: string; state: string; attempts: number }[]>`select key, state, attempts
      from leasehold_items where batch_id = ${id} order by key`;
    expect(rows.length).toBe(ITEMS);
    expect(rows.filter((x) => x.state !== 'done')).toEqual([]);

    // Done exactly once: one move to done per item, by a run that held it then, and no change of
    // a done item afterwards.
    const toDone = await db.sql<{ key: string; n: number; run: string }[]>`select key, count(*)::int as n,
        min(run_id::text) as run
      from audit_items where batch_id = ${id} and state = 'done' and old_state <> 'done' group by key`;
    expect(toDone.length).toBe(ITEMS);
    expect(toDone.filter((x) => x.n !== 1)).toEqual([]);
    const [{ n: afterDone }] = await db.sql<{ n: number }[]>`select count(*)::int as n from audit_items
      where batch_id = ${id} and old_state = 'done' and (state <> 'done' or attempts <> old_attempts)`;
    expect(afterDone).toBe(0);
    // What the runs believed they stored agrees: each item's one "done" (from any process) is by
    // the run the database says moved it.
    const doneBy = new Map(toDone.map((x) => [x.key, x.run]));
    const batchRuns = new Set(
      (await db.sql<{ id: string }[]>`select distinct id::text from audit_runs where batch_id = ${id}`).map((x) => x.id),
    );
    const reported = [...procs, ...spares].flatMap((p) =>
      p.lines.filter((l) => l.type === 'item' && l.outcome === 'done' && batchRuns.has(l.runId!)),
    );
    expect(new Set(reported.map((l) => l.key)).size).toBe(reported.length);
    expect(reported.filter((l) => doneBy.get(l.key!) !== l.runId)).toEqual([]);

    // Each crash costs an item at most one attempt: items the dead runs held when they died were
    // recovered (running → pending, attempt counted) by the run that replaced them, and end at 2
    // attempts; every other item at 1.
    const recovered = await db.sql<{ key: string; old_run_id: string; attempts: number }[]>`select key, old_run_id::text,
        attempts from audit_items
      where batch_id = ${id} and old_state = 'running' and state = 'pending' and old_run_id in ${db.sql(deadRuns)}`;
    const held = new Set(recovered.map((x) => x.key));
    expect(held.size, 'a dead run held an item twice').toBe(recovered.length);
    const claimedNotMoved = await db.sql<{ key: string }[]>`select c.key from audit_items c
      where c.batch_id = ${id} and c.old_state = 'pending' and c.state = 'running' and c.run_id in ${db.sql(deadRuns)}
        and not exists (select 1 from audit_items m where m.batch_id = c.batch_id and m.key = c.key
                        and m.old_state = 'running' and m.state <> 'running' and m.old_run_id = c.run_id
                        and m.run_id = c.run_id)`;
    expect(new Set(claimedNotMoved.map((x) => x.key))).toEqual(held);
    expect(rows.filter((x) => (held.has(x.key) ? x.attempts !== 2 : x.attempts !== 1))).toEqual([]);
    const heldBy = (runsOf: string[]) => recovered.filter((x) => runsOf.includes(x.old_run_id)).length;

    // The batch finished once: one change of status, open → succeeded.
    const statuses = await db.sql<{ old_status: string; status: string }[]>`select old_status, status from audit_batches
      where id = ${id} order by seq`;
    expect(statuses).toEqual([{ old_status: 'open', status: 'succeeded' }]);

    // The dead runs' late moves changed nothing: no item change carries a dead run's id after
    // its row was deleted (for the frozen run: its moves after SIGCONT).
    for (const run of deadRuns) {
      const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from audit_items
        where batch_id = ${id} and run_id = ${run}
          and seq > (select seq from audit_runs where id = ${run} and op = 'DELETE')`;
      expect(n, `changes by run ${run} after its row was deleted`).toBe(0);
    }
    const frozenEnd = frozen.lines.find((l) => l.type === 'run-ended' && l.runId === frozenRun);
    expect(frozenEnd?.outcome).toBe('lost');
    // No "done" the frozen run reported after its row was deleted: each is matched above to a
    // move of its own, all before the delete.
    expect(maxRuns).toBeLessThanOrEqual(PROCESSES);
    expect(countsOff.slice(0, 3)).toEqual([]);
    const [{ n: runsStarted }] = await db.sql<{ n: number }[]>`select count(*)::int as n from audit_runs
      where batch_id = ${id} and op = 'INSERT'`;
    // The runs that joined after the first 8: which process, and how many items were done then.
    const later = await db.sql<{ process: string; done: number }[]>`select r.process::text,
        (select count(*)::int from audit_items i where i.batch_id = r.batch_id and i.state = 'done'
           and i.old_state <> 'done' and i.seq < r.seq) as done
      from audit_runs r where r.batch_id = ${id} and r.op = 'INSERT' order by r.seq offset ${PROCESSES}`;
    const who = (process: string) =>
      spares.some((p) => p.processId === process) ? 'spare' : process === frozen.processId ? 'thawed' : 'survivor';
    const joins = later.map((x) => `${who(x.process)}@${x.done}`);
    // How every run of the batch ended, as its process said (the killed said nothing), and the
    // store errors the processes met.
    const ended = [...procs, ...spares].flatMap((p) =>
      p.lines.filter((l) => l.type === 'run-ended' && batchRuns.has(l.runId!)).map((l) => l.outcome!),
    );
    const outcomes = Object.fromEntries([...new Set(ended)].map((o) => [o, ended.filter((x) => x === o).length]));
    const storeErrors = [...procs, ...spares].flatMap((p) =>
      p.lines.filter((l) => l.type === 'store-error').map((l) => String(l.error).slice(0, 160)),
    );

    return {
      round: r,
      killedAtDone,
      pendingAtKill,
      heldByKilled: heldBy(killedRuns),
      heldByFrozen: heldBy([frozenRun]),
      frozenBeatAgeMs: Math.round(frozenBeatAgeMs),
      // Executions of the frozen process whose sleep spanned the freeze: work that finished after
      // SIGCONT and whose moves the fence refused.
      frozenExecsAcrossFreeze: frozen.lines.slice(frozenFrom).filter((l) => l.type === 'exec' && l.ms! > STALE_MS).length,
      frozenRunOutcome: frozenEnd?.outcome,
      maxRuns,
      runsStarted,
      joins,
      outcomes,
      storeErrors,
      phases: { ...phases, total: Math.round((performance.now() - t0) / 100) / 10 },
    };
  } finally {
    sampling = false;
    await sampler;
  }
}

describe('fan-out under killed and frozen processes', () => {
  for (const r of ROUNDS) {
    it(`round ${r.round}, ${r.name}: 8 runs in 8 processes, 2 killed and 1 frozen past staleMs: every item done once, a crash costs one attempt, one finish, the frozen run fenced`, async () => {
      const report = await round(r);
      console.info(`fanout-kill ${JSON.stringify(report)}`);
    }, 180_000);
  }

  it('the processes left stop gracefully on SIGTERM, leaving no run behind', async () => {
    await waitFor('every runner process ready', () => fleet.every((p) => p.has('ready')), { timeoutMs: 40_000, everyMs: 20 });
    for (const p of fleet) p.child.kill('SIGTERM');
    for (const p of fleet) expect((await p.exited).code, p.stderr).toBe(0);
    expect(fleet.every((p) => p.has('closed'))).toBe(true);
    expect(await db.sql`select id from leasehold_runs`).toEqual([]);
  });
});

describe('a recovery racing a claim', () => {
  it("an item another recovery put back, claimed by a run that joined since, stays that run's", async () => {
    // The interleaving the processes above make only by chance, made on purpose: a recovery
    // (of T, the run replacing a dead one) reads the runs as of its snapshot and waits for a
    // lock on the item, while another transaction puts the item back, a new run N joins and
    // claims it. The item stands running under N when the recovery gets to it.
    const { batch } = await createBatch(db.sql, {
      tenant: 'race',
      datasource: 'race',
      job: 'sleep',
      params: {},
      requestKey: 'recovery-race',
      items: [{ key: 'x' }],
      maxConcurrency: 4,
    });
    const [dead, t, n] = [randomUUID(), randomUUID(), randomUUID()];
    await db.sql`insert into leasehold_runs (id, batch_id, process)
      values (${dead}, ${batch.id}, ${randomUUID()}), (${t}, ${batch.id}, ${randomUUID()})`;
    await db.sql`update leasehold_items set state = 'running', attempts = 1, run_id = ${dead} where batch_id = ${batch.id}`;
    await db.sql`delete from leasehold_runs where id = ${dead}`;

    const other = db.connect({ max: 1, applicationName: 'leasehold-test-race-other' });
    const recovering = db.connect({ max: 1, applicationName: 'leasehold-test-race-recovery' });
    let recovery: Promise<number> | undefined;
    await other.begin(async (tx) => {
      await tx`update leasehold_items set state = 'pending', run_id = null where batch_id = ${batch.id}`;
      recovery = recoverRunning(recovering, { batchId: batch.id, run: t, attempts: 3 });
      // The server's word: the recovery waits for the item's lock.
      await waitFor('the recovery waiting for a lock', async () => {
        const [x] = await db.sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
          where application_name = 'leasehold-test-race-recovery' and wait_event_type = 'Lock'`;
        return x.n === 1;
      });
      await tx`insert into leasehold_runs (id, batch_id, process) values (${n}, ${batch.id}, ${randomUUID()})`;
      await tx`update leasehold_items set state = 'running', attempts = 2, run_id = ${n} where batch_id = ${batch.id}`;
    });
    expect(await recovery).toBe(0);
    const [item] = await db.sql<{ state: string; attempts: number; run_id: string }[]>`select state, attempts, run_id::text
      from leasehold_items where batch_id = ${batch.id}`;
    expect(item).toEqual({ state: 'running', attempts: 2, run_id: n });
  });
});
