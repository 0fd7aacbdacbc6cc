// Running a batch to its end with real runners (issue 34, item 10): start N runners that watch
// for work, wait until the batch is no longer open, close them however the wait ended.
import type { Sql } from '../../src/store/index.js';
import { getBatch, Runner, type BatchInfo, type RunnerOptions } from '../../src/batch/index.js';
import { waitFor } from './waits.js';

/** What {@link runUntilEnd} takes. */
export interface RunUntilEndOptions {
  /** Runners started at once, each watching for batches. Default 1. */
  runners?: number;
  /** Options of every runner. */
  runner?: RunnerOptions;
  /** A runner's pool for runner `i` (default `sql` for all, e.g. `() => db.connect()` for one each). */
  pool?: (i: number) => Sql;
  /** How often each runner looks for work, ms. Default 20. */
  watchMs?: number;
  /** How long the batch may take to end, ms. Default 60,000. */
  timeoutMs?: number;
  /** Polling interval of the wait, ms. Default 100. */
  everyMs?: number;
  /** When the wait is over. Default: the batch is no longer `open`. */
  until?: (batch: BatchInfo) => boolean;
}

/**
 * Start `runners` runners on `sql`, each watching with `resolve`, until batch `id` has ended (or
 * `until` holds), then close every runner, whether the wait ended or timed out. Answers the
 * batch as it is after the runners closed.
 * @throws the wait's timeout error when the batch does not end within `timeoutMs`.
 */
export async function runUntilEnd(
  sql: Sql,
  id: string,
  resolve: Parameters<Runner['watch']>[0],
  options: RunUntilEndOptions = {},
): Promise<BatchInfo> {
  const until = options.until ?? ((b: BatchInfo) => b.status !== 'open');
  const runners = Array.from({ length: options.runners ?? 1 }, (_, i) => new Runner(options.pool?.(i) ?? sql, options.runner));
  try {
    for (const r of runners) r.watch(resolve, options.watchMs ?? 20);
    await waitFor('the batch to end', async () => until(await getBatch(sql, id)), {
      timeoutMs: options.timeoutMs ?? 60_000,
      everyMs: options.everyMs ?? 100,
    });
  } finally {
    await Promise.all(runners.map((r) => r.close()));
  }
  return getBatch(sql, id);
}
