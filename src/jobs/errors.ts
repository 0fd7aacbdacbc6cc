// The errors of a job's start: params refused, a job no one defined. Their own file, so a job's
// lazily loaded work (./checksum-files.ts, ./lambda-invoke-expand.ts) can throw them without
// reaching the job registry's imports.
import { LeaseholdError } from '../errors.js';

/** Params that are well-shaped but refused (for example a directory outside the allowed roots). API: 400. */
export class InvalidParamsError extends LeaseholdError {
  constructor(
    /** Dotted path of the offending field, e.g. `params.dir`. */
    readonly field: string,
    message: string,
  ) {
    super('invalid_params', `${field}: ${message}`);
  }
}

/**
 * No job has this name. API: 404. With `known` (the app's job names, as {@link JobRegistry}
 * gives them), the message names them, so a typo shows what was meant: `unknown job "chekcsum"
 * (this app's jobs: checksum, lambda-invoke)`, or `(this app has no jobs)`.
 */
export class UnknownJobError extends LeaseholdError {
  constructor(
    readonly job: string,
    known?: readonly string[],
  ) {
    super('unknown_job', `unknown job "${job}"${known === undefined ? '' : ` (${jobsText(known)})`}`);
  }
}

/** At most this many job names in an {@link UnknownJobError}'s message; the rest are counted. */
const NAMED_JOBS = 20;

function jobsText(known: readonly string[]): string {
  if (known.length === 0) return 'this app has no jobs';
  const named = known.slice(0, NAMED_JOBS).join(', ');
  return `this app's jobs: ${named}${known.length > NAMED_JOBS ? ` and ${known.length - NAMED_JOBS} more` : ''}`;
}
