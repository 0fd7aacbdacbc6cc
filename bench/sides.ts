// The two databases every headline figure of `npm run bench` is measured on, side by side
// (docs/design.md, "The database in production"): a fresh schema (migrated, empty) and a lived-in
// one (migrated, then loaded with history by test/support/history.ts and analyzed). The lived-in
// schema is loaded once per bench run and shared by every part; each part deletes only its own
// rows from it (tenant `bench`, or its own units and processes), so the history stays.
//
// BENCH_HISTORY_SCHEMA=name keeps the lived-in schema under that name after the run and reuses it
// on the next run when it holds history of the same sizes (a marker table records them); without
// it the schema is `bench_lived_<now>`, dropped at the end.
// BENCH_HISTORY_ITEMS, BENCH_HISTORY_BATCHES, BENCH_HISTORY_UNITS and BENCH_HISTORY_OUTBOX set the
// history's size (defaults 5,000,000 items in 250 batches over 50 tenants, 10,000 units,
// 1,000,000 delivered outbox messages).
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { connect, migrate, type Sql } from '../src/store/index.js';
import { loadHistory, type HistorySize } from '../test/support/history.js';

/** Which database a figure was measured on. */
export type SideName = 'fresh' | 'lived-in';

/** A migrated schema and a pool in it. */
export interface Side {
  name: SideName;
  schema: string;
  sql: Sql;
}

/** The lived-in schema of a bench run, from {@link livedIn}. */
export interface LivedIn extends Side {
  /** What the schema holds and how it came to (`loaded in S s`, or `reused`). */
  describe: string;
  /** End the pool; drop the schema unless BENCH_HISTORY_SCHEMA keeps it. */
  close(): Promise<void>;
}

const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

/** The history sizes of this run (BENCH_HISTORY_* or the defaults of `loadHistory`). */
export function historySize(): Required<Pick<HistorySize, 'items' | 'batches' | 'tenants' | 'units' | 'outbox'>> {
  return {
    items: num('BENCH_HISTORY_ITEMS', 5_000_000),
    batches: num('BENCH_HISTORY_BATCHES', 250),
    tenants: 50,
    units: num('BENCH_HISTORY_UNITS', 10_000),
    outbox: num('BENCH_HISTORY_OUTBOX', 1_000_000),
  };
}

const fmt = (n: number) => n.toLocaleString('en-US');

/**
 * Create (or, with BENCH_HISTORY_SCHEMA, reuse) the lived-in schema on `url`: migrated, history
 * loaded with `loadHistory`, then `vacuum` (as autovacuum would long have done in production, so
 * it does not start in the middle of a measurement), with `max` connections.
 *
 * @throws the database error of any step; a schema it created is dropped first.
 */
export async function livedIn(url: string, max: number): Promise<LivedIn> {
  const keep = process.env.BENCH_HISTORY_SCHEMA;
  const schema = keep ?? `bench_lived_${Date.now()}`;
  const size = historySize();
  const wanted = JSON.stringify(size);
  const admin = connect(url, { max: 1 });
  const sql = connect(url, { max, schema });
  const close = async () => {
    await sql.end();
    if (!keep) await admin`drop schema if exists ${admin(schema)} cascade`;
    await admin.end();
  };
  try {
    const [marker] = await admin<{ size: string }[]>`select obj_description(c.oid, 'pg_class') as size
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = ${schema} and c.relname = 'leasehold_items'`;
    if (marker && marker.size === wanted) {
      // Reused: the bench's own rows of an interrupted run go, the history stays.
      await migrate(sql);
      await sql`delete from leasehold_batches where tenant not like 'history-%'`;
      await sql`delete from leasehold_units where tenant not like 'history-%'`;
      await sql`delete from leasehold_processes`;
      await sql`vacuum analyze`;
      return { name: 'lived-in', schema, sql, close, describe: `${describe(size)}; reused from schema ${schema}` };
    }
    await admin`drop schema if exists ${admin(schema)} cascade`;
    await admin`create schema ${admin(schema)}`;
    await migrate(sql);
    const t0 = performance.now();
    await loadHistory(sql, size);
    await sql`vacuum`;
    // The sizes, so that a later run with BENCH_HISTORY_SCHEMA knows what it would reuse.
    await sql.unsafe(`comment on table leasehold_items is '${wanted}'`);
    const s = ((performance.now() - t0) / 1000).toFixed(1);
    return { name: 'lived-in', schema, sql, close, describe: `${describe(size)}; loaded, analyzed and vacuumed in ${s} s` };
  } catch (e) {
    await close();
    throw e;
  }
}

function describe(size: ReturnType<typeof historySize>): string {
  return (
    `lived-in schema: ${fmt(size.items)} finished items in ${fmt(size.batches)} batches over ${size.tenants} tenants, ` +
    `${fmt(size.units)} idle units, ${fmt(size.outbox)} delivered outbox messages`
  );
}

/** The order of the two sides in round `round`: fresh first in even rounds, lived-in first in odd ones. */
export function inTurn<T extends { name: SideName }>(round: number, sides: readonly [T, T]): T[] {
  return round % 2 === 0 ? [...sides] : [...sides].reverse();
}

/** Median of `xs`. */
export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Figures of one headline, per side. */
export type PerSide = Record<SideName, number[]>;

/** An empty {@link PerSide}. */
export const perSide = (): PerSide => ({ fresh: [], 'lived-in': [] });

/**
 * One headline line for a rate (higher is better): `label: fresh A unit; lived-in B unit (R %)`,
 * medians, R the lived-in median as a percentage of the fresh one.
 */
export function rateLine(label: string, xs: PerSide, unit: string, extra = ''): string {
  const f = median(xs.fresh);
  const l = median(xs['lived-in']);
  return `${label}: fresh ${fmt(Math.round(f))} ${unit}; lived-in ${fmt(Math.round(l))} ${unit} (${Math.round((100 * l) / f)} %)${extra}`;
}

/**
 * One headline line for a duration in ms (lower is better): `label: fresh A; lived-in B (R× fresh)`,
 * medians, shown in `s` or `ms`.
 */
export function timeLine(label: string, xs: PerSide, unit: 's' | 'ms', extra = ''): string {
  const f = median(xs.fresh);
  const l = median(xs['lived-in']);
  const show = (x: number) => (unit === 's' ? `${(x / 1000).toFixed(2)} s` : `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`);
  return `${label}: fresh ${show(f)}; lived-in ${show(l)} (${(l / f).toFixed(2)}× fresh)${extra}`;
}

/** The whole machine's CPU time since boot (`/proc/stat`), and this process's, both in µs. */
export interface CpuMark {
  /** µs the machine's cores spent busy (every state but idle and iowait), all cores summed. */
  busy: number;
  /** µs of this Node process (user + system). */
  node: number;
  /** performance.now() when read, ms. */
  at: number;
}

// /proc/stat counts in USER_HZ ticks, 100 a second on Linux: 10 ms each.
const TICK_US = 10_000;

/** Read a {@link CpuMark}; null where `/proc/stat` cannot be read (not Linux). */
export function cpuMark(): CpuMark | null {
  let line: string;
  try {
    line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0];
  } catch {
    return null;
  }
  // cpu user nice system idle iowait irq softirq steal …
  const t = line.trim().split(/\s+/).slice(1).map(Number);
  const busy = t.reduce((a, b) => a + b, 0) - t[3] - t[4];
  const u = process.cpuUsage();
  return { busy: busy * TICK_US, node: u.user + u.system, at: performance.now() };
}

/** CPU spent between two marks on `n` items: µs per item, machine-wide and of this process, and cores busy. */
export interface CpuSpent {
  /** µs of the whole machine's CPU per item (Node, the server and anything else running). */
  machine: number;
  /** µs of this Node process's CPU per item. */
  node: number;
  /** Cores the machine kept busy on average over the interval. */
  cores: number;
}

/** What the machine and this process spent from `a` to `b` on `n` items; null without marks. */
export function cpuSpent(a: CpuMark | null, b: CpuMark | null, n: number): CpuSpent | null {
  if (!a || !b || n <= 0) return null;
  const wallUs = (b.at - a.at) * 1000;
  return { machine: (b.busy - a.busy) / n, node: (b.node - a.node) / n, cores: wallUs > 0 ? (b.busy - a.busy) / wallUs : 0 };
}

/**
 * The CPU line beside a rate comparison (docs/development.md, "Where an item's time goes"): each
 * side's CPU per item, the whole machine's (Node and the server) and its Node process's, and the
 * cores it kept busy, medians of its rounds. A side's rate is at most cores ÷ machine CPU per
 * item, so the line shows whether a side is bound by its work or by how little of the machine it
 * keeps busy.
 */
export function cpuLine(aName: string, a: CpuSpent[], bName: string, b: CpuSpent[]): string {
  const side = (xs: CpuSpent[]) =>
    `${median(xs.map((x) => x.machine)).toFixed(1)} µs per item (Node ${median(xs.map((x) => x.node)).toFixed(1)} µs), ` +
    `${median(xs.map((x) => x.cores)).toFixed(2)} cores busy`;
  return `CPU of the whole machine (medians): ${aName} ${side(a)}; ${bName} ${side(b)}; ${cpus().length} cores`;
}
