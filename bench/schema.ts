// A migrated schema of its own for one benchmark part, dropped after.
import { connect, migrate, type Sql } from '../src/store/index.js';

/**
 * Create schema `<prefix>_<now>` on `url`, migrate it and return its name and a pool of `max`
 * connections in it (named `applicationName` when given, so its backends can be found in
 * `pg_stat_activity`); `drop()` ends the pool and removes the schema.
 */
export async function benchSchema(
  url: string,
  prefix: string,
  max: number,
  applicationName?: string,
): Promise<{ schema: string; sql: Sql; drop(): Promise<void> }> {
  const schema = `${prefix}_${Date.now()}`;
  const admin = connect(url, { max: 1 });
  await admin`create schema ${admin(schema)}`;
  const sql = connect(url, { max, schema, ...(applicationName ? { applicationName } : {}) });
  const drop = async () => {
    await sql.end();
    await admin`drop schema ${admin(schema)} cascade`;
    await admin.end();
  };
  try {
    await migrate(sql);
  } catch (e) {
    await drop();
    throw e;
  }
  return { schema, sql, drop };
}
