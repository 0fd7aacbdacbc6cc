// The embedded server's names, fixed settings and errors (part of src/local/embedded/index.ts).
import { LeaseholdError } from '../../errors.js';

/** Port tried first by {@link startEmbedded}; a free one is chosen when it is taken. */
export const EMBEDDED_DEFAULT_PORT = 54329;
/** Superuser of the embedded server. */
export const EMBEDDED_USER = 'postgres';
/**
 * Fixed password of {@link EMBEDDED_USER}. The server listens on 127.0.0.1 only and holds
 * development data; a fixed password keeps the URL stable across runs.
 */
export const EMBEDDED_PASSWORD = 'leasehold';
/** Database created (when missing) and returned by {@link startEmbedded}. */
export const EMBEDDED_DATABASE = 'leasehold';
/** File in the data folder naming the process that started the server (see {@link startEmbedded}). */
export const OWNER_FILE = 'leasehold-owner.json';

/** Base class of the embedded server's errors; `code` is stable. */
export class EmbeddedPostgresError extends LeaseholdError {
  constructor(code: string, message: string) {
    super(code, message);
  }
}

/**
 * The data folder is already served by a live PostgreSQL that this call may not stop: one
 * started by another live `leasehold dev` (or this process), or one leasehold did not start.
 */
export class EmbeddedDataDirInUseError extends EmbeddedPostgresError {
  constructor(
    /** Absolute path of the data folder. */
    readonly dir: string,
    /** PID of the PostgreSQL server holding it, when known. */
    readonly serverPid: number | undefined,
    /** PID of the leasehold process that started that server, when known. */
    readonly ownerPid: number | undefined,
  ) {
    const holder =
      ownerPid !== undefined
        ? `another running leasehold (process ${ownerPid}${serverPid ? `, PostgreSQL PID ${serverPid}` : ''})`
        : `a PostgreSQL server leasehold did not start${serverPid ? ` (PID ${serverPid})` : ''}`;
    super(
      'embedded_data_dir_in_use',
      `The embedded PostgreSQL data folder ${dir} is in use by ${holder}. ` +
        "Stop it first, run leasehold dev from another project folder (its data is that folder's .leasehold/pgdata), " +
        'or set DATABASE_URL to use an existing PostgreSQL.',
    );
  }
}

/** The embedded server could not be set up or started; `output` holds the end of its log. */
export class EmbeddedStartError extends EmbeddedPostgresError {
  constructor(
    message: string,
    /** Last lines PostgreSQL (or initdb) printed, for diagnosis. */
    readonly output = '',
  ) {
    super('embedded_start_failed', output ? `${message}\n--- PostgreSQL output (tail) ---\n${output}` : message);
  }
}
