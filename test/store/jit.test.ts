// No leasehold session JIT-compiles a plan (docs/design.md, "Database connections"). A server
// built with LLVM (Debian's PostgreSQL 15 here; the embedded one is not) compiles every plan whose
// estimate passes jit_above_cost, for tens of milliseconds to seconds each time it runs: the
// fair-share read of every tick once took 2 s so on a lived-in schema (its estimate was 594,000
// for a 0.2 ms statement), and test/lease/balance.test.ts went from 9 s to 218 s. Each test
// lowers jit_above_cost to 0 in its session, so any plan would be compiled where JIT is on.
import postgres from 'postgres';
import { describe, expect, it } from 'vitest';
import { connect, type Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase({ max: 2 });

/** Whether the plan of a read of the units was JIT-compiled, and the session's `jit`, in `sql`'s transaction or session. */
async function compiled(sql: Sql): Promise<{ jit: string; compiled: boolean }> {
  const [{ jit }] = await sql<{ jit: string }[]>`select current_setting('jit') as jit`;
  const [row] = await sql.unsafe(`explain (analyze, format json) select count(*) from leasehold_units`);
  const json = (row as Record<string, unknown>)['QUERY PLAN'];
  const top = (typeof json === 'string' ? JSON.parse(json) : json)[0] as { JIT?: unknown };
  return { jit, compiled: top.JIT !== undefined };
}

describe('JIT compilation', () => {
  it('is off in the sessions of a direct pool, even with every plan above jit_above_cost; a session that does not turn it off compiles (where the server has JIT)', async () => {
    const pool = db.connect({ max: 1 });
    await pool`set jit_above_cost = 0`;
    expect(await compiled(pool)).toEqual({ jit: 'off', compiled: false });

    // The control: a session of the same server with the server's own setting.
    const plain = postgres(db.schemaUrl, { max: 1, fetch_types: false, onnotice: () => {} }) as unknown as Sql;
    try {
      await plain`set jit = on`;
      await plain`set jit_above_cost = 0`;
      // True where the server has a JIT provider and jit is on (so not in the pool's sessions).
      const [{ available }] = await plain<{ available: boolean }[]>`select pg_jit_available() as available`;
      expect(await compiled(plain)).toEqual({ jit: 'on', compiled: available });
    } finally {
      await plain.end();
    }
  });

  it('is off in every transaction of a pool made for a transaction-mode pooler (the settings go in with each transaction)', async () => {
    const pool = connect(db.schemaUrl, { max: 1, pooler: 'transaction' });
    try {
      const seen = await pool.begin(async (tx) => {
        await tx`set local jit_above_cost = 0`;
        return compiled(tx as unknown as Sql);
      });
      expect(seen).toEqual({ jit: 'off', compiled: false });
    } finally {
      await pool.end();
    }
  });
});
