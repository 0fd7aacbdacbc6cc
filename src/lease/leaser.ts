import { randomUUID } from 'node:crypto';
import { InvalidSettingError, LeaseholdError } from '../errors.js';
import { hostname as osHostname } from 'node:os';
import { systemClock, type Clock } from '../clock.js';
import { withTimeout } from '../store/timeout.js';
import type { Sql } from '../store/connect.js';
import { fairShareOf, starvingBelow } from './share.js';
import * as q from './sql/ownership.js';
import { CRASH_DEFAULTS } from './sql/ownership.js';
import type { CrashRule, Me, ProcessChain, ProcessRole, ShareState, UnitKey, UnitRow } from './sql/ownership.js';

/** A unit a process owns: identity, job, weight and the job's configuration. */
export type Unit = UnitRow;

/** Settings of a {@link Leaser}; durations in ms. Missing values take {@link LEASE_DEFAULTS}. */
export interface LeaseConfig {
  /** Host name shown in `GET /processes`. Default `os.hostname()`. */
  hostname: string;
  /** Code version shown in `GET /processes`. Default `unknown`. */
  version: string;
  /**
   * Process id; fresh for every process, never reused. Default a new UUID. An id reused while
   * another instance's row is live is refused ({@link ProcessIdInUseError}); another instance's
   * expired row is taken over as new, its units freed first, never inherited.
   */
  processId: string;
  /**
   * `fleet` (default): owns its fair share of units and counts against the desired count.
   * `batch`: a worker sent for a batch; it heartbeats (so it is listed) but never claims a unit.
   */
  role: ProcessRole;
  /**
   * The chain this process continues, written with its row (docs/design.md, "Process chains"):
   * a replacement's or a continuation's, from its event. Default: none, the first of a chain.
   */
  chain?: ProcessChain;
  /** How long a heartbeat keeps the process live, ms. Default 15,000. */
  ttlMs: number;
  /** Interval between heartbeats, ms; must be below `ttlMs`. Default 5,000. */
  heartbeatIntervalMs: number;
  /** Interval between rebalancing ticks, ms. Default 5,000. */
  rebalanceIntervalMs: number;
  /** Interval between sweeps run by `run()`, ms; 0 disables them. Default 600,000 (10 min). */
  sweepIntervalMs: number;
  /** A sweep deletes processes expired longer than this, ms. Default 3,600,000 (1 h). */
  sweepCutoffMs: number;
  /**
   * Shed above `fairShare × (1 + shedHysteresis)`, or above the fair share while another live
   * process starves (owns less than {@link starvingBelow} the fair share) and nothing is
   * claimable. Default 0.2.
   */
  shedHysteresis: number;
  /** Most units one claim statement takes. Default 64. */
  claimBatch: number;
  /** Most units one tick claims. Default 1,024. */
  maxClaimPerTick: number;
  /**
   * A statement not answered within this fails (the step is retried on its next interval), ms:
   * a silent connection must not stall heartbeats past the TTL or a stop past its deadline.
   * Default: a third of `ttlMs`. 0 waits for ever.
   */
  storeTimeoutMs: number;
  /**
   * A unit whose owner died (or whose lease lapsed) while its job ran counts a crash; after this
   * many in a row it is quarantined (docs/design.md, "Crashes and quarantine"). Default 3.
   */
  maxUnitCrashes: number;
  /** The first quarantine of a unit, ms; each later one lasts twice the one before. Default 300,000 (5 min). */
  quarantineMs: number;
  /** The longest quarantine, ms. Default 86,400,000 (a day). */
  maxQuarantineMs: number;
}

/** Defaults of {@link LeaseConfig} (issue "Processes share per-tenant units fairly"). */
export const LEASE_DEFAULTS = {
  version: 'unknown',
  ttlMs: 15_000,
  heartbeatIntervalMs: 5_000,
  rebalanceIntervalMs: 5_000,
  sweepIntervalMs: 600_000,
  sweepCutoffMs: 3_600_000,
  shedHysteresis: 0.2,
  claimBatch: 64,
  maxClaimPerTick: 1024,
  maxUnitCrashes: CRASH_DEFAULTS.maxCrashes,
  quarantineMs: CRASH_DEFAULTS.quarantineMs,
  maxQuarantineMs: CRASH_DEFAULTS.maxQuarantineMs,
} as const;

/** Optional observers, for metrics. */
export interface Hooks {
  /** Units claimed by one tick (only when > 0). */
  claimed?(n: number): void;
  /** Units shed by one tick (only when > 0). */
  shed?(n: number): void;
  /** Duration of one tick, ms. */
  rebalanced?(ms: number): void;
  /** Units and weight owned after a tick, and the fair share it computed. */
  owned?(units: number, weight: number, fairShare: number): void;
}

/** What the leaser drives: told of units gained and lost, asked what is in flight. */
export interface Reconciler {
  /** Units now owned; called after the claim committed. */
  unitsGained(units: Unit[]): void | Promise<void>;
  /** Units no longer owned (or possibly not): stop working them at once. */
  unitsLost(units: Unit[]): void | Promise<void>;
  /** Work in flight on `unit` now; shedding gives back idle units first. */
  inFlight(unit: UnitKey): number;
}

/** A configuration that cannot work; `setting` names the setting (code `lease_config`). */
export class LeaseConfigError extends InvalidSettingError {
  constructor(setting: string, reason: string) {
    super(setting, reason, 'lease_config');
  }
}

/**
 * Another instance holds a live process row with this process id: this instance wrote nothing
 * and owns nothing (process ids are fresh for every process and never reused).
 */
export class ProcessIdInUseError extends LeaseholdError {
  constructor(readonly processId: string) {
    super('process_id_in_use', `process id ${processId} belongs to another live instance; process ids must never be reused`);
  }
}

/** Events the leaser reports (logging); errors in `run()` come here, never thrown. */
export type LeaserEvent =
  | { type: 'error'; step: 'heartbeat' | 'tick' | 'sweep'; error: unknown }
  | { type: 'lapsed'; lost: number }
  | { type: 'swept'; processes: number; units: number }
  | { type: 'retiring' };

const key = (u: UnitKey) => `${u.tenant}\u0000${u.shard}`;

/**
 * Validate a partial configuration and fill in defaults.
 * @throws {LeaseConfigError} a value is out of range or inconsistent (for example a heartbeat
 *   interval not below the TTL).
 */
export function leaseConfig(partial: Partial<LeaseConfig> = {}): LeaseConfig {
  const c: LeaseConfig = {
    hostname: partial.hostname ?? osHostname(),
    processId: partial.processId ?? randomUUID(),
    role: partial.role ?? 'fleet',
    ...LEASE_DEFAULTS,
    ...Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined)),
  } as LeaseConfig;
  c.storeTimeoutMs ??= Math.floor(c.ttlMs / 3);
  const positive = [
    'ttlMs',
    'heartbeatIntervalMs',
    'rebalanceIntervalMs',
    'sweepCutoffMs',
    'claimBatch',
    'maxClaimPerTick',
    'maxUnitCrashes',
    'quarantineMs',
    'maxQuarantineMs',
  ] as const;
  for (const name of positive) {
    if (!Number.isFinite(c[name]) || c[name] <= 0) throw new LeaseConfigError(name, `must be a positive number, got ${c[name]}`);
  }
  if (!Number.isFinite(c.sweepIntervalMs) || c.sweepIntervalMs < 0) {
    throw new LeaseConfigError('sweepIntervalMs', `must be 0 (off) or positive, got ${c.sweepIntervalMs}`);
  }
  if (c.role !== 'fleet' && c.role !== 'batch')
    throw new LeaseConfigError('role', `must be fleet or batch, got ${String(c.role)}`);
  if (!(c.shedHysteresis >= 0)) throw new LeaseConfigError('shedHysteresis', `must be 0 or more, got ${c.shedHysteresis}`);
  if (c.heartbeatIntervalMs >= c.ttlMs) {
    throw new LeaseConfigError('heartbeatIntervalMs', `(${c.heartbeatIntervalMs}) must be below ttlMs (${c.ttlMs})`);
  }
  if (c.sweepCutoffMs < c.ttlMs)
    throw new LeaseConfigError('sweepCutoffMs', `(${c.sweepCutoffMs}) must not be below ttlMs (${c.ttlMs})`);
  if (!Number.isFinite(c.storeTimeoutMs) || c.storeTimeoutMs < 0) {
    throw new LeaseConfigError('storeTimeoutMs', `must be 0 (none) or positive, got ${c.storeTimeoutMs}`);
  }
  if (c.claimBatch > c.maxClaimPerTick) {
    throw new LeaseConfigError('claimBatch', `(${c.claimBatch}) must not exceed maxClaimPerTick (${c.maxClaimPerTick})`);
  }
  if (!c.processId) throw new LeaseConfigError('processId', 'must not be empty');
  return c;
}

/**
 * One process's membership and unit ownership (docs/design.md, "Process membership and unit
 * ownership"). `heartbeat()` keeps the process row live; `tick()` claims up to the fair share or
 * sheds down to it; `release()` gives every unit back; `deleteProcess()` ends the membership.
 * `run(signal)` loops all of these. Every time comparison is made by the database clock; the
 * `clock` only paces the loop.
 *
 * The process row carries a token only this instance holds: every statement that renews the
 * row, claims, reads owned units, releases or deletes is fenced on it, so another instance
 * given the same id neither renews this row nor acts on its units, and this one never acts on
 * units it did not claim.
 *
 * Ownership as the reconciler sees it: a unit enters the owned set only after its claim
 * committed, and leaves it (with `unitsLost`) before the statement that gives it back, so no
 * unit is ever in two live processes' owned sets.
 */
export class Leaser {
  readonly config: LeaseConfig;
  private next: ProcessChain | undefined;
  private readonly units = new Map<string, Unit>();
  private readonly me: Me;
  private lastBeatAt: number | undefined;
  private lastShare: { live: number; totalWeight: number; fairShare: number } | undefined;
  private beats = 0;
  private retire = false;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly onEvent: (e: LeaserEvent) => void;

  /**
   * @param sql the store.
   * @param config partial settings; see {@link LeaseConfig}.
   * @param reconciler what acts on owned units.
   * @param options hooks (metrics), clock (pacing of `run` and the local lapse check), random
   *   (claim start keys), onEvent (logging).
   * @throws {LeaseConfigError}
   */
  constructor(
    private readonly sql: Sql,
    config: Partial<LeaseConfig>,
    private readonly reconciler: Reconciler,
    options: { hooks?: Hooks; clock?: Clock; random?: () => number; onEvent?: (e: LeaserEvent) => void } = {},
  ) {
    this.config = leaseConfig(config);
    this.me = { id: this.config.processId, token: randomUUID() };
    this.hooks = options.hooks ?? {};
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.onEvent = options.onEvent ?? (() => {});
  }

  private readonly hooks: Hooks;

  /** The process id. */
  get processId(): string {
    return this.config.processId;
  }

  /** Units owned now, as the reconciler was told. */
  owned(): Unit[] {
    return [...this.units.values()];
  }

  /**
   * What the last tick saw: live fleet processes, total claimable weight, fair share; undefined
   * before the first tick (and always for a `batch` process, which does not tick).
   */
  share(): { live: number; totalWeight: number; fairShare: number } | undefined {
    return this.lastShare;
  }

  /**
   * Whether the lease is valid by this process's own clock: less than the TTL has passed since
   * the last successful heartbeat started (so the row cannot have expired yet, whatever the
   * database clock says). False before the first heartbeat. Unit work checks it before acting.
   */
  leaseValid(): boolean {
    return this.lastBeatAt !== undefined && this.clock.now() - this.lastBeatAt < this.config.ttlMs;
  }

  /** True once a heartbeat has succeeded (the process row exists and is live). */
  ready(): boolean {
    return this.beats > 0;
  }

  /**
   * True once a heartbeat or tick found that the scheduler asked this process to retire (the
   * fleet is above the desired count). A retiring process claims and sheds nothing; its owner
   * should release, hand off and delete the row, as at a deadline.
   */
  retiring(): boolean {
    return this.retire;
  }

  /**
   * Upsert the process row with `expires_at = now() + ttl` (database clock) and the units and
   * weight owned now. When the row was gone (swept) or had expired, or when more than the TTL
   * passed since the last successful heartbeat, ownership is re-read at once and lost units are
   * reported before returning.
   * @throws {ProcessIdInUseError} another instance holds a live row with this id; every unit
   *   this instance held is reported lost first.
   * @throws the store's error; the owned set is then unchanged.
   */
  async heartbeat(): Promise<{ lapsed: boolean }> {
    const started = this.clock.now();
    const gapped = this.lastBeatAt !== undefined && started - this.lastBeatAt > this.config.ttlMs;
    const { outcome, retiring } = await this.withinTimeout(() =>
      q.heartbeat(this.sql, {
        ...this.me,
        role: this.config.role,
        hostname: this.config.hostname,
        version: this.config.version,
        ttlMs: this.config.ttlMs,
        units: this.units.size,
        weight: this.weight(),
        crash: this.crashRule(),
        chain: this.config.chain,
      }),
    );
    if (outcome === 'in-use') {
      await this.dropAll();
      throw new ProcessIdInUseError(this.config.processId);
    }
    this.lastBeatAt = started;
    const first = this.beats === 0;
    this.beats++;
    this.noteRetiring(retiring);
    if ((outcome === 'lapsed' && !first) || gapped) {
      const lost = await this.resync();
      this.onEvent({ type: 'lapsed', lost });
      return { lapsed: true };
    }
    return { lapsed: false };
  }

  /**
   * One rebalancing step: drop units no longer owned in the store (taken, removed from the
   * registry), then claim up to the fair share — at most `maxClaimPerTick` units, in statements
   * of at most `claimBatch` — or, on a tick that claimed nothing with more than one live
   * process, shed down to the fair share (never below it), idle units first, lightest first,
   * when this process owns more than `fairShare × (1 + shedHysteresis)`, or more than the fair
   * share while another live process starves ({@link starvingBelow}) and nothing is claimable. The fair share is {@link fairShareOf} the live fleet processes.
   * Claims nothing when the process's own row is not live (or not its own), or when it retires;
   * a `batch` process neither claims nor reads anything.
   * @throws the store's error.
   */
  async tick(): Promise<{ claimed: number; shed: number; fairShare: number }> {
    if (this.config.role !== 'fleet') return { claimed: 0, shed: 0, fairShare: 0 };
    const t0 = performance.now();
    const state = await this.withinTimeout(() => q.shareState(this.sql, this.me));
    await this.syncOwned(state.owned);
    this.noteRetiring(state.selfRetiring);
    let weight = this.weight();
    const fairShare = await this.fairShare(state);
    this.lastShare = { live: state.live, totalWeight: state.totalWeight, fairShare };
    const acting = state.selfLive && !state.selfRetiring;
    const claimable = state.unowned || state.abandoned;
    let claimed = 0;
    let shed = 0;
    if (acting && claimable && weight < fairShare) {
      let budget = fairShare - weight;
      let room = this.config.maxClaimPerTick;
      // From a random start key round to it: [start, 1), then [0, start).
      const start = this.random();
      const ranges: [number, number][] = [
        [start, 1],
        [0, start],
      ];
      let range = 0;
      while (budget > 0 && room > 0 && range < ranges.length) {
        // Every unit weighs at least 1, so `budget` units are as many as can fit.
        const limit = Math.min(this.config.claimBatch, room, budget);
        const rows = await this.withinTimeout(() =>
          q.claim(this.sql, this.me, {
            budget,
            limit,
            from: ranges[range][0],
            to: ranges[range][1],
            abandoned: state.abandoned,
            crash: this.crashRule(),
          }),
        );
        if (rows.length < limit) range++;
        if (rows.length === 0) continue;
        for (const u of rows) this.units.set(key(u), u);
        const gained = rows.reduce((s, u) => s + u.weight, 0);
        budget -= gained;
        weight += gained;
        room -= rows.length;
        claimed += rows.length;
        await this.reconciler.unitsGained(rows);
      }
    }
    if (acting && claimed === 0 && state.live > 1 && this.shouldShed(weight, fairShare, state, claimable)) {
      shed = await this.shedTo(fairShare);
    }
    if (claimed > 0) this.hooks.claimed?.(claimed);
    if (shed > 0) this.hooks.shed?.(shed);
    this.hooks.rebalanced?.(performance.now() - t0);
    this.hooks.owned?.(this.units.size, this.weight(), fairShare);
    return { claimed, shed, fairShare };
  }

  /** Give back every owned unit in one statement (they leave the owned set first). */
  async release(): Promise<number> {
    const all = this.owned();
    this.units.clear();
    if (all.length) await this.reconciler.unitsLost(all);
    return this.withinTimeout(() => q.releaseAll(this.sql, this.me));
  }

  /** Delete the process row (only this instance's): the last step of a graceful stop. */
  async deleteProcess(): Promise<boolean> {
    this.next = await this.withinTimeout(() => q.deleteProcess(this.sql, this.me));
    return this.next !== undefined;
  }

  /**
   * The chain a replacement (or continuation) of this process continues, as its deleted row had
   * it (docs/design.md, "Process chains"); undefined until {@link Leaser.deleteProcess} deleted it.
   */
  successorChain(): ProcessChain | undefined {
    return this.next;
  }

  /**
   * Heartbeat (retrying the first one with backoff while the store is unreachable), then loop
   * heartbeat, rebalance and sweep on their intervals until `signal` aborts. Errors are
   * reported through `onEvent`, never thrown. When heartbeats keep failing past the TTL, every
   * unit is reported lost (the row may have expired) as the TTL passes — even while a statement
   * is still waiting for its answer; a later heartbeat re-reads ownership.
   * A `batch` process only heartbeats (and sweeps). Does not release: call
   * {@link Leaser.release} and {@link Leaser.deleteProcess} after.
   */
  async run(signal: AbortSignal): Promise<void> {
    let wait = 100;
    while (!signal.aborted && !this.ready()) {
      try {
        await this.heartbeat();
      } catch (error) {
        this.onEvent({ type: 'error', step: 'heartbeat', error });
        await this.clock.sleep(wait + wait * this.random(), signal);
        wait = Math.min(wait * 2, this.config.heartbeatIntervalMs);
      }
    }
    const watching = this.watchLapse(signal);
    try {
      await this.loop(signal);
    } finally {
      await watching;
    }
  }

  /**
   * Until `signal` aborts: at the end of each TTL since the last successful heartbeat, drop
   * every unit when the lease has lapsed. The loop checks too, but it may be waiting (up to
   * `storeTimeoutMs`) for a statement of a silent connection just then, while the row expires
   * and another process claims the units.
   */
  private async watchLapse(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const at = (this.lastBeatAt ?? this.clock.now()) + this.config.ttlMs;
      await this.clock.sleep(Math.max(1, at - this.clock.now()), signal);
      if (!signal.aborted && !this.leaseValid() && this.units.size > 0) await this.dropAll();
    }
  }

  private async loop(signal: AbortSignal): Promise<void> {
    const c = this.config;
    let nextBeat = this.clock.now() + c.heartbeatIntervalMs;
    let nextTick = c.role === 'fleet' ? this.clock.now() : Infinity;
    let nextSweep = c.sweepIntervalMs > 0 ? this.clock.now() + c.sweepIntervalMs : Infinity;
    while (!signal.aborted) {
      const now = this.clock.now();
      if (now >= nextBeat) {
        nextBeat = now + c.heartbeatIntervalMs;
        try {
          await this.heartbeat();
        } catch (error) {
          this.onEvent({ type: 'error', step: 'heartbeat', error });
        }
      }
      if (signal.aborted) break;
      if (this.clock.now() >= nextTick) {
        nextTick = this.clock.now() + c.rebalanceIntervalMs;
        // Acting on units needs a heartbeat within the TTL; without one, the row may be gone.
        if (this.leaseValid()) {
          try {
            await this.tick();
          } catch (error) {
            this.onEvent({ type: 'error', step: 'tick', error });
          }
        }
      }
      // The row may expire now and another process claim the units: stop working them at once,
      // not when the next heartbeat fails (a later successful heartbeat re-reads ownership).
      if (!this.leaseValid() && this.units.size > 0) await this.dropAll();
      if (this.clock.now() >= nextSweep) {
        nextSweep = this.clock.now() + c.sweepIntervalMs;
        try {
          // Loaded on the first sweep: most worker invocations end before their first one.
          const { sweep } = await import('./sql/sweep.js');
          const swept = await this.withinTimeout(() => sweep(this.sql, c.sweepCutoffMs, this.crashRule()));
          if (swept.processes) this.onEvent({ type: 'swept', ...swept });
        } catch (error) {
          this.onEvent({ type: 'error', step: 'sweep', error });
        }
      }
      const expiry = this.units.size > 0 && this.lastBeatAt !== undefined ? this.lastBeatAt + c.ttlMs : Infinity;
      await this.clock.sleep(Math.max(0, Math.min(nextBeat, nextTick, nextSweep, expiry) - this.clock.now()), signal);
    }
  }

  private crashRule(): CrashRule {
    return crashRuleOf(this.config);
  }

  private withinTimeout<T>(query: () => Promise<T>): Promise<T> {
    return withTimeout(query, this.config.storeTimeoutMs);
  }

  private weight(): number {
    let w = 0;
    for (const u of this.units.values()) w += u.weight;
    return w;
  }

  private noteRetiring(retiring: boolean): void {
    if (!retiring || this.retire) return;
    this.retire = true;
    this.onEvent({ type: 'retiring' });
  }

  private fairShare(state: ShareState): Promise<number> {
    return fairShareOf(state.totalWeight, state.live, state.heavy, (a) => this.withinTimeout(() => q.heavyUnits(this.sql, a)));
  }

  /**
   * Above the shedding line; or above the share while another live process starves (by the
   * weight its row reported at its last heartbeat) and nothing is claimable for it.
   */
  private shouldShed(weight: number, fairShare: number, state: ShareState, claimable: boolean): boolean {
    const h = this.config.shedHysteresis;
    if (weight > fairShare * (1 + h)) return true;
    const starving = state.othersMinWeight !== null && state.othersMinWeight < starvingBelow(fairShare, h);
    return weight > fairShare && starving && !claimable;
  }

  /** Align the owned set with the store's view: report units lost, adopt units found. */
  private async syncOwned(rows: Unit[]): Promise<number> {
    const inStore = new Map(rows.map((u) => [key(u), u]));
    const lost: Unit[] = [];
    for (const [k, u] of this.units) {
      if (!inStore.has(k)) {
        lost.push(u);
        this.units.delete(k);
      }
    }
    if (lost.length) await this.reconciler.unitsLost(lost);
    // Owned in the store but unknown here: a claim of this instance whose answer was lost after
    // it committed (the read is fenced on this instance's token, so it never finds another's).
    const found = rows.filter((u) => !this.units.has(key(u)));
    for (const u of rows) this.units.set(key(u), u);
    if (found.length) await this.reconciler.unitsGained(found);
    return lost.length;
  }

  private async resync(): Promise<number> {
    return this.syncOwned(await this.withinTimeout(() => q.ownedUnits(this.sql, this.me)));
  }

  private async dropAll(): Promise<void> {
    const all = this.owned();
    this.units.clear();
    if (all.length) {
      await this.reconciler.unitsLost(all);
      this.onEvent({ type: 'lapsed', lost: all.length });
    }
  }

  private async shedTo(fairShare: number): Promise<number> {
    let weight = this.weight();
    const order = this.owned().sort(
      (a, b) => Number(this.reconciler.inFlight(a) > 0) - Number(this.reconciler.inFlight(b) > 0) || a.weight - b.weight,
    );
    const give: Unit[] = [];
    for (const u of order) {
      if (weight - u.weight < fairShare) continue;
      give.push(u);
      weight -= u.weight;
      if (weight <= fairShare) break;
    }
    if (give.length === 0) return 0;
    for (const u of give) this.units.delete(key(u));
    await this.reconciler.unitsLost(give);
    await this.withinTimeout(() => q.releaseUnits(this.sql, this.me, give));
    return give.length;
  }
}

/** A process's crash rule from the lease settings that carry it. */
export function crashRuleOf(c: Pick<LeaseConfig, 'maxUnitCrashes' | 'quarantineMs' | 'maxQuarantineMs'>): CrashRule {
  return { maxCrashes: c.maxUnitCrashes, quarantineMs: c.quarantineMs, maxQuarantineMs: c.maxQuarantineMs };
}
