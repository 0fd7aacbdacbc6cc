import { systemClock, type Clock } from '../clock.js';
import type { Reconciler, Unit } from '../lease/leaser.js';
import type { UnitKey } from '../lease/sql/ownership.js';
import type { Sql } from '../store/connect.js';
import type { Log } from '../log.js';
import type { UnitContext, UnitJob, UnitJobRegistry } from './job.js';
import * as q from './sql/runs.js';
import { InvalidSettingError } from '../errors.js';
import * as z from '../zod.js';

/** Settings of a {@link UnitRunner}. */
export interface UnitRunnerOptions {
  /** The store. */
  sql: Sql;
  /** The process whose owned units this runner works (the `Leaser`'s `processId`). */
  processId: string;
  /** Resolves a unit's `job` to its definition. */
  jobs: UnitJobRegistry;
  /** Errors of unit runs, unknown jobs and invalid configs go here (`silentLog` to drop them). */
  log: Log;
  /**
   * Whether the process's lease is valid by its own clock (`Leaser.leaseValid`); a run starts
   * only while it is, and unit jobs see it as `ctx.leaseValid()`. Default: always valid.
   */
  leaseValid?: () => boolean;
  /** Paces the interval waits. Default the system clock. */
  clock?: Clock;
  /**
   * How long a loss, release or {@link UnitRunner.close} waits for a unit's run to end after
   * its signal aborted, ms; a run still going then is left behind (it must honour its signal;
   * its fenced writes change nothing). Default 5,000.
   */
  stopTimeoutMs?: number;
  /** Aborting it (for example at the process's deadline) stops every unit, as {@link UnitRunner.close} does. */
  signal?: AbortSignal;
}

/** One owned unit's loop. */
interface Entry {
  unit: UnitKey;
  job: UnitJob<unknown> | undefined;
  stop: AbortController;
  inFlight: number;
  done: Promise<void>;
}

const keyOf = (u: UnitKey) => `${u.tenant}\u0000${u.shard}`;

/**
 * The runtime's side of unit ownership: a lease `Reconciler` that runs each owned unit's job
 * (docs/design.md, "Process membership and unit ownership": "the reconciler is told `unitsGained` /
 * `unitsLost` and reports `inFlight(unit)`").
 *
 * - `unitsGained`: starts one loop per unit — mark a run started on the unit's row and read it
 *   (only while this process owns it; a run never starts on a unit the store says is someone
 *   else's), parse its config with the job's schema, run the job, clear the mark (so only a
 *   process that dies during a run counts a crash of the unit: docs/design.md, "Crashes and
 *   quarantine"), wait the job's `intervalMs` on the unit's signal, repeat.
 *   A unit whose job is unknown here, or whose config does not parse, is logged and left idle.
 * - `unitsLost`: aborts those units' signals and waits (at most `stopTimeoutMs`) for their runs
 *   to end, so the leaser gives a unit back only after its work here stopped.
 * - `inFlight(unit)`: runs of the unit in progress now (0 or 1); shedding gives idle units first.
 *
 * A run that throws is logged and never stops the loop: the next interval tries again.
 */
export class UnitRunner implements Reconciler {
  private readonly entries = new Map<string, Entry>();
  private readonly sql: Sql;
  private readonly processId: string;
  private readonly jobs: UnitJobRegistry;
  private readonly log: Log;
  private readonly leaseValid: () => boolean;
  private readonly clock: Clock;
  private readonly stopTimeoutMs: number;
  private closed = false;

  /** @throws {InvalidSettingError} `stopTimeoutMs` negative. */
  constructor(options: UnitRunnerOptions) {
    this.sql = options.sql;
    this.processId = options.processId;
    this.jobs = options.jobs;
    this.log = options.log;
    this.leaseValid = options.leaseValid ?? (() => true);
    this.clock = options.clock ?? systemClock;
    this.stopTimeoutMs = options.stopTimeoutMs ?? 5_000;
    if (!(this.stopTimeoutMs >= 0))
      throw new InvalidSettingError('stopTimeoutMs', `must be 0 or more, got ${options.stopTimeoutMs}`);
    const signal = options.signal;
    if (signal) {
      if (signal.aborted) this.closed = true;
      else signal.addEventListener('abort', () => void this.close(), { once: true });
    }
  }

  /** Start a loop for each unit not already running here. Never throws. */
  unitsGained(units: Unit[]): void {
    for (const unit of units) {
      const k = keyOf(unit);
      if (this.closed || this.entries.has(k)) continue;
      const job = this.jobs.find(unit.job);
      const entry: Entry = {
        unit: { tenant: unit.tenant, shard: unit.shard },
        job,
        stop: new AbortController(),
        inFlight: 0,
        done: Promise.resolve(),
      };
      this.entries.set(k, entry);
      if (!job) {
        this.log('error', 'unit has a job this process does not know; left idle', {
          processId: this.processId,
          tenant: unit.tenant,
          shard: unit.shard,
          job: unit.job,
        });
        continue;
      }
      entry.done = this.loop(entry, job);
    }
  }

  /**
   * Abort the units' signals and wait until their runs ended, at most `stopTimeoutMs` (then
   * leave them). Never throws.
   */
  async unitsLost(units: UnitKey[]): Promise<void> {
    const stopping: Entry[] = [];
    for (const unit of units) {
      const k = keyOf(unit);
      const entry = this.entries.get(k);
      if (!entry) continue;
      this.entries.delete(k);
      entry.stop.abort();
      stopping.push(entry);
    }
    await this.awaitEnd(stopping);
  }

  /** Runs of `unit` in progress now (0 when idle or not owned). */
  inFlight(unit: UnitKey): number {
    return this.entries.get(keyOf(unit))?.inFlight ?? 0;
  }

  /** Units this runner works now (including idle ones whose job is unknown), in no particular order. */
  units(): UnitKey[] {
    return [...this.entries.values()].map((e) => ({ ...e.unit }));
  }

  /**
   * Stop every unit (signals aborted) and wait for their runs to end, at most `stopTimeoutMs`.
   * Later gains start nothing. Idempotent; never throws.
   */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.entries.values()];
    this.entries.clear();
    for (const e of all) e.stop.abort();
    await this.awaitEnd(all);
  }

  private async awaitEnd(entries: Entry[]): Promise<void> {
    if (entries.length === 0) return;
    const timeout = new AbortController();
    const all = Promise.all(entries.map((e) => e.done)).then(() => true);
    const late = this.clock.sleep(this.stopTimeoutMs, timeout.signal).then(() => false);
    const ended = await Promise.race([all, late]);
    timeout.abort();
    if (!ended) {
      for (const e of entries) {
        if (e.inFlight > 0) {
          this.log('warn', 'unit run did not stop in time after its signal aborted; left behind', {
            processId: this.processId,
            tenant: e.unit.tenant,
            shard: e.unit.shard,
            stopTimeoutMs: this.stopTimeoutMs,
          });
        }
      }
    }
  }

  private async loop(entry: Entry, job: UnitJob<unknown>): Promise<void> {
    const { unit, stop } = entry;
    const signal = stop.signal;
    const log = this.log.with({ processId: this.processId, tenant: unit.tenant, shard: unit.shard, job: job.name });
    // Let the caller (the leaser's tick) finish its bookkeeping before the first run.
    await Promise.resolve();
    let lastProblem: string | undefined;
    while (!signal.aborted) {
      const problem = await this.runOnce(entry, job, log);
      // A persisting problem (invalid config, store down) is logged when it starts, not every interval.
      if (problem && problem !== lastProblem && !signal.aborted) log('error', problem);
      lastProblem = problem;
      if (signal.aborted) break;
      await this.clock.sleep(job.intervalMs, signal);
    }
  }

  /** One run; resolves with a problem to log, or undefined. */
  private async runOnce(entry: Entry, job: UnitJob<unknown>, log: Log): Promise<string | undefined> {
    const { unit } = entry;
    if (!this.leaseValid()) return undefined;
    let row: q.OwnedUnitRow | undefined;
    try {
      row = await q.startRun(this.sql, unit, this.processId);
    } catch (error) {
      return `cannot read the unit: ${errorText(error)}`;
    }
    // Not owned in the store (taken, removed): the leaser reports the loss on its next tick.
    if (!row) return undefined;
    try {
      return await this.execute(entry, job, log, row);
    } finally {
      // The run ended here (this process did not crash in it); a lost unit's mark is its new owner's.
      await q.endRun(this.sql, unit, this.processId).catch((error: unknown) => {
        log('warn', 'cannot mark the unit run ended', { error: errorText(error) });
      });
    }
  }

  private async execute(entry: Entry, job: UnitJob<unknown>, log: Log, row: q.OwnedUnitRow): Promise<string | undefined> {
    const { unit, stop } = entry;
    if (row.job !== job.name || stop.signal.aborted) return undefined;
    const parsed = z.safeParse(job.config, row.config);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return `unit config is invalid for its job (config.${issue.path.join('.')}: ${issue.message}); left idle`;
    }
    const ctx: UnitContext<unknown> = {
      tenant: unit.tenant,
      shard: unit.shard,
      job: job.name,
      config: parsed.data,
      processId: this.processId,
      signal: stop.signal,
      sql: this.sql,
      fence: () => q.fence(this.sql, unit, this.processId),
      owns: () => q.owns(this.sql, unit, this.processId),
      leaseValid: () => this.leaseValid() && !stop.signal.aborted,
      log,
    };
    entry.inFlight++;
    try {
      await job.run(ctx);
    } catch (error) {
      if (stop.signal.aborted) return undefined;
      log('error', 'unit run failed', { error: errorText(error) });
    } finally {
      entry.inFlight--;
    }
    return undefined;
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
