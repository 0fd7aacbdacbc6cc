// Starting a batch whose items come from a source (issue 34, item 10): the job registry such a
// start needs and the startBatch call around it, written once here instead of in every sources
// test file.
import type { S3Client } from '@aws-sdk/client-s3';
import { startBatch, type BatchExpander, type StartRequest, type StartResult } from '../../src/batch/index.js';
import type { Sql } from '../../src/store/index.js';

/**
 * The jobs of a source batch's start: its params are stored as given, and it is never expanded
 * (its runs read the items from the source). An expand rejects, so a start that is not read from
 * a source fails the test that made it.
 */
export const sourceJobs: BatchExpander = {
  expand: () => Promise.reject(new Error('a source batch is never expanded')),
  parseParams: (_job, params) => Promise.resolve({ params }),
};

/**
 * `startBatch` on `sql` with {@link sourceJobs} and the library's default settings, checking the
 * source (and the results target) through `client` (a local S3 server's).
 */
export function startSourceBatch(sql: Sql, client: S3Client, request: StartRequest): Promise<StartResult> {
  return startBatch({ sql, jobs: sourceJobs, config: {}, s3: () => client }, request);
}
