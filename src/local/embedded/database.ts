// The embedded server's database: created when missing (part of src/local/embedded/index.ts).
import { stat } from 'node:fs/promises';
import postgres from 'postgres';
import { EMBEDDED_PASSWORD, EMBEDDED_USER } from './common.js';

/** Create `database` unless it exists; a concurrent creation is fine. */
export async function ensureDatabase(port: number, database: string): Promise<void> {
  const sql = postgres({
    host: '127.0.0.1',
    port,
    user: EMBEDDED_USER,
    password: EMBEDDED_PASSWORD,
    database: 'postgres',
    max: 1,
    onnotice: () => {},
    connect_timeout: 10,
  });
  try {
    const found = await sql`select 1 from pg_database where datname = ${database}`;
    if (found.length === 0) {
      await sql`create database ${sql(database)}`.catch((e: { code?: string }) => {
        if (e.code !== '42P04') throw e; // duplicate_database: created meanwhile
      });
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
