// Which schema versions this code runs on, and the check every function makes before it acts
// (docs/design.md, "Schema versions"). The schema version of a database is the newest migration
// applied to it (leasehold_migrations).
import { LeaseholdError } from '../errors.js';
import type { Sql } from './connect.js';

/** A range of schema versions (migration numbers), both ends included. */
export interface SchemaRange {
  min: number;
  max: number;
}

/**
 * The schema versions this code supports: `min`, the newest migration its statements need;
 * `max`, the newest migration it ships (`test/store/schema.test.ts` checks it against the
 * migration files). Old code finds a newer schema outside its range and stops before it acts.
 */
export const SUPPORTED_SCHEMA: Readonly<SchemaRange> = { min: 43, max: 43 };

/**
 * The database's schema version is outside what this code supports (code `schema_mismatch`):
 * older (migrate has not run yet) or newer (this is old code still running after a migration).
 */
export class SchemaMismatchError extends LeaseholdError {
  constructor(
    readonly version: number,
    readonly supported: SchemaRange,
  ) {
    super(
      'schema_mismatch',
      `the database schema is at version ${version}, this code supports ${supported.min}–${supported.max}` +
        (version > supported.max ? ' (newer: this code is older than the last migration)' : ' (older: migrate first)'),
    );
  }
}

/**
 * SQLSTATEs that a schema change under running code produces: `0A000` (feature not supported,
 * e.g. "cached plan must not change result type"), `42P01` (undefined table), `42703`
 * (undefined column), `42883` (undefined function: the move + claim is a call of
 * `leasehold_step` in pooler mode, migration 043). After one of them a function checks the
 * schema version again.
 */
export const SCHEMA_CHANGE_CODES: readonly string[] = ['0A000', '42P01', '42703', '42883'];

/** Whether `error` (or its `cause`) is a database error of {@link SCHEMA_CHANGE_CODES}. */
export function isSchemaChangeError(error: unknown): boolean {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && SCHEMA_CHANGE_CODES.includes(code)) return true;
  }
  return false;
}

/**
 * The database's schema version: the newest migration applied (0 when none is). One backward
 * step of leasehold_migrations' primary key.
 */
export async function schemaVersion(sql: Sql): Promise<number> {
  const [r] = await sql<{ v: number | null }[]>`select max(version) as v from leasehold_migrations`;
  return r.v ?? 0;
}

/**
 * Read the schema version and check it against `supported` (default {@link SUPPORTED_SCHEMA}).
 * @throws {SchemaMismatchError} outside the range (also when leasehold_migrations is missing: version 0).
 * @throws the store's error otherwise.
 */
export async function checkSchema(sql: Sql, supported: SchemaRange = SUPPORTED_SCHEMA): Promise<number> {
  let version: number;
  try {
    version = await schemaVersion(sql);
  } catch (e) {
    if ((e as { code?: unknown }).code !== '42P01') throw e;
    version = 0;
  }
  if (version < supported.min || version > supported.max) throw new SchemaMismatchError(version, supported);
  return version;
}
