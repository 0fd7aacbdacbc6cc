// Old code after a migration (docs/design.md, "Schema versions"): a worker and a scheduler built
// against schema N meet a database that a real migration moved to N+1. Started then, they act on
// nothing; a worker already running when a migration changes a column it uses stops at its next
// error of a changed schema, owning nothing, and says why once.
import { copyFile, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, expect, it } from 'vitest';
import { createBatch } from '../../src/batch/index.js';
import { defaultJobContext, JobRegistry } from '../../src/jobs/index.js';
import { slowJobOf } from '../support/fleet.js';
import { putTenantUnits, setDesired } from '../../src/lease/index.js';
import { loadConfig, runScheduler, runWorker } from '../../src/runtime/index.js';
import { DEFAULT_MIGRATIONS_DIR, migrate, SchemaMismatchError, SUPPORTED_SCHEMA, schemaVersion } from '../../src/store/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { memoryLog } from '../support/log.js';
import { waitFor } from '../support/waits.js';

const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});
afterAll(async () => {
  for (const f of cleanup.splice(0)) await f();
});

/** A folder with every shipped migration plus `extra` as the next one (N+1). */
async function nextMigrations(extra: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-next-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  for (const name of await readdir(DEFAULT_MIGRATIONS_DIR)) await copyFile(join(DEFAULT_MIGRATIONS_DIR, name), join(dir, name));
  await writeFile(join(dir, `${String(SUPPORTED_SCHEMA.max + 1).padStart(3, '0')}_next.sql`), extra);
  return dir;
}

async function fresh(): Promise<TestDatabase> {
  const db = await testDatabase();
  cleanup.push(() => db.close());
  return db;
}

const slow = slowJobOf();
const jobs = new JobRegistry([slow as never], defaultJobContext());

const config = (db: TestDatabase) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_WORKER_POLL_MS: '100',
    LEASEHOLD_BEAT_MS: '200',
    LEASEHOLD_STALE_MS: '5000',
  });

const remaining = (ms: number) => {
  const end = Date.now() + ms;
  return { getRemainingTimeInMillis: () => end - Date.now() };
};

async function withWork(db: TestDatabase): Promise<string> {
  await putTenantUnits(db.sql, 'acme', { job: 'sync', shards: 4 });
  const { batch } = await createBatch(db.sql, {
    tenant: 'acme',
    datasource: 'd',
    job: 'slow',
    params: { ms: 200 },
    requestKey: 'k',
    items: Array.from({ length: 40 }, (_, i) => ({ key: `k${i}` })),
  });
  return batch.id;
}

it('a worker and a scheduler built against schema N, started against N+1, do nothing and say why', async () => {
  const db = await fresh();
  const batchId = await withWork(db);
  // A real, additive migration N+1.
  const applied = await migrate(db.sql, await nextMigrations('create table leasehold_next_thing (id int);'));
  expect(applied.map((m) => m.version)).toEqual([SUPPORTED_SCHEMA.max + 1]);
  expect(await schemaVersion(db.sql)).toBe(SUPPORTED_SCHEMA.max + 1);

  const { log, entries } = memoryLog();
  const result = await runWorker({ batchId }, remaining(60_000), {
    sql: db.sql,
    jobs,
    config: config(db),
    dispatcher: { invoke: async () => {} },
    log,
  });
  expect(result).toMatchObject({ reason: 'schema', runs: [], continued: [], replacements: 0 });
  const said = entries.filter((e) => /schema/.test(e.message));
  expect(said).toHaveLength(1);
  const { min, max } = SUPPORTED_SCHEMA;
  expect(said[0].message).toContain(
    `version ${max + 1}, this code supports ${min}–${max} (newer: this code is older than the last migration)`,
  );
  // It acted on nothing: no process row, no unit owned, the batch never run.
  const [state] = await db.sql<{ processes: number; owned: number; runs: number; touched: number }[]>`select
      (select count(*)::int from leasehold_processes) as processes,
      (select count(*)::int from leasehold_units where owner is not null) as owned,
      (select count(*)::int from leasehold_batches where owner_run is not null or beat_at is not null) as runs,
      (select count(*)::int from leasehold_items where attempts > 0) as touched`;
  expect(state).toEqual({ processes: 0, owned: 0, runs: 0, touched: 0 });
  console.log(`old code after a migration: worker ${result.reason}, ${JSON.stringify(state)}; its one line: ${said[0].message}`);

  await setDesired(db.sql, 3);
  const invoked: unknown[] = [];
  await expect(
    runScheduler({ sql: db.sql, config: config(db), dispatcher: { invoke: async (e) => void invoked.push(e) } }),
  ).rejects.toBeInstanceOf(SchemaMismatchError);
  expect(invoked).toEqual([]);
  const [marks] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_invocations`;
  expect(marks.n).toBe(0);
});

it('a worker running when a migration changes a column it uses stops at its next error: runs handed off, units released, one line', async () => {
  const db = await fresh();
  const batchId = await withWork(db);
  const { log, entries } = memoryLog();
  const worker = runWorker({}, remaining(120_000), {
    sql: db.sql,
    jobs,
    config: config(db),
    dispatcher: { invoke: async () => {} },
    log,
  });
  await waitFor('the worker owns units and runs the batch', async () => {
    const [r] = await db.sql<{ owned: number; done: number }[]>`select
        (select count(*)::int from leasehold_units where owner is not null) as owned,
        (select count(*)::int from leasehold_items where state = 'done') as done`;
    return r.owned === 4 && r.done > 0;
  });
  // A migration that breaks the additive rule: the heartbeat's column is renamed under it.
  await migrate(db.sql, await nextMigrations('alter table leasehold_processes rename column hostname to host_name;'));
  const result = await worker;

  // The server's own evidence: the heartbeat's statement now fails with 42703.
  const failed = entries.filter((e) => e.message === 'lease heartbeat failed');
  expect(failed.length).toBeGreaterThan(0);
  expect(String(failed[0].fields?.error)).toMatch(/column "hostname" .*does not exist/);
  expect(result.reason).toBe('schema');
  expect(result.runs).toEqual([expect.objectContaining({ batchId, outcome: 'handed-off' })]);
  expect(result.continued).toEqual([]);
  const said = entries.filter((e) => /schema/.test(e.message));
  expect(said).toHaveLength(1);
  expect(said[0]).toMatchObject({ level: 'error', fields: { schemaVersion: SUPPORTED_SCHEMA.max + 1 } });
  const [state] = await db.sql<{ processes: number; owned: number; running: number; owner: number }[]>`select
      (select count(*)::int from leasehold_processes) as processes,
      (select count(*)::int from leasehold_units where owner is not null) as owned,
      (select count(*)::int from leasehold_items where state = 'running') as running,
      (select count(*)::int from leasehold_batches where owner_run is not null) as owner`;
  expect(state).toEqual({ processes: 0, owned: 0, running: 0, owner: 0 });
});
