export { connect, type Sql, type ConnectOptions } from './connect.js';
export { migrate, migrationFiles, type Migration } from './migrate.js';
