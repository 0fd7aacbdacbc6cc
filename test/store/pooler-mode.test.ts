// A pool not made for a pooler, behind PgBouncer (issue 38, item 11): PgBouncer refuses every
// connection whose startup packet carries a setting it does not track ("unsupported startup
// parameter"). leasehold names the setting to change once, in one error, and stops opening
// connections that cannot work.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultJobContext, JobRegistry } from '../../src/jobs/index.js';
import { loadConfig, openDatabase, runWorker } from '../../src/runtime/index.js';
import { PoolerModeError } from '../../src/store/index.js';
import { databaseUrl, testDatabase, type TestDatabase } from '../support/db.js';
import { memoryLog } from '../support/log.js';
import { startPgbouncer, type Pgbouncer } from '../support/pgbouncer.js';
import { needs, PGBOUNCER } from '../support/programs.js';

let bouncer: Pgbouncer;
let db: TestDatabase;

/** PgBouncer's own log lines refusing a startup parameter so far. */
const refusals = () =>
  bouncer
    .log()
    .split('\n')
    .filter((l) => /pooler error: unsupported startup parameter/.test(l)).length;

describe('a pool without pooler mode behind PgBouncer', needs(PGBOUNCER), () => {
  beforeAll(async () => {
    bouncer = await startPgbouncer(databaseUrl(), { poolSize: 2 });
    db = await testDatabase({ pooler: bouncer.url(), max: 2 });
  });
  afterAll(async () => {
    await db?.close();
    await bouncer?.stop();
  });

  it('fails every statement with one error naming LEASEHOLD_DB_POOLER=transaction, after refusing only the connections opened at once (3 rounds)', async () => {
    for (let round = 0; round < 3; round++) {
      const before = refusals();
      const plain = openDatabase(loadConfig({ DATABASE_URL: db.schemaUrl }), { max: 4 });
      try {
        // A worker's load for 2 s: statements every 20 ms, four at a time.
        const errors: unknown[] = [];
        const until = Date.now() + 2_000;
        while (Date.now() < until) {
          const got = await Promise.allSettled([1, 2, 3, 4].map(() => plain`select 1`));
          for (const r of got) if (r.status === 'rejected') errors.push(r.reason);
          await new Promise((r) => setTimeout(r, 20));
        }
        // PgBouncer's own log: the connections it refused (at most the four opened at once).
        await new Promise((r) => setTimeout(r, 200));
        const refused = refusals() - before;
        console.log(
          `[pooler-mode] round ${round}: ${errors.length} statements failed, ${refused} connections refused by PgBouncer`,
        );
        expect(errors.length).toBeGreaterThan(40);
        // One error: the same instance every time, naming the setting, with the pooler's words as its cause.
        expect(new Set(errors).size).toBe(1);
        const [error] = errors;
        expect(error).toBeInstanceOf(PoolerModeError);
        expect(error).toMatchObject({ code: 'pooler_mode', message: expect.stringMatching(/LEASEHOLD_DB_POOLER=transaction/) });
        expect((error as Error).cause).toMatchObject({ message: expect.stringMatching(/unsupported startup parameter/) });
        // Transactions are refused the same way, at once.
        await expect(plain.begin((tx) => tx`select 1`)).rejects.toBe(error);
        expect(refused).toBeGreaterThan(0);
        expect(refused).toBeLessThanOrEqual(4);
      } finally {
        await plain.end({ timeout: 1 });
      }
    }
  }, 60_000);

  it('a worker with that pool logs one error naming the setting and stops at once', async () => {
    const config = loadConfig({ DATABASE_URL: db.schemaUrl, LEASEHOLD_HEARTBEAT_MS: '100', LEASEHOLD_WORKER_POLL_MS: '50' });
    const plain = openDatabase(config);
    const { log, entries } = memoryLog();
    const before = refusals();
    try {
      const started = Date.now();
      // Past the default deadline margin (10 s), or the worker would start late and act on nothing.
      const end = Date.now() + 30_000;
      const error = await runWorker(
        {},
        { getRemainingTimeInMillis: () => end - Date.now() },
        {
          log,
          sql: plain,
          jobs: new JobRegistry([], defaultJobContext()),
          config,
          dispatcher: { invoke: async () => {} },
        },
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      const tookMs = Date.now() - started;
      await new Promise((r) => setTimeout(r, 200));
      const named = entries.filter((e) => /LEASEHOLD_DB_POOLER|unsupported startup parameter/.test(JSON.stringify(e)));
      console.log(
        `[pooler-mode] worker: returned in ${tookMs} ms, ${entries.length} log lines, ${refusals() - before} refused connections`,
      );
      expect(error).toBeInstanceOf(PoolerModeError);
      expect(named).toHaveLength(1);
      expect(named[0]).toMatchObject({ level: 'error' });
      expect(tookMs).toBeLessThan(2_000);
    } finally {
      await plain.end({ timeout: 1 });
    }
  }, 30_000);
});
