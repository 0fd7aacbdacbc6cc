// The one table from an error's stable `code` to the HTTP status the API answers with, and the
// errors of a request itself (its route, method and body). Every other code comes from the
// library's own errors (src/errors.ts: LeaseholdError and its subclasses).
import { ERROR_CODES, isErrorCode, LeaseholdError, type ErrorCode } from '../errors.js';
import { isRetryableStoreError, StoreTimeoutError } from '../store/index.js';

/**
 * The HTTP status of each code the API answers with (the statuses of src/errors.ts's
 * {@link ERROR_CODES}, the one table; docs/api.md lists them); any other error is a 500 `internal`.
 */
export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = Object.fromEntries(
  Object.entries(ERROR_CODES).map(([code, { status }]) => [code, status]),
) as Record<ErrorCode, number>;

/** Seconds a client is asked to wait (`Retry-After`) when the database could not serve the request. */
export const RETRY_AFTER_S = 1;

/**
 * The request field a library error is about, named in front of its message when it does not
 * name it. An `invalid_batch` error names its own (`timeoutMs`, `pool`, …) unless it says
 * otherwise (`requestField`: `params` for the items they expand to).
 */
const FIELD: Readonly<Partial<Record<ErrorCode, string>>> = {
  unknown_job: 'job',
  batch_too_large: 'params',
};

/**
 * A request the API refuses for what it is rather than what it asks for: no such route (`not_found`),
 * a method the route does not take (`method_not_allowed`, with an `allow` header), a body that is
 * too large, not JSON or not UTF-8 (`body_too_large`, `unsupported_media_type`, `invalid_json`).
 */
export class RequestError extends LeaseholdError {
  constructor(
    code: ErrorCode,
    message: string,
    /** Extra response headers (for example `allow` on a 405). */
    readonly headers: Record<string, string> = {},
  ) {
    super(code, message);
  }
}

/** How the API answers an error: status, code, message and headers. */
export interface ErrorAnswer {
  status: number;
  code: ErrorCode;
  message: string;
  headers: Record<string, string>;
}

/**
 * The answer to `error` when its `code` is in {@link HTTP_STATUS}, or 503 `database_unavailable`
 * with `Retry-After` when the database could not serve it now (a retryable store error: see
 * `isRetryableStoreError`, or a store timeout); undefined for any other error
 * (a 500 whose details are logged, not answered). Read by code rather than class, so errors of
 * another copy of leasehold (an app's jobs) are answered the same.
 */
export function errorAnswer(error: unknown): ErrorAnswer | undefined {
  if (!(error instanceof Error)) return undefined;
  // The database could not serve it now (docs/design.md, "Database connections"): a connection
  // lost or refused (an IAM login limit too), a lock another session holds past `lock_timeout`,
  // a statement not answered in time. What the request did is rolled back or, for a write whose
  // answer was lost, repeatable with its request key: the client tries again.
  if (isRetryableStoreError(error) || error instanceof StoreTimeoutError) {
    return {
      status: 503,
      code: 'database_unavailable',
      message: 'the database could not serve the request now; try again',
      headers: { 'retry-after': String(RETRY_AFTER_S) },
    };
  }
  const code = (error as { code?: unknown }).code;
  if (!isErrorCode(code)) return undefined;
  const own = (error as { requestField?: unknown }).requestField;
  const field = error instanceof RequestError ? undefined : typeof own === 'string' ? own : FIELD[code];
  return {
    status: HTTP_STATUS[code],
    code,
    message: field ? `${field}: ${error.message}` : error.message,
    headers: error instanceof RequestError ? error.headers : {},
  };
}
