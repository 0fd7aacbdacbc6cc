// Lease benchmarks (part of `npm run bench`; `BENCH_ONLY=lease` runs only these):
//   1. convergence of 20 processes over 10,000 units (all at once, and joining one at a time),
//      units moved by one joining 19, and the spread of 10 processes over 3 units of weight 500
//      and 3,000 of weight 1; a round is a heartbeat and a tick of every process, at once;
//   2. retire time: the real scheduler and workers in this process (scheduler every second,
//      heartbeats and rebalancing every 250 ms), the desired count from 10 to 3 and back;
//   3. tick latency at 1,000 / 100,000 / 1,000,000 units: claim ticks (from unowned units and
//      from an expired owner) and steady-state ticks, on a fresh schema and on the run's lived-in
//      schema (bench/sides.ts: besides the bench's units, its 10,000 idle history units of weight 0);
//   4. statements an idle process sends per minute under `run()`, counted through postgres.js's
//      `debug` hook, with the server's row counters as a cross-check.
// Every part works in its own schema, dropped at the end; part 3's lived-in side deletes its own
// units and processes from the shared lived-in schema instead.
import { Leaser, putTenantUnits, deleteTenantUnits, setDesired, type Reconciler } from '../src/lease/index.js';
import { loadConfig } from '../src/runtime/index.js';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { inProcessFleet } from '../test/support/fleet.js';
import { inTurn, type Side, type SideName } from './sides.js';

const SIZES = (process.env.BENCH_LEASE_SIZES ?? '1000,100000,1000000').split(',').map(Number);
const TICKS = Number(process.env.BENCH_LEASE_TICKS ?? 20);
const IDLE_S = Number(process.env.BENCH_IDLE_S ?? 20);
const CONV_PROCESSES = 20;
const CONV_UNITS = 10_000;
/** Units per process in the latency part: fair share stays 1,000 at every size. */
const PER_PROCESS = 1000;

const noop: Reconciler = { unitsGained() {}, unitsLost() {}, inFlight: () => 0 };

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const pct = (xs: number[], p: number) => sorted(xs)[Math.min(xs.length - 1, Math.max(0, Math.ceil(p * xs.length) - 1))];
const ms = (x: number) => `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`;
const s = (x: number) => `${(x / 1000).toFixed(2)} s`;
const fmt = (n: number) => n.toLocaleString('en-US');

/** A process id that SQL can compute too: `pid(k)` = `'00000000-0000-4000-8000-' || lpad(to_hex(k), 12, '0')`. */
const pid = (k: number) => `00000000-0000-4000-8000-${k.toString(16).padStart(12, '0')}`;
const PID_SQL = `('00000000-0000-4000-8000-' || lpad(to_hex(%), 12, '0'))::uuid`;

/** A schema with the migrations applied; `drop()` removes it. */
async function schemaOn(url: string, admin: Sql, name: string): Promise<{ name: string; sql: Sql; drop(): Promise<void> }> {
  const schema = `bench_lease_${name}_${Date.now()}`;
  await admin`create schema ${admin(schema)}`;
  const sql = connect(url, { max: 2, schema });
  await migrate(sql);
  return {
    name: schema,
    sql,
    async drop() {
      await sql.end();
      await admin`drop schema ${admin(schema)} cascade`;
    },
  };
}

/** One round: every process heartbeats, then every process ticks, all at once. */
async function round(ls: Leaser[]): Promise<{ claimed: number; shed: number }> {
  await Promise.all(ls.map((l) => l.heartbeat()));
  const r = await Promise.all(ls.map((l) => l.tick()));
  return { claimed: r.reduce((a, x) => a + x.claimed, 0), shed: r.reduce((a, x) => a + x.shed, 0) };
}

async function stopAll(ls: Leaser[]): Promise<void> {
  for (const l of ls) {
    await l.release();
    await l.deleteProcess();
  }
}

async function ownersOf(sql: Sql): Promise<Map<string, string | null>> {
  const rows = await sql<
    { tenant: string; shard: number; owner: string | null }[]
  >`select tenant, shard, owner from leasehold_units`;
  return new Map(rows.map((r) => [`${r.tenant}/${r.shard}`, r.owner]));
}

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const r = await f();
  return [r, performance.now() - t0];
}

// ---------------------------------------------------------------------------------------------
// 1. Registration cost and convergence

async function convergence(url: string, admin: Sql, log: (line: string) => void): Promise<void> {
  const db = await schemaOn(url, admin, 'conv');
  const pools: Sql[] = [];
  try {
    // Registration through the public API (one statement per call; the units-total trigger
    // runs once per row).
    const reg: string[] = [];
    for (const shards of [2500, 5000]) {
      const [, tPut] = await timed(() => putTenantUnits(db.sql, `reg${shards}`, { job: 'noop', shards }));
      const [, tDel] = await timed(() => deleteTenantUnits(db.sql, `reg${shards}`));
      reg.push(`${fmt(shards)} shards ${ms(tPut)} (delete ${ms(tDel)})`);
    }
    const [, tPut] = await timed(() => putTenantUnits(db.sql, 'bench', { job: 'noop', shards: CONV_UNITS }));
    reg.push(`${fmt(CONV_UNITS)} shards ${ms(tPut)}`);
    log(`register units, putTenantUnits: ${reg.join('; ')}`);

    for (let i = 0; i < CONV_PROCESSES; i++) pools.push(connect(url, { max: 1, schema: db.name }));
    const fair = CONV_UNITS / CONV_PROCESSES;
    const converged = (ls: Leaser[]) => ls.length === CONV_PROCESSES && ls.every((l) => l.owned().length === fair);
    const counts = (ls: Leaser[]) => ls.map((l) => l.owned().length);
    const spread = (ls: Leaser[]) => {
      const n = counts(ls);
      return `min ${Math.min(...n)}, max ${Math.max(...n)} units per process, ${n.reduce((a, x) => a + x, 0)} of ${CONV_UNITS} owned`;
    };
    const checkStore = async (ls: Leaser[]) => {
      const rows = await db.sql<
        { owner: string | null; n: number }[]
      >`select owner, count(*) as n from leasehold_units group by owner`;
      const byOwner = new Map(rows.map((r) => [r.owner, r.n]));
      for (const l of ls) {
        if ((byOwner.get(l.processId) ?? 0) !== l.owned().length) throw new Error(`store and leaser disagree on ${l.processId}`);
      }
      return byOwner.get(null) ?? 0;
    };

    // All at once: every process heartbeats, then rounds (a heartbeat and a tick of every
    // process, at once, as their 5 s intervals do).
    {
      const ls = pools.map((p) => new Leaser(p, {}, noop));
      const t0 = performance.now();
      await Promise.all(ls.map((l) => l.heartbeat()));
      let rounds = 0;
      while (!converged(ls) && rounds < 50) {
        await round(ls);
        rounds++;
      }
      const t = performance.now() - t0;
      const unowned = await checkStore(ls);
      if (converged(ls) && unowned === 0) {
        log(
          `convergence, ${CONV_PROCESSES} processes at once, ${fmt(CONV_UNITS)} units: ${rounds} ticks (rounds), ${s(t)} to ${fair} units each`,
        );
      } else {
        log(`convergence, ${CONV_PROCESSES} processes at once: NOT converged after ${rounds} ticks (${s(t)}): ${spread(ls)}`);
      }
      await stopAll(ls);
    }

    // Joining one at a time: each join (heartbeat) is followed by a round of all live processes;
    // after the last join, rounds go on until every process owns 400..600 units and every unit
    // is owned (T), then until nothing moved for 3 rounds (at most 50 in all).
    {
      const ls: Leaser[] = [];
      const t0 = performance.now();
      for (const p of pools) {
        const l = new Leaser(p, {}, noop);
        await l.heartbeat();
        ls.push(l);
        await round(ls);
      }
      const within = async () => counts(ls).every((n) => n >= 0.8 * fair && n <= 1.2 * fair) && (await checkStore(ls)) === 0;
      let extra = 0;
      let at: { ticks: number; counts: number[] } | undefined = (await within()) ? { ticks: 0, counts: counts(ls) } : undefined;
      let still = 0;
      let moves = 0;
      while (extra < 50 && still < 3) {
        const r = await round(ls);
        extra++;
        if (at) moves += r.claimed + r.shed;
        still = r.claimed === 0 && r.shed === 0 ? still + 1 : 0;
        if (!at && (await within())) at = { ticks: extra, counts: counts(ls) };
      }
      const t = performance.now() - t0;
      if (at) {
        log(
          `convergence, ${CONV_PROCESSES} processes joining one at a time: ${at.ticks} ticks, min ${Math.min(...at.counts)}, max ${Math.max(...at.counts)} units (fair share ${fair})`,
        );
        log(
          `  (ticks after the last join until every process owned ${0.8 * fair}..${1.2 * fair} units and every unit was owned; ` +
            `then ${moves} units moved until stable, ${spread(ls)}; ${s(t)} in all)`,
        );
      } else {
        log(
          `convergence, ${CONV_PROCESSES} processes joining one at a time: NOT within ${0.8 * fair}..${1.2 * fair} after ${extra} ticks ` +
            `(${s(t)}; stable for ${still} rounds): ${spread(ls)}; owned: ${counts(ls).join(' ')}`,
        );
      }
      await stopAll(ls);
    }

    // One joins 19 at fair share: units moved (goal: at most ceil(total / 20) + 19).
    {
      const ls = pools.slice(0, CONV_PROCESSES - 1).map((p) => new Leaser(p, {}, noop));
      await Promise.all(ls.map((l) => l.heartbeat()));
      for (let i = 0; i < 10; i++) await round(ls);
      const before = await ownersOf(db.sql);
      const late = new Leaser(pools[CONV_PROCESSES - 1], {}, noop);
      await late.heartbeat();
      ls.push(late);
      for (let i = 0; i < 10; i++) await round(ls);
      const after = await ownersOf(db.sql);
      let moved = 0;
      for (const [k, o] of after) if (before.get(k) !== o) moved++;
      const bound = Math.ceil(CONV_UNITS / CONV_PROCESSES) + CONV_PROCESSES - 1;
      log(
        `one process joining ${CONV_PROCESSES - 1}: ${moved} units moved over 10 ticks (bound ceil(total/(N+1)) + N = ${bound}); ${spread(ls)}`,
      );
      await stopAll(ls);
    }

    // Heavy units: 10 processes over 3 units of weight 500 and 3,000 of weight 1, at once.
    {
      await deleteTenantUnits(db.sql, 'bench');
      await putTenantUnits(db.sql, 'heavy', { job: 'noop', shards: 3, weight: 500 });
      await putTenantUnits(db.sql, 'light', { job: 'noop', shards: 3000, weight: 1 });
      const ls = pools.slice(0, 10).map((p) => new Leaser(p, {}, noop));
      await Promise.all(ls.map((l) => l.heartbeat()));
      let rounds = 0;
      let still = 0;
      while (rounds < 50 && still < 3) {
        const r = await round(ls);
        rounds++;
        still = r.claimed === 0 && r.shed === 0 ? still + 1 : 0;
      }
      const weights = ls.map((l) => l.owned().reduce((a, u) => a + u.weight, 0));
      const light = ls.filter((l) => l.owned().every((u) => u.weight === 1)).map((l) => l.owned().length);
      const split = 3000 / light.length;
      log(
        `heavy units, 10 processes over 3 units of weight 500 + 3,000 of weight 1: min ${Math.min(...weights)}, max ${Math.max(...weights)} weight; ` +
          `the ${light.length} without a heavy unit: min ${Math.min(...light)}, max ${Math.max(...light)} (even split of the light weight ${split.toFixed(1)}, ±20 %: ` +
          `${(0.8 * split).toFixed(1)}..${(1.2 * split).toFixed(1)}); stable after ${rounds - still} ticks (fair share ${ls[0].share()?.fairShare})`,
      );
      await stopAll(ls);
    }
  } finally {
    await Promise.all(pools.map((p) => p.end()));
    await db.drop();
  }
}

// ---------------------------------------------------------------------------------------------
// 2. The live count following the desired count

const SCHEDULER_MS = 1_000;

/**
 * 600 units; desired 10, then 3, then 10 again. The scheduler runs every second from the start
 * (its grid does not wait for the change); each figure is the time from the change until the
 * live fleet processes number the new count (database clock), and until every unit is owned by
 * a live process again, each within ±20 % of an even split.
 */
async function retire(url: string, admin: Sql, log: (line: string) => void): Promise<void> {
  const db = await schemaOn(url, admin, 'retire');
  const sql = connect(url, { max: 24, schema: db.name });
  const config = loadConfig({
    DATABASE_URL: url,
    LEASEHOLD_TTL_MS: '3000',
    LEASEHOLD_HEARTBEAT_MS: '250',
    LEASEHOLD_REBALANCE_MS: '250',
    LEASEHOLD_SWEEP_CUTOFF_MS: '3000',
    LEASEHOLD_WORKER_POLL_MS: '100',
    LEASEHOLD_INVOCATION_PENDING_MS: '1000',
  });
  const fleet = inProcessFleet(sql, config);
  let ticks = 0;
  let stop = false;
  const scheduler = (async () => {
    while (!stop) {
      const next = Date.now() + SCHEDULER_MS;
      await fleet.tick();
      ticks++;
      await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    }
  })();
  const even = async (n: number) => {
    const rows = await sql<
      { weight: number }[]
    >`select (select count(*) from leasehold_units u where u.owner = p.id)::int as weight
      from leasehold_processes p where p.expires_at > now() and p.role = 'fleet' and not p.retiring`;
    const [{ orphaned }] = await sql<{ orphaned: number }[]>`select count(*) as orphaned from leasehold_units u
      where not exists (select 1 from leasehold_processes p where p.id = u.owner and p.expires_at > now())`;
    return orphaned === 0 && rows.length === n && rows.every((r) => r.weight >= (0.8 * 600) / n && r.weight <= (1.2 * 600) / n);
  };
  const change = async (to: number) => {
    const t0 = performance.now();
    const tick0 = ticks;
    await setDesired(sql, to);
    let live: number | undefined;
    let liveTicks = 0;
    for (;;) {
      const l = await fleet.live();
      if (live === undefined && l.fleet === to && l.retiring === 0) {
        live = performance.now() - t0;
        liveTicks = ticks - tick0;
      }
      if (live !== undefined && (await even(to))) return { live, liveTicks, owned: performance.now() - t0 };
      if (performance.now() - t0 > 30_000) throw new Error(`desired ${to} not reached in 30 s: ${JSON.stringify(l)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    await putTenantUnits(sql, 'bench', { job: 'noop', shards: 600 });
    await change(10);
    const down = await change(3);
    log(
      `retire, desired 10 → 3: live 3 after ${s(down.live)} (${down.liveTicks} scheduler run${down.liveTicks === 1 ? '' : 's'}, every ${SCHEDULER_MS / 1000} s; heartbeats every 250 ms), ` +
        `every unit owned again, each process within ±20 %, after ${s(down.owned)}`,
    );
    const up = await change(10);
    log(
      `desired 3 → 10: live 10 after ${s(up.live)} (${up.liveTicks} scheduler run${up.liveTicks === 1 ? '' : 's'}), every unit owned, each within ±20 %, after ${s(up.owned)}`,
    );
  } finally {
    stop = true;
    await scheduler;
    await fleet.stop();
    await sql.end();
    await db.drop();
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Tick latency by number of units

/**
 * N units, N / 1000 live processes each owning 1,000 units (fair share 1,000 at every size), so
 * that only the size of the tables changes between sizes. Units are inserted in one statement
 * with the units-total trigger disabled (with it, a bulk insert is quadratic: see the report),
 * then `vacuum analyze`.
 */
async function latency(url: string, db: { name: string; sql: Sql }, n: number): Promise<Latency> {
  const sql = db.sql;
  const pools: Sql[] = [];
  const figures: Latency['figures'] = [];
  let setup: string;
  try {
    const processes = Math.max(1, Math.floor(n / PER_PROCESS));
    const [, tInsert] = await timed(() =>
      sql.begin(async (tx) => {
        const t = tx as unknown as Sql;
        await t.unsafe(`insert into leasehold_processes (id, hostname, version, expires_at)
          select ${PID_SQL.replace('%', 'k')}, 'bench', 'bench', now() + interval '1 hour' from generate_series(0, ${processes - 1}) k`);
        await t.unsafe(`insert into leasehold_units (tenant, shard, job, weight, owner, claimed_at)
          select 't' || lpad((i / 10000)::text, 4, '0'), i % 10000, 'noop', 1, ${PID_SQL.replace('%', `(i / ${PER_PROCESS})`)}, now()
          from generate_series(0, ${n - 1}) i`);
        // The statement-level totals trigger keeps the totals in one write.
      }),
    );
    const [, tVacuum] = await timed(() =>
      sql.unsafe('vacuum analyze leasehold_units, leasehold_processes, leasehold_unit_totals'),
    );
    setup = `insert ${s(tInsert)} (one statement), vacuum analyze ${s(tVacuum)}`;

    // Statements sent by the measured ticks, counted through postgres.js's debug hook.
    let statements = 0;
    let counting = false;
    const pool = () => {
      const p = connect(url, { max: 1, schema: db.name });
      (p as unknown as { options: { debug: unknown } }).options.debug = () => {
        if (counting) statements++;
      };
      pools.push(p);
      return p;
    };
    const measure = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
      counting = true;
      try {
        return await timed(f);
      } finally {
        counting = false;
      }
    };
    const line = (what: string, xs: number[]) => {
      figures.push({ what, ticks: xs, statementsPerTick: statements / xs.length });
      statements = 0;
    };

    // Steady state: process 0 owns its fair share; ticks claim and shed nothing. The leaser
    // takes over process 0's row once expired (a row of another instance: its units are freed,
    // never inherited), then claims its 1,000 units.
    await sql`update leasehold_processes set expires_at = now() - interval '1 second' where id = ${pid(0)}`;
    const steady = new Leaser(pool(), { processId: pid(0), ttlMs: 3_600_000, heartbeatIntervalMs: 60_000 }, noop);
    await steady.heartbeat();
    await steady.tick();
    if (steady.owned().length !== PER_PROCESS) throw new Error(`steady process owns ${steady.owned().length}`);
    const tSteady: number[] = [];
    for (let i = 0; i < TICKS; i++) {
      const [r, t] = await measure(() => steady.tick());
      if (r.claimed !== 0 || r.shed !== 0) throw new Error(`steady tick moved units: ${JSON.stringify(r)}`);
      tSteady.push(t);
    }
    line(`steady tick (owns ${fmt(PER_PROCESS)}, nothing to claim or shed)`, tSteady);

    // Claim from unowned units: process 0 stops gracefully (its units become unowned); a fresh
    // process claims its fair share (1,000 units, 16 claim statements) each tick, then releases.
    await steady.release();
    await steady.deleteProcess();
    const fresh = new Leaser(pool(), { ttlMs: 3_600_000, heartbeatIntervalMs: 60_000 }, noop);
    await fresh.heartbeat();
    const tClaim: number[] = [];
    for (let i = 0; i < TICKS; i++) {
      const [r, t] = await measure(() => fresh.tick());
      if (r.claimed !== PER_PROCESS) throw new Error(`claim tick claimed ${r.claimed}, expected ${PER_PROCESS}`);
      tClaim.push(t);
      if (i < TICKS - 1) await fresh.release();
    }
    line(`claim tick, ${fmt(PER_PROCESS)} unowned units`, tClaim);

    // Claim from an expired process: `fresh` (owning 1,000) expires; each tick a new process
    // takes its units through the owner index; they are then handed back to the expired one.
    await sql`update leasehold_processes set expires_at = now() - interval '1 second' where id = ${fresh.processId}`;
    const tTake: number[] = [];
    for (let i = 0; i < TICKS; i++) {
      const taker = new Leaser(pools[1], { ttlMs: 3_600_000, heartbeatIntervalMs: 60_000 }, noop);
      await taker.heartbeat();
      const [r, t] = await measure(() => taker.tick());
      if (r.claimed !== PER_PROCESS) throw new Error(`takeover tick claimed ${r.claimed}, expected ${PER_PROCESS}`);
      tTake.push(t);
      await sql`update leasehold_units set owner = ${fresh.processId} where owner = ${taker.processId}`;
      await taker.deleteProcess();
    }
    line(`claim tick, ${fmt(PER_PROCESS)} units of an expired process`, tTake);

    // Expired processes that own nothing any more (crashed workers whose units were taken
    // over; the sweep deletes them only after sweepCutoffMs, 1 h): first as many as live ones,
    // then 5 times as many, each time followed by `analyze` as autovacuum would. A fresh process
    // claims 1,000 unowned units per tick as above.
    await sql`update leasehold_units set owner = null where owner = ${fresh.processId}`;
    const late = new Leaser(pools[1], { ttlMs: 3_600_000, heartbeatIntervalMs: 60_000 }, noop);
    let expired = 1; // `fresh`
    for (const [times, ticks] of [
      [1, 5],
      [5, 3],
    ] as const) {
      await sql`insert into leasehold_processes (id, hostname, version, expires_at)
        select gen_random_uuid(), 'bench', 'bench', now() - interval '10 minutes' from generate_series(1, ${times * processes - expired})`;
      expired = times * processes;
      await sql`analyze leasehold_processes`;
      await late.heartbeat();
      const tLate: number[] = [];
      for (let i = 0; i < Math.min(TICKS, ticks); i++) {
        const [r, t] = await measure(() => late.tick());
        if (r.claimed !== PER_PROCESS) throw new Error(`claim tick claimed ${r.claimed}, expected ${PER_PROCESS}`);
        tLate.push(t);
        await late.release();
      }
      line(
        `claim tick, ${fmt(PER_PROCESS)} unowned units, ${fmt(expired)} expired process${expired === 1 ? '' : 'es'} owning nothing`,
        tLate,
      );
    }
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
  return { processes: Math.max(1, Math.floor(n / PER_PROCESS)), setup, figures };
}

/** What {@link latency} measured at one size. */
interface Latency {
  processes: number;
  /** Insert and vacuum times of the setup. */
  setup: string;
  /** Per kind of tick: the tick times, ms, and the statements sent per tick. */
  figures: { what: string; ticks: number[]; statementsPerTick: number }[];
}

/** Remove what {@link latency} wrote into a schema that stays (the lived-in one): its units (tenants `t0000`…) and every process. */
async function cleanLatency(sql: Sql): Promise<void> {
  await sql`delete from leasehold_units where tenant ~ '^t[0-9]{4}$'`;
  await sql`delete from leasehold_processes`;
  await sql.unsafe('vacuum analyze leasehold_units, leasehold_processes, leasehold_unit_totals');
}

/**
 * Tick latency at `n` units on a fresh schema and on the lived-in one (beside its idle history
 * units of weight 0), the order flipping from size to size; one line per kind of tick with both.
 */
async function latencyBothSides(url: string, admin: Sql, lived: Side, n: number, turn: number, log: (line: string) => void) {
  const results: Partial<Record<SideName, Latency>> = {};
  for (const side of inTurn(turn, [{ name: 'fresh' as const }, { name: 'lived-in' as const }])) {
    if (side.name === 'fresh') {
      const db = await schemaOn(url, admin, `n${n}`);
      try {
        results.fresh = await latency(url, db, n);
      } finally {
        await db.drop();
      }
    } else {
      try {
        results['lived-in'] = await latency(url, { name: lived.schema, sql: lived.sql }, n);
      } finally {
        await cleanLatency(lived.sql);
      }
    }
  }
  const fresh = results.fresh!;
  const livedIn = results['lived-in']!;
  log(
    `${fmt(n)} units, ${fmt(fresh.processes)} live process${fresh.processes === 1 ? '' : 'es'} of ${fmt(PER_PROCESS)} units each: ` +
      `fresh ${fresh.setup}; lived-in ${livedIn.setup}`,
  );
  fresh.figures.forEach((f, i) => {
    const l = livedIn.figures[i];
    const side = (x: { ticks: number[]; statementsPerTick: number }) =>
      `median ${ms(pct(x.ticks, 0.5))}, p95 ${ms(pct(x.ticks, 0.95))}, ${x.statementsPerTick.toFixed(1)} statements/tick`;
    log(
      `  ${f.what}: fresh ${side(f)}; lived-in ${side(l)} (${(pct(l.ticks, 0.5) / pct(f.ticks, 0.5)).toFixed(2)}× fresh median; ${f.ticks.length} ticks each)`,
    );
  });
}

// ---------------------------------------------------------------------------------------------
// 4. Statements of idle processes

type Kind = 'write' | 'read' | 'other';
/** INSERT / UPDATE / DELETE anywhere in the statement (row locks of `for update` aside). */
function kindOf(statement: string): Kind {
  const q = statement.toLowerCase().replace(/\bfor\s+update\b/g, '');
  if (/\b(insert|update|delete)\b/.test(q)) return 'write';
  if (/^\s*(select|with)\b/.test(q)) return 'read';
  return 'other';
}
const labelOf = (statement: string) => {
  const q = statement.toLowerCase();
  if (q.includes('insert into leasehold_processes')) return 'heartbeat';
  if (q.includes('update leasehold_units u set owner =')) return 'claim';
  if (q.includes('delete from leasehold_processes')) return 'sweep/delete';
  if (q.includes('update leasehold_units')) return 'release';
  return q.includes('from leasehold_units') ? 'owned units' : q.includes('leasehold_unit_totals') ? 'share state' : 'other';
};

/**
 * Three processes over 100 units (fair share 34: one owns 34, two own 33), all converged, then
 * `run()` with heartbeat and rebalance every 5 s for IDLE_S seconds. Statements are counted per
 * process in the window (0.5 s, IDLE_S + 0.5 s] after the start, which holds IDLE_S / 5 of each
 * interval; the first tick at 0 s is outside it.
 */
async function idle(url: string, admin: Sql, log: (line: string) => void): Promise<void> {
  const db = await schemaOn(url, admin, 'idle');
  const pools = Array.from({ length: 3 }, () => connect(url, { max: 1, schema: db.name }));
  try {
    await putTenantUnits(db.sql, 'bench', { job: 'noop', shards: 100 });
    const cfg = { heartbeatIntervalMs: 5_000, rebalanceIntervalMs: 5_000 };
    const ls = pools.map((p) => new Leaser(p, cfg, noop));
    await Promise.all(ls.map((l) => l.heartbeat()));
    for (let i = 0; i < 10; i++) await Promise.all(ls.map((l) => l.tick()));
    // The row counters of the setup are reported now (each backend flushes its pending counters
    // at once; the schema pool's backend exits), so the server-side figures below hold the run only.
    await Promise.all(pools.map((p) => p`select pg_stat_force_next_flush()`));
    await db.sql.end();
    await new Promise((r) => setTimeout(r, 300));
    const counts = ls.map(() => ({ write: 0, read: 0, other: 0, labels: new Map<string, number>() }));
    let t0 = 0;
    pools.forEach((p, i) => {
      (p as unknown as { options: { debug: unknown } }).options.debug = (_c: number, q: string) => {
        const t = performance.now() - t0;
        if (t <= 500 || t > IDLE_S * 1000 + 500) return;
        counts[i][kindOf(q)]++;
        const label = `${labelOf(q)} (${kindOf(q)})`;
        counts[i].labels.set(label, (counts[i].labels.get(label) ?? 0) + 1);
      };
    });
    const stats = () => admin<{ relname: string; ins: number; upd: number; hot: number; del: number }[]>`select relname,
        n_tup_ins as ins, n_tup_upd as upd, n_tup_hot_upd as hot, n_tup_del as del
      from pg_stat_user_tables where schemaname = ${db.name} and relname in ('leasehold_processes', 'leasehold_units')
      order by relname`;
    const before = await stats();
    const ctl = new AbortController();
    t0 = performance.now();
    const running = ls.map((l) => l.run(ctl.signal));
    await new Promise((r) => setTimeout(r, IDLE_S * 1000 + 1000));
    ctl.abort();
    await Promise.all(running);
    const perMin = 60 / IDLE_S;
    log(`idle processes (heartbeat and rebalance every 5 s, sweep every 10 min; ${IDLE_S} s measured, per minute):`);
    const fairShare = Math.ceil(100 / ls.length);
    ls.forEach((l, i) => {
      const c = counts[i];
      const owned = l.owned().length;
      const detail = [...c.labels].map(([k, v]) => `${k} ${v * perMin}`).join(', ');
      const why = owned >= fairShare ? 'at fair share' : `below fair share ${fairShare}, nothing claimable`;
      log(`  owns ${owned} units (${why}): ${c.write * perMin} writes/min, ${c.read * perMin} reads/min [${detail}]`);
    });
    // Server-side: rows actually written during the run (all 3 processes, window and first tick
    // included); the backends report their counters when they exit.
    await Promise.all(pools.map((p) => p.end()));
    await new Promise((r) => setTimeout(r, 300));
    const after = await stats();
    const delta = after.map((a) => {
      const b = before.find((x) => x.relname === a.relname)!;
      return `${a.relname} ${a.upd - b.upd} updated (${a.hot - b.hot} HOT), ${a.ins - b.ins} inserted, ${a.del - b.del} deleted`;
    });
    log(`  rows the 3 processes wrote in ${IDLE_S + 1} s of run() (server counters): ${delta.join('; ')}`);
    log(
      `  expected from the design: ${60_000 / cfg.heartbeatIntervalMs} heartbeats/min per process, no write from an idle tick; + 1 sweep per 10 min per process (outside the window)`,
    );
  } finally {
    await Promise.all(pools.map((p) => p.end()));
    await admin`drop schema ${admin(db.name)} cascade`;
  }
}

/**
 * Runs every lease benchmark against `url`, printing one line per figure: tick latency on a fresh
 * schema and on `lived` (the run's lived-in schema) side by side, the rest on fresh schemas only.
 */
export async function leaseBench(url: string, lived: Side, log: (line: string) => void = console.log): Promise<void> {
  const admin = connect(url, { max: 1 });
  try {
    const t0 = performance.now();
    const [{ version }] = await admin<{ version: string }[]>`select current_setting('server_version') as version`;
    log(`lease: PostgreSQL ${version}; ${TICKS} ticks per figure; convergence, retire and idle on fresh schemas only`);
    await convergence(url, admin, log);
    await retire(url, admin, log);
    let turn = 0;
    for (const n of SIZES) await latencyBothSides(url, admin, lived, n, turn++, log);
    await idle(url, admin, log);
    log(`lease benchmarks took ${s(performance.now() - t0)}`);
  } finally {
    await admin.end();
  }
}
