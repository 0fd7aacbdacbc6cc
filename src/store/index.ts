// The store (docs/design.md, "The database in production", "Schema versions", "Database connections").
//
// Owns the schema itself: the numbered migrations under migrations/ (every table the other
// modules own is created here) and the schema version they leave. Keeps no numbered invariant
// itself but the ground every one stands on: the pool never prepares named statements or sets
// session state (so it works through a transaction-mode pooler), takes locks with a timeout,
// and drops a connection that can no longer serve rather than queueing behind it.
// Entry points: `connect` (the pool), `migrate`, `checkSchema`, `provisionRuntimeRole`,
// `withTimeout`, and the error classifiers (`isConnectionError`, `isRetryableStoreError`, …).
// The bottom layer: it imports nothing of the modules that use it.
export { connect, type Sql, type ConnectOptions, type ConnectTarget } from './connect.js';
export {
  migrate,
  migrationFiles,
  DEFAULT_MIGRATIONS_DIR,
  MIGRATE_LOCK_DEFAULTS,
  MigrationLockError,
  type Migration,
  type MigrateOptions,
} from './migrate.js';
export { provisionRuntimeRole, databaseConnectionLimit, type RuntimeRole, type RuntimeRoleResult } from './roles.js';
export { withTimeout, StoreTimeoutError } from './timeout.js';
export { isCatalogRace, retryCatalogRace } from './catalog.js';
export {
  SUPPORTED_SCHEMA,
  SCHEMA_CHANGE_CODES,
  SchemaMismatchError,
  checkSchema,
  isSchemaChangeError,
  schemaVersion,
  type SchemaRange,
} from './schema.js';
export {
  isConnectionError,
  isConnectionRefused,
  isIamLoginThrottled,
  isLockTimeout,
  isRetryableStoreError,
  isUnsupportedStartupParameter,
  PoolerModeError,
} from './errors.js';
export { isReadOnlyError } from './failover.js';
