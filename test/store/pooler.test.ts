// Behind a transaction-mode pooler (issue 18, item 6): Debian's PgBouncer in `pool_mode =
// transaction` in front of the test server, with fewer server sessions than client connections.
// The server's and PgBouncer's own evidence (pg_stat_activity, pg_locks, SHOW SERVERS, SHOW
// STATS) shows the traffic went through it and was multiplexed; then what a pool made for a
// pooler must do: no setting in its startup packet, its settings set for each transaction alone,
// no named prepared statement, no session advisory lock.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBatch, getBatch, Runner, type Executor } from '../../src/batch/index.js';
import { planInvocations } from '../../src/lease/sql/fleet.js';
import { loadConfig, openDatabase } from '../../src/runtime/index.js';
import { connect, migrate, type Sql } from '../../src/store/index.js';
import { databaseUrl, testDatabase, type TestDatabase } from '../support/db.js';
import { startPgbouncer, type Pgbouncer } from '../support/pgbouncer.js';
import { needs, PGBOUNCER } from '../support/programs.js';

const ROOT = resolve(import.meta.dirname, '../..');

let bouncer: Pgbouncer;
let db: TestDatabase;
let admin: Sql;
let console_: Sql;

/** PgBouncer's server sessions to the test database (`SHOW SERVERS`): the backend pid and PgBouncer's own port of each. */
async function servers(): Promise<{ pid: number; localPort: number }[]> {
  const rows = await console_.unsafe<{ database: string; remote_pid: string; local_port: string }[]>('show servers', [], {
    simple: true,
  } as never);
  return rows
    .filter((r) => r.database === db.schema)
    .map((r) => ({ pid: Number(r.remote_pid), localPort: Number(r.local_port) }));
}

/** Transactions PgBouncer counted for the test database (`SHOW STATS`). */
async function transactionsCounted(): Promise<number> {
  const rows = await console_.unsafe<{ database: string; total_xact_count: string }[]>('show stats', [], {
    simple: true,
  } as never);
  return Number(rows.find((r) => r.database === db.schema)?.total_xact_count ?? 0);
}

describe('a pool made for a transaction-mode pooler, through PgBouncer', needs(PGBOUNCER), () => {
  beforeAll(async () => {
    // Two server sessions for the test database: six client connections must share them.
    bouncer = await startPgbouncer(databaseUrl(), { poolSize: 2 });
    db = await testDatabase({ pooler: bouncer.url(), max: 6 });
    admin = connect(databaseUrl(), { max: 1, applicationName: 'leasehold-test-admin' });
    // The admin console speaks the simple protocol only.
    console_ = postgres(bouncer.adminUrl, { max: 1, prepare: false, fetch_types: false, onnotice: () => {} }) as unknown as Sql;
  });
  afterAll(async () => {
    await db?.close();
    await admin?.end();
    await console_?.end();
    await bouncer?.stop();
  });

  it("runs on PgBouncer's server sessions (the server's pg_stat_activity and PgBouncer's SHOW SERVERS agree), more clients than sessions, each transaction with the pool's own settings and the session left as it was", async () => {
    const before = await transactionsCounted();
    const sql = db.connect({ max: 6, lockTimeoutMs: 1_234, statementTimeoutMs: 4_321, idleInTransactionTimeoutMs: 5_678 });
    // Six transactions at once, each holding its session for a moment, each on its own client connection.
    const seen = await Promise.all(
      Array.from({ length: 6 }, () =>
        sql.begin(async (tx) => {
          const [r] = await tx<{ pid: number; lock: string; statement: string; idle: string; path: string }[]>`
            select pg_backend_pid() as pid, current_setting('lock_timeout') as lock,
              current_setting('statement_timeout') as statement,
              current_setting('idle_in_transaction_session_timeout') as idle,
              current_setting('search_path') as path, pg_sleep(0.1)`;
          return r;
        }),
      ),
    );
    for (const r of seen) expect(r).toMatchObject({ lock: '1234ms', statement: '4321ms', idle: '5678ms', path: db.schema });
    // Six client connections, at most two server sessions: PgBouncer multiplexed them.
    const pids = new Set(seen.map((r) => r.pid));
    expect(pids.size).toBeLessThanOrEqual(2);
    // Outside a transaction the session has the database's settings, not the pool's: nothing of
    // a transaction stayed on the session PgBouncer lent it.
    const [outside] = await sql<{ lock: string; statement: string }[]>`
      select current_setting('lock_timeout') as lock, current_setting('statement_timeout') as statement`;
    expect(outside).toEqual({ lock: '2s', statement: '30s' });

    // PgBouncer's evidence: those backends are its server sessions, and it counted the transactions.
    const mine = await servers();
    for (const pid of pids) expect(mine.map((s) => s.pid)).toContain(pid);
    expect((await transactionsCounted()) - before).toBeGreaterThanOrEqual(7);
    // The server's evidence: every session of the test database comes from one of PgBouncer's
    // sockets (its client port is PgBouncer's local port of that server connection).
    const backends = await admin<{ pid: number; port: number }[]>`
      select pid, client_port as port from pg_stat_activity where datname = ${db.schema}`;
    expect(backends.length).toBeGreaterThan(0);
    expect(backends.length).toBeLessThanOrEqual(2);
    for (const b of backends) expect(mine).toContainEqual({ pid: b.pid, localPort: b.port });
  });

  it('a pool that is not made for a pooler is refused at its first statement: PgBouncer does not pass on the settings of its startup packet', async () => {
    const plain = connect(db.url, { max: 1 });
    try {
      await expect(plain`select 1`).rejects.toMatchObject({ message: expect.stringMatching(/unsupported startup parameter/) });
    } finally {
      await plain.end();
    }
  });

  it("a function's pool with LEASEHOLD_DB_POOLER=transaction works through it; without the variable the same URL is refused", async () => {
    const pooled = openDatabase(loadConfig({ ...db.env }));
    const plain = openDatabase(loadConfig({ DATABASE_URL: db.schemaUrl }));
    try {
      expect(db.env.LEASEHOLD_DB_POOLER).toBe('transaction');
      const [r] = await pooled.begin(
        (tx) => tx<{ n: number; lock: string }[]>`
        select count(*)::int as n, current_setting('lock_timeout') as lock from leasehold_batches`,
      );
      expect(r).toMatchObject({ lock: '2s' });
      await expect(plain`select 1`).rejects.toMatchObject({ message: expect.stringMatching(/unsupported startup parameter/) });
    } finally {
      await pooled.end();
      await plain.end();
    }
  });

  it("named prepared statements break behind it (a transaction's statement lands on a session that never prepared it); the pooler's pool makes none", async () => {
    // postgres.js's defaults: a named prepared statement per query text, made on first use.
    const prepared = postgres(db.url, { max: 1, fetch_types: false, onnotice: () => {} });
    const holder = postgres(db.url, { max: 1, prepare: false, fetch_types: false, onnotice: () => {} });
    try {
      const probe = (s: postgres.Sql | postgres.TransactionSql) =>
        s`select count(*)::int as n from leasehold_batches where tenant = ${'x'}`;
      // Prepared on the one server session there is.
      await probe(prepared);
      // Another client holds that session in a transaction (PgBouncer hands out the session used
      // last first), so the next transaction gets the other one, where the statement is missing.
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const holding = holder.begin(async (tx) => {
        await tx`select 1`;
        await held;
      });
      await new Promise((r) => setTimeout(r, 100));
      const inTransaction = prepared
        .begin((tx) => probe(tx))
        .then(
          () => undefined,
          (e: unknown) => e as { code?: string; message?: string },
        );
      const error = await inTransaction;
      release();
      await holding;
      expect(error, 'the prepared statement was missing on the other session').toMatchObject({ code: '26000' });

      // The same through a pool made for the pooler: no statement is prepared, so none is missing.
      const sql = db.connect({ max: 1 });
      await probe(sql as unknown as postgres.Sql);
      let release2!: () => void;
      const held2 = new Promise<void>((r) => (release2 = r));
      const holding2 = holder.begin(async (tx) => {
        await tx`select 1`;
        await held2;
      });
      await new Promise((r) => setTimeout(r, 100));
      const [{ n }] = await sql.begin((tx) => probe(tx as unknown as postgres.TransactionSql));
      release2();
      await holding2;
      expect(n).toBe(0);
    } finally {
      await prepared.end();
      await holder.end();
    }
  });

  it('a batch runs to its end through it, migrations run through it concurrently, and the scheduler leaves no advisory lock on any session', async () => {
    const sql = db.connect({ max: 4 });
    // Two migrators at once through the pooler: the transaction-scoped lock orders them.
    const applied = await Promise.all([migrate(sql), migrate(db.connect({ max: 1 }))]);
    expect(applied.flat()).toEqual([]);
    const { batch } = await createBatch(sql, {
      tenant: 'p',
      datasource: 'd',
      job: 'noop',
      params: {},
      requestKey: 'pooled-1',
      items: Array.from({ length: 300 }, (_, i) => ({ key: `k${i}` })),
    });
    const noop: Executor = { parallel: 16, work: async () => null };
    const runner = new Runner(sql, { parallel: 16 });
    await runner.takeOver(() => noop, batch.id);
    expect((await runner.running(batch.id))?.outcome).toBe('succeeded');
    expect(await getBatch(sql, batch.id)).toMatchObject({ status: 'succeeded', counts: { done: 300 } });
    // The scheduler's lock, several callers at once.
    await Promise.all(Array.from({ length: 4 }, () => planInvocations(sql, { cap: 0, pendingMs: 30_000 })));
    const [{ held }] = await admin<{ held: number }[]>`select count(*)::int as held from pg_locks l
      join pg_stat_activity a on a.pid = l.pid where l.locktype = 'advisory' and a.datname = ${db.schema}`;
    expect(held).toBe(0);
  });

  it('a cursor outside a transaction reads every row through it while other clients use the other session', async () => {
    const sql = db.connect({ max: 2 });
    let rows = 0;
    let pages = 0;
    for await (const page of sql<{ n: number }[]>`select generate_series(1, 2500) as n`.cursor(1000)) {
      rows += page.length;
      pages++;
      // Meanwhile the other client connection works on the other server session.
      await sql`select 1`;
    }
    expect({ rows, pages }).toEqual({ rows: 2500, pages: 3 });
  });
});

/** Every file under `dir` ending in one of `exts`. */
function files(dir: string, exts: string[]): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path, exts);
    return exts.some((e) => name.endsWith(e)) ? [path] : [];
  });
}

describe('nothing in leasehold needs a session', () => {
  it('no session advisory lock, LISTEN/NOTIFY, temporary table, held cursor, named PREPARE or session SET in its code or migrations', () => {
    const forbidden: [string, RegExp][] = [
      ['a session advisory lock', /pg_(try_)?advisory_lock(_shared)?\s*\(/i],
      // A channel name and then the statement's end (or a NOTIFY's payload): not `notify as …` in code.
      [
        'LISTEN or NOTIFY',
        /\b(listen|unlisten|notify)\s+[a-z_"][\w"]*\s*(,|;|`|$)|pg_notify\s*\(|\b(sql|tx|t|s)\.(listen|notify)\(/im,
      ],
      ['a temporary table', /\bcreate\s+(global\s+|local\s+)?(temp|temporary)\s+(table|sequence|view)\b/i],
      ['a held cursor', /\bwith\s+hold\b/i],
      ['a named PREPARE', /\bprepare\s+[a-z_"][\w"]*\s*(\(|as\b)/i],
      ['a session SET', /`\s*set\s+(session\s+)?(?!local\b)[a-z_]+\s*(=|to\b)/i],
      ['a session set_config', /set_config\([^)]*,\s*false\s*\)/i],
      ['a session RESET or DISCARD', /`\s*(reset|discard)\s+/i],
    ];
    const sources = [...files(join(ROOT, 'src'), ['.ts', '.sql']), ...files(join(ROOT, 'functions'), ['.ts'])].filter(
      (f) => !f.includes(`${join('src', 'dashboard')}`),
    );
    expect(sources.length).toBeGreaterThan(50);
    const found: string[] = [];
    for (const file of sources) {
      const text = readFileSync(file, 'utf8')
        // Comments may name what is avoided.
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/^\s*(\/\/|--).*$/gm, '');
      for (const [what, pattern] of forbidden) if (pattern.test(text)) found.push(`${relative(ROOT, file)}: ${what}`);
    }
    expect(found).toEqual([]);
  });
});
