// Jobs (docs/jobs.md; docs/design.md, "Two kinds of work": batches).
//
// Owns no table: a job is code a batch runs (`defineJob`), kept in a `JobRegistry` by name.
// Keeps invariant 7 for a job's items (one item's input or fault stops no other) by validating
// params at start (`InvalidParamsError`) and leaving retries to the run. Entry points:
// `defineJob`, `JobRegistry`, `defaultRegistry`, and the built-in jobs `checksum` and
// `lambdaInvoke`. Uses batches and the store, nothing above the domain.
import { tmpdir } from 'node:os';
import { DEFAULT_START_LIMITS } from '../batch/index.js';
import { checksum } from './checksum.js';
import { JobRegistry, type Job, type JobContext } from './job.js';
import { lambdaInvoke } from './lambda-invoke.js';

export * from './job.js';
export * from './errors.js';
export { checksum, type ChecksumOutput } from './checksum.js';
export { isUnder } from './checksum-files.js';
export { lambdaInvoke, DEFAULT_BYTES_PER_CALL, MAX_BYTES_PER_CALL } from './lambda-invoke.js';
export {
  LambdaFunctionError,
  LambdaThrottledError,
  LambdaPayloadTooLargeError,
  MAX_SYNC_PAYLOAD_BYTES,
  LambdaItemError,
  LambdaCallbackError,
  type LambdaInvokeCallback,
  type LambdaInvokeCallEvent,
  type LambdaInvokeCallResult,
  type LambdaInvokeEvent,
  type LambdaInvokeParams,
} from './lambda-invoke-wire.js';

/** Jobs shipped with leasehold: `checksum` and `lambda-invoke`. An app picks the ones it wants (`createHandlers`). */
export const builtinJobs: Job<unknown, unknown>[] = [checksum, lambdaInvoke];

/** Default {@link JobContext}: allowed roots are the working directory and the OS temp dir. */
export function defaultJobContext(overrides: Partial<JobContext> = {}): JobContext {
  return { allowedRoots: [process.cwd(), tmpdir()], maxItems: DEFAULT_START_LIMITS.maxItems, ...overrides };
}

/** A registry of the built-in jobs plus `extra`. */
export function defaultRegistry(ctx: JobContext = defaultJobContext(), extra: Job<unknown, unknown>[] = []): JobRegistry {
  return new JobRegistry([...builtinJobs, ...extra], ctx);
}
