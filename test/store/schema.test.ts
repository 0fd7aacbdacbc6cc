// The schema versions this code supports (docs/design.md, "Schema versions") against the
// migrations it ships and a real database's.
import { expect, it } from 'vitest';
import {
  checkSchema,
  isSchemaChangeError,
  migrationFiles,
  SchemaMismatchError,
  SUPPORTED_SCHEMA,
  schemaVersion,
} from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();
const empty = useTestDatabase({ migrate: false });

it('supports up to the newest migration it ships (a new migration bumps SUPPORTED_SCHEMA)', async () => {
  const newest = Math.max(...(await migrationFiles()).map((m) => m.version));
  expect(SUPPORTED_SCHEMA.max).toBe(newest);
  expect(SUPPORTED_SCHEMA.min).toBeLessThanOrEqual(SUPPORTED_SCHEMA.max);
  expect(await schemaVersion(db.sql)).toBe(newest);
  expect(await checkSchema(db.sql)).toBe(newest);
});

it('refuses a database outside the range: newer, older, or never migrated', async () => {
  const v = await schemaVersion(db.sql);
  await expect(checkSchema(db.sql, { min: v - 2, max: v - 1 })).rejects.toThrow(/newer: this code is older/);
  await expect(checkSchema(db.sql, { min: v + 1, max: v + 1 })).rejects.toThrow(/older: migrate first/);
  const never = await checkSchema(empty.sql).catch((e: unknown) => e);
  expect(never).toBeInstanceOf(SchemaMismatchError);
  expect(never).toMatchObject({ code: 'schema_mismatch', version: 0 });
});

it('knows the errors a changed schema gives, from the server itself', async () => {
  const errors = await Promise.all([
    db.sql`select no_such_column from leasehold_units`.catch((e: unknown) => e),
    db.sql`select 1 from no_such_table`.catch((e: unknown) => e),
    // A function a later migration dropped or changed the arguments of (pooler mode's move + claim).
    db.sql`select * from leasehold_step(${'x'}::text)`.catch((e: unknown) => e),
    db.sql`select 1 / 0`.catch((e: unknown) => e),
  ]);
  expect(errors.map((e) => (e as { code: string }).code)).toEqual(['42703', '42P01', '42883', '22012']);
  expect(errors.map(isSchemaChangeError)).toEqual([true, true, true, false]);
  expect(isSchemaChangeError(new Error('wrapped', { cause: errors[0] }))).toBe(true);
});
