/**
 * The one base of leasehold's errors: every error leasehold throws on purpose carries a stable
 * machine-readable `code` (`too_many_batches`, `invalid_request`, …). The codes a request can
 * meet are {@link ERROR_CODES}, the one table: the HTTP API answers each with its status
 * (src/api/errors.ts), the trigger drops an event whose error is `permanent` and retries the
 * rest. Subclasses are named for what happened.
 */
export class LeaseholdError extends Error {
  constructor(
    /** Stable machine-readable code. */
    readonly code: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Input that breaks a rule (a field missing, of the wrong type, out of range, unstorable); the
 * message names the field (`tenant: Required`). Code `invalid_request`; the API answers 400.
 */
export class InvalidRequestError extends LeaseholdError {
  constructor(message: string, options?: ErrorOptions) {
    super('invalid_request', message, options);
  }
}

/**
 * A setting or argument out of range or inconsistent with another. `setting` names it as the
 * caller spelt it (`attempts`, `executor.parallel`, `heartbeatIntervalMs`), `reason` says what
 * is wrong (`must be an integer from 1 to 1000 (got 0)`); the message is both. Code
 * `invalid_setting` by default. `loadConfig` turns these into errors naming the environment variable.
 */
export class InvalidSettingError extends LeaseholdError {
  constructor(
    readonly setting: string,
    readonly reason: string,
    code = 'invalid_setting',
    message = `${setting} ${reason}`,
  ) {
    super(code, message);
  }
}

/**
 * Every code a request can meet (docs/api.md, "Error codes"): the HTTP status the API answers it
 * with, and `permanent` when the request itself is at fault for good (asking again cannot
 * succeed: a trigger event refused so is dropped, not retried; docs/design.md, "Serverless
 * runtime"). Codes not here are the library's own (`invalid_setting`, `batch_lost`, …): the API
 * answers them 500 `internal`, the trigger retries.
 */
export const ERROR_CODES = {
  invalid_request: { status: 400, permanent: true },
  invalid_json: { status: 400, permanent: true },
  invalid_params: { status: 400, permanent: true },
  invalid_batch: { status: 400, permanent: true },
  invalid_source: { status: 400 },
  source_access_denied: { status: 403 },
  source_not_found: { status: 404 },
  source_unavailable: { status: 503 },
  batch_cancelled: { status: 400 },
  not_found: { status: 404 },
  batch_not_found: { status: 404 },
  unknown_job: { status: 404, permanent: true },
  no_outbox_units: { status: 404 },
  unit_not_found: { status: 404 },
  action_not_found: { status: 404 },
  invalid_callback_token: { status: 403 },
  callback_not_found: { status: 404 },
  method_not_allowed: { status: 405 },
  batch_finished: { status: 409 },
  batch_open: { status: 409 },
  nothing_to_redrive: { status: 409 },
  batch_expired: { status: 409 },
  source_failed: { status: 409 },
  callback_completed: { status: 409 },
  callback_timed_out: { status: 409 },
  body_too_large: { status: 413 },
  batch_too_large: { status: 413, permanent: true },
  too_many_matched: { status: 413, permanent: true },
  unsupported_media_type: { status: 415 },
  too_many_batches: { status: 429 },
  database_unavailable: { status: 503 },
} as const satisfies Record<string, { status: number; permanent?: true }>;

/** A code of {@link ERROR_CODES}. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Whether `code` is one of {@link ERROR_CODES}. */
export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERROR_CODES, code);
}

/** The `code` an error carries (a {@link LeaseholdError}'s, a driver's), if any. */
export function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Whether `error` carries a {@link ERROR_CODES} code that is `permanent`: the request can never succeed. */
export function isPermanentRequestError(error: unknown): boolean {
  const code = codeOf(error);
  return isErrorCode(code) && 'permanent' in ERROR_CODES[code];
}
