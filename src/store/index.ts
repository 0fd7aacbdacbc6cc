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
export { isConnectionError, isConnectionRefused, isIamLoginThrottled, isLockTimeout, isRetryableStoreError } from './errors.js';
export { isReadOnlyError } from './failover.js';
