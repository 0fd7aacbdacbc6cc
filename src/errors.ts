/**
 * The one base of leasehold's errors: every error leasehold throws on purpose carries a stable
 * machine-readable `code` (`too_many_batches`, `invalid_request`, …). The HTTP API answers each
 * code with one status from one table (`src/api/errors.ts`); the trigger decides from the code
 * whether an event is dropped or retried. Subclasses are named for what happened.
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
