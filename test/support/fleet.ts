// A whole fleet in one Node process: the real scheduler and real workers on a real PostgreSQL,
// with a dispatcher that runs each invoked worker at once (as the local invoke endpoint does),
// optionally dropping some invocations while answering success (as Lambda may). Used by the
// runtime tests and the lease benchmark (bench/lease.ts); imports nothing of vitest.
import { z } from 'zod';
import { defaultJobContext, defaultRegistry, defineJob, JobRegistry } from '../../src/jobs/index.js';
import { runScheduler, runWorker, type Config, type SchedulerResult, type WorkerResult } from '../../src/runtime/index.js';
import { type Dispatcher, type WorkerEvent } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';
import { silentLog } from '../../src/log.js';

/** Options of {@link inProcessFleet}. */
export interface InProcessFleetOptions {
  /** Whether to drop the `n`th invocation (1-based), answering success. Default: none dropped. */
  drop?: (n: number, event: WorkerEvent) => boolean;
  /** What every worker's context reports as its remaining time, ms. Default 120,000. */
  remainingMs?: number;
  /** Batch jobs. Default the built-in registry. */
  jobs?: JobRegistry;
}

/** A fleet of in-process workers driven by explicit scheduler runs. */
export interface InProcessFleet {
  /** Every invocation asked for, in order, with whether it was dropped. */
  readonly invocations: { event: WorkerEvent; dropped: boolean }[];
  /** Results of the workers that returned so far. */
  readonly returned: WorkerResult[];
  /** One scheduler run. */
  tick(): Promise<SchedulerResult>;
  /** Live process rows (database clock) by role, retiring ones counted apart. */
  live(): Promise<{ fleet: number; retiring: number; batch: number }>;
  /** Stop every worker as at its deadline (nothing new is started) and wait for all. */
  stop(): Promise<WorkerResult[]>;
}

/** Start an empty fleet on `sql` with `config`; workers come from {@link InProcessFleet.tick}. */
export function inProcessFleet(sql: Sql, config: Config, options: InProcessFleetOptions = {}): InProcessFleet {
  const jobs = options.jobs ?? defaultRegistry();
  const remainingMs = options.remainingMs ?? 120_000;
  const stopping = new AbortController();
  const running: Promise<WorkerResult>[] = [];
  const invocations: { event: WorkerEvent; dropped: boolean }[] = [];
  const returned: WorkerResult[] = [];
  const dispatcher: Dispatcher = {
    async invoke(event) {
      const dropped = stopping.signal.aborted || (options.drop?.(invocations.length + 1, event) ?? false);
      invocations.push({ event, dropped });
      if (dropped) return;
      const worker = runWorker(
        event,
        { getRemainingTimeInMillis: () => remainingMs },
        { log: silentLog, sql, jobs, config, dispatcher, signal: stopping.signal },
      );
      running.push(worker.then((r) => (returned.push(r), r)));
    },
  };
  return {
    invocations,
    returned,
    tick: () => runScheduler({ sql, config, dispatcher }),
    async live() {
      const [r] = await sql<{ fleet: number; retiring: number; batch: number }[]>`select
          count(*) filter (where role = 'fleet' and not retiring) as fleet,
          count(*) filter (where role = 'fleet' and retiring) as retiring,
          count(*) filter (where role = 'batch') as batch
        from leasehold_processes where expires_at > now()`;
      return r;
    },
    async stop() {
      stopping.abort();
      return Promise.all(running);
    },
  };
}

/** Options of {@link slowJobOf}. */
export interface SlowJobOptions {
  /** The job's name. Default `slow`. */
  name?: string;
  /** Items run at once per run. Default 2. */
  parallel?: number;
  /** Called with the key of each item that finished waiting (a test counts executions with it). */
  onDone?: (key: string) => void;
}

/**
 * A job whose items each wait `params.ms` (ms), stopping early (and failing with `stopped`) when
 * their signal aborts; the output is `{ key }`. The runtime, fleet and units tests share it.
 */
export function slowJobOf(options: SlowJobOptions = {}) {
  return defineJob({
    name: options.name ?? 'slow',
    description: 'waits ms per item, stopping when told',
    params: z.object({ ms: z.number() }),
    parallel: options.parallel ?? 2,
    async expand() {
      return { items: [] };
    },
    async run(item) {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => (clearTimeout(t), reject(new Error('stopped')));
        const t = setTimeout(() => (item.signal.removeEventListener('abort', onAbort), resolve()), item.params.ms);
        item.signal.addEventListener('abort', onAbort, { once: true });
      });
      options.onDone?.(item.key);
      return { key: item.key };
    },
  });
}

/** `slow` of {@link slowJobOf}, counting nothing. */
export const slowJob = slowJobOf();

/** A registry of {@link slowJob} alone. */
export function slowJobs(): JobRegistry {
  return new JobRegistry([slowJob], defaultJobContext());
}
