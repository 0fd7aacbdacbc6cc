import type postgres from 'postgres';
import type * as z from '../zod.js';
import { UnknownJobError } from '../jobs/errors.js';
import type { Sql } from '../store/connect.js';
import { InvalidSettingError } from '../errors.js';
import type { Log } from '../log.js';

/**
 * A SQL condition, true only while the running process still owns the unit and its process row
 * is live (`expires_at > now()`, database clock). Embed it in the
 * `where` clause of a write so that the write changes nothing once the unit was lost:
 *
 * ```ts
 * await ctx.sql`update my_table set done = true where id = ${id} and ${ctx.fence()}`;
 * ```
 */
export type Fence = postgres.PendingQuery<postgres.Row[]>;

/** What one run of a unit job receives (docs/design.md, "Two kinds of work": units). */
export interface UnitContext<C> {
  /** The unit's tenant. */
  readonly tenant: string;
  /** The unit's shard, `0..shards−1`. */
  readonly shard: number;
  /** The unit job's name (`leasehold_units.job`). */
  readonly job: string;
  /** The unit's configuration (`leasehold_units.config`) as parsed by the job's schema, read at the start of this run. */
  readonly config: C;
  /** Id of the process that owns the unit and runs the job. */
  readonly processId: string;
  /**
   * Aborted when the unit is lost (taken, removed from the registry), released, or the process
   * reaches its deadline. Stop at once when it aborts: another process may own the unit now.
   */
  readonly signal: AbortSignal;
  /** The store. */
  readonly sql: Sql;
  /**
   * A fresh `exists (…)` condition that holds only while this process owns this unit and its
   * process row is live (database state and clock, not the local view): put it in every write
   * that must not happen after a loss.
   */
  fence(): Fence;
  /** Whether this process owns the unit in the store, with a live row, right now (primary key lookups). */
  owns(): Promise<boolean>;
  /**
   * Whether the process's lease is still valid by its own clock (less than the TTL since its
   * last successful heartbeat started). Synchronous and free: check it before every side
   * effect, so a process frozen past its TTL stops the moment it resumes, before any timer runs.
   */
  leaseValid(): boolean;
  /** Log with the unit's tenant, shard, job and process id added to the fields. */
  log: Log;
}

/** A problem {@link UnitJob.admit} found: the field (a path within the config) and what is wrong. */
export interface ConfigIssue {
  path: (string | number)[];
  message: string;
}

/**
 * A job that runs per owned unit, every `intervalMs` while the unit is owned. Build one with
 * {@link defineUnitJob}; a {@link UnitRunner} runs it.
 */
export interface UnitJob<C = unknown> {
  /** Unique name units refer to (`job` in `PUT /tenants/{tenant}/units`). */
  readonly name: string;
  /** One line for listings. */
  readonly description: string;
  /**
   * Shape of the per-unit configuration stored in `leasehold_units.config`. Registration
   * refuses a config that does not parse (400 naming the field); a run receives the parsed value.
   */
  readonly config: z.core.$ZodType<C>;
  /** Pause between the end of one run and the start of the next, ms. */
  readonly intervalMs: number;
  /**
   * Checks of a registration beyond the schema, for what a schema cannot see (for example where
   * a URL's host name resolves to). `PUT /tenants/{tenant}/units` runs it after the config
   * parsed and refuses the registration with a 400 naming each problem's field. Unit runs do not
   * run it: a job must cope with configs stored before a check existed. Default none.
   */
  admit?(config: C): Promise<ConfigIssue[]>;
  /** Weight a unit gets when its registration names none. Default 1. */
  weight?(config: C): number;
  /**
   * One run over the unit: do what is due, then resolve. Throwing logs the error; the next
   * interval tries again. Must stop soon after `ctx.signal` aborts.
   */
  run(ctx: UnitContext<C>): Promise<void>;
}

/**
 * Define a unit job; returns the definition unchanged, typed.
 * @throws {InvalidSettingError} `intervalMs` not a positive finite number, or an empty name.
 */
export function defineUnitJob<C>(job: UnitJob<C>): UnitJob<C> {
  if (!job.name) throw new InvalidSettingError('name', 'must not be empty (a unit job needs a name)');
  if (!Number.isFinite(job.intervalMs) || job.intervalMs <= 0) {
    throw new InvalidSettingError(`unit job "${job.name}": intervalMs`, `must be a positive number of ms, got ${job.intervalMs}`);
  }
  return job;
}

/** The unit jobs a deployment knows; runners resolve a unit's `job` through it, the API validates registrations. */
export class UnitJobRegistry {
  private readonly jobs = new Map<string, UnitJob<unknown>>();

  /** @throws {Error} two jobs share a name. */
  constructor(jobs: UnitJob<unknown>[]) {
    for (const job of jobs) {
      if (this.jobs.has(job.name)) throw new Error(`unit job "${job.name}" is registered twice`);
      this.jobs.set(job.name, job);
    }
  }

  /** Names of the registered unit jobs. */
  names(): string[] {
    return [...this.jobs.keys()];
  }

  /** The unit job named `name`, or undefined. */
  find(name: string): UnitJob<unknown> | undefined {
    return this.jobs.get(name);
  }

  /** The unit job named `name`. @throws {UnknownJobError} (code `unknown_job`, API 404). */
  get(name: string): UnitJob<unknown> {
    const job = this.jobs.get(name);
    if (!job) throw new UnknownJobError(name);
    return job;
  }
}
