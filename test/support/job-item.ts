// One item as a job's `run` gets it, for tests that call a job directly (issue 34, item 10):
// the first attempt of tenant `t`'s batch `b`, not aborted, with heartbeats and checkpoints that
// store nothing, no waits, instead of the dozen lines written out at each call.
import type { JobItem } from '../../src/jobs/index.js';

/**
 * The item `key` of a batch with `params`: input null, attempt 1, tenant `t`, batch `b`, a signal
 * never aborted, `heartbeat` and `checkpoint` that do nothing, nothing checkpointed. `overrides`
 * replaces any of them (a signal to abort, an input, a later attempt).
 *
 * ```ts
 * await checksum.run(jobItem('gone.txt', { dir }), jobs.context());
 * ```
 */
export function jobItem<P>(key: string, params: P, overrides: Partial<JobItem<P>> = {}): JobItem<P> {
  return {
    key,
    input: null,
    params,
    attempt: 1,
    heartbeat: () => {},
    checkpoint: async () => {},
    checkpointed: undefined,
    waitForCallback: () => Promise.reject(new Error('this test item cannot wait')),
    sleep: () => Promise.reject(new Error('this test item cannot wait')),
    sleepUntil: () => Promise.reject(new Error('this test item cannot wait')),
    callback: undefined,
    slept: false,
    signal: new AbortController().signal,
    tenant: 't',
    batchId: 'b',
    ...overrides,
  };
}
