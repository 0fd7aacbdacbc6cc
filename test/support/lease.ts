// Shared pieces of the lease tests: a reconciler that records what its leaser told it, a
// checker that no unit is in two live processes' owned sets, clocks, and readers of the
// ownership the database holds.
import { systemClock, type Clock, type ManualClock } from '../../src/clock.js';
import { Leaser, type LeaseConfig, type LeaserEvent, type Reconciler, type Unit, type UnitKey } from '../../src/lease/index.js';
import type { Sql } from '../../src/store/index.js';
import { sleep } from './time.js';

export const key = (u: UnitKey): string => `${u.tenant}/${u.shard}`;

/** One call a leaser made on its reconciler, in order. */
export interface Call {
  kind: 'gained' | 'lost';
  units: string[];
}

/**
 * A reconciler that keeps the owned set as it was told (a unit enters on `unitsGained`,
 * leaves on `unitsLost`), logs every call, and reports units marked busy as in flight.
 * Telling it of a unit it already owns, or of the loss of one it does not own, is recorded
 * as an error.
 */
export class Recorder implements Reconciler {
  readonly owned = new Map<string, Unit>();
  readonly calls: Call[] = [];
  readonly errors: string[] = [];
  readonly busy = new Set<string>();
  /** Called after every change of the owned set (the overlap checker hooks in here). */
  onGain?: (r: Recorder, units: Unit[]) => void;
  /** A shared log of events across recorders, for asserting orders. */
  log?: string[];
  /** Awaited by the leaser after every loss was recorded (to act at that exact point). */
  afterLost?: (units: Unit[]) => Promise<void>;

  constructor(readonly name: string) {}

  unitsGained(units: Unit[]): void {
    for (const u of units) {
      if (this.owned.has(key(u))) this.errors.push(`${this.name} told twice it gained ${key(u)}`);
      this.owned.set(key(u), u);
    }
    this.calls.push({ kind: 'gained', units: units.map(key).sort() });
    this.log?.push(`${this.name}:gained:${units.length}`);
    this.onGain?.(this, units);
  }

  unitsLost(units: Unit[]): void | Promise<void> {
    for (const u of units) {
      if (!this.owned.delete(key(u))) this.errors.push(`${this.name} told it lost ${key(u)}, which it did not own`);
    }
    this.calls.push({ kind: 'lost', units: units.map(key).sort() });
    this.log?.push(`${this.name}:lost:${units.length}`);
    return this.afterLost?.(units);
  }

  inFlight(unit: UnitKey): number {
    return this.busy.has(key(unit)) ? 1 : 0;
  }

  keys(): string[] {
    return [...this.owned.keys()].sort();
  }

  weight(): number {
    let w = 0;
    for (const u of this.owned.values()) w += u.weight;
    return w;
  }

  /** Forget the call log (the owned set stays). */
  resetCalls(): void {
    this.calls.length = 0;
  }
}

/**
 * Watches a changing group of recorders and records every moment a unit is in two owned sets:
 * at once on every gain (the only moment an overlap can begin) and from a sampler every
 * `everyMs` while started. `live(r)` says which recorders count (default: all).
 */
export class OverlapChecker {
  readonly violations: string[] = [];
  samples = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly recorders: () => Iterable<Recorder>,
    private readonly live: (r: Recorder) => boolean = () => true,
  ) {}

  /** Hook into a recorder so every gain is checked at once. */
  watch(r: Recorder): Recorder {
    r.onGain = () => this.check('gain');
    return r;
  }

  check(when: string): void {
    this.samples++;
    const seen = new Map<string, string>();
    for (const r of this.recorders()) {
      if (!this.live(r)) continue;
      for (const k of r.owned.keys()) {
        const other = seen.get(k);
        if (other !== undefined) this.violations.push(`${when}: ${k} owned by ${other} and ${r.name}`);
        else seen.set(k, r.name);
      }
    }
  }

  start(everyMs = 2): void {
    this.timer = setInterval(() => this.check('sample'), everyMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** A leaser with its recorder and its own event log. */
export interface Member {
  leaser: Leaser;
  rec: Recorder;
  events: LeaserEvent[];
}

let seq = 0;

/** A leaser on `sql` with a fresh recorder named `name` (default `p<n>`). */
export function member(
  sql: Sql,
  config: Partial<LeaseConfig> = {},
  options: { name?: string; clock?: Clock; random?: () => number } = {},
): Member {
  const rec = new Recorder(options.name ?? `p${++seq}`);
  const events: LeaserEvent[] = [];
  const leaser = new Leaser(sql, config, rec, { clock: options.clock, random: options.random, onEvent: (e) => events.push(e) });
  return { leaser, rec, events };
}

/** A clock `offsetMs` away from the real one (a skewed host clock); sleeps are real. */
export function offsetClock(offsetMs: number): Clock {
  return { now: () => Date.now() + offsetMs, sleep: (ms, signal) => systemClock.sleep(ms, signal) };
}

/** Owner of every unit (null when unowned), by unit key. */
export async function owners(sql: Sql): Promise<Map<string, string | null>> {
  const rows = await sql<{ tenant: string; shard: number; owner: string | null }[]>`select tenant, shard, owner
    from leasehold_units order by tenant, shard`;
  return new Map(rows.map((r) => [key(r), r.owner]));
}

/** Units owned by `id` in the database, as sorted keys. */
export async function ownedKeys(sql: Sql, id: string): Promise<string[]> {
  const rows = await sql<{ tenant: string; shard: number }[]>`select tenant, shard from leasehold_units where owner = ${id}`;
  return rows.map(key).sort();
}

/** Units and weight owned per owner in the database. */
export async function ownedCounts(sql: Sql): Promise<Map<string, { units: number; weight: number }>> {
  const rows = await sql<{ owner: string; units: number; weight: number }[]>`select owner, count(*) as units,
      sum(weight)::int as weight from leasehold_units where owner is not null group by owner`;
  return new Map(rows.map((r) => [r.owner, { units: r.units, weight: r.weight }]));
}

/** Ids of processes live now by the database clock. */
export async function liveIds(sql: Sql): Promise<Set<string>> {
  const rows = await sql<{ id: string }[]>`select id from leasehold_processes where expires_at > now()`;
  return new Set(rows.map((r) => r.id));
}

/** Make a process's row expired `agoMs` ago (a process frozen that long past its TTL). */
export async function expire(sql: Sql, id: string, agoMs: number): Promise<void> {
  await sql`update leasehold_processes set expires_at = now() - make_interval(secs => ${agoMs / 1000}) where id = ${id}`;
}

/** Remove every unit and process (between repetitions of a test). */
export async function clear(sql: Sql): Promise<void> {
  await sql`delete from leasehold_units`;
  await sql`delete from leasehold_processes`;
}

/** Fisher–Yates shuffle into a new array. */
export function shuffled<T>(xs: readonly T[]): T[] {
  const a = [...xs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Run `fn` over all items at once, each after a random delay of up to `jitterMs`. */
export function concurrently<T, R>(items: readonly T[], fn: (x: T) => Promise<R>, jitterMs = 3): Promise<R[]> {
  return Promise.all(
    shuffled(items).map(async (x) => {
      if (jitterMs > 0) await sleep(Math.random() * jitterMs);
      return fn(x);
    }),
  );
}

/** What {@link jittered} saw: every heartbeat's and every tick's result, in time order. */
export interface JitteredSteps {
  beats: { lapsed: boolean }[];
  ticks: { claimed: number; shed: number; fairShare: number }[];
}

/**
 * Drive `members` (whose leasers use `clock`) for `durationMs` of simulated time: each
 * heartbeats 4–6 s after its last heartbeat and ticks 4–6 s after its last tick, one step at a
 * time in time order, the clock advanced to each step.
 */
export async function jittered(members: Member[], clock: ManualClock, durationMs: number): Promise<JitteredSteps> {
  const out: JitteredSteps = { beats: [], ticks: [] };
  const jitter = () => 4_000 + Math.random() * 2_000;
  const next = new Map(members.map((m) => [m, { beat: clock.now() + jitter(), tick: clock.now() + jitter() }]));
  const end = clock.now() + durationMs;
  for (;;) {
    let due: { m: Member; what: 'beat' | 'tick'; at: number } | undefined;
    for (const [m, n] of next) {
      if (!due || n.beat < due.at) due = { m, what: 'beat', at: n.beat };
      if (n.tick < due.at) due = { m, what: 'tick', at: n.tick };
    }
    if (!due || due.at > end) return out;
    clock.advance(due.at - clock.now());
    const n = next.get(due.m)!;
    if (due.what === 'beat') {
      out.beats.push(await due.m.leaser.heartbeat());
      n.beat = clock.now() + jitter();
    } else {
      out.ticks.push(await due.m.leaser.tick());
      n.tick = clock.now() + jitter();
    }
  }
}
