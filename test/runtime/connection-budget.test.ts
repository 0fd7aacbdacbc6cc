// The scheduler starves when workers take every connection (issue 9, item 7). The fix is a
// connection budget: the runtime's role gets a CONNECTION LIMIT of the database's limit less a
// reserve, the scheduler connects as a role of its own, and a refused connection is retried
// with jittered backoff within the scheduler's invocation.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isConnectionRefused, loadConfig, retryRefusedConnection, runScheduler } from '../../src/runtime/index.js';
import { type Dispatcher } from '../../src/batch/index.js';
import { connect, migrate, type RuntimeRoleResult, type Sql } from '../../src/store/index.js';
import { databaseUrl } from '../support/db.js';
import { sleep } from '../support/time.js';

// A database of its own (its CONNECTION LIMIT is the input) and roles unique to this run: the
// server may be shared.
const run = randomBytes(4).toString('hex');
const dbName = `lh_budget_${run}`;
const runner = `lh_budget_runner_${run}`;
const scheduler = `lh_budget_sched_${run}`;
const password = randomBytes(12).toString('hex');
let admin: Sql;
let owner: Sql;
const roles: RuntimeRoleResult[] = [];

/** The URL of the test database for `user` (with `password`). */
function urlAs(user: string): string {
  const u = new URL(databaseUrl());
  u.username = user;
  u.password = password;
  u.pathname = `/${dbName}`;
  return u.toString();
}

/** The test database as the server's admin (a superuser: outside every connection limit). */
function adminUrl(): string {
  const u = new URL(databaseUrl());
  u.pathname = `/${dbName}`;
  return u.toString();
}

beforeAll(async () => {
  admin = connect(databaseUrl(), { max: 1, applicationName: 'leasehold-test-admin' });
  await admin.unsafe(`create database "${dbName}" connection limit 10`);
  owner = connect(adminUrl(), { max: 1, applicationName: 'leasehold-test-admin' });
  // What the migrate function does with LEASEHOLD_DB_IAM_USER, LEASEHOLD_DB_SCHEDULER_USER and a
  // reserve of 2: the runner's role may hold 10 − 2 connections.
  await migrate(owner, {
    runtimeRole: { name: runner, connectionLimit: { reserve: 2 } },
    schedulerRole: { name: scheduler },
    onRuntimeRole: (r) => void roles.push(r),
  });
  // Password logins for the test server (deployed, these roles use IAM tokens).
  for (const r of [runner, scheduler]) await admin.unsafe(`alter role "${r}" password '${password}'`);
}, 60_000);

afterAll(async () => {
  await owner?.end({ timeout: 5 });
  await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
  for (const r of [runner, scheduler]) await admin.unsafe(`drop role if exists "${r}"`);
  await admin.end();
});

const noDispatch: Dispatcher = { invoke: async () => {} };
const config = () => loadConfig({ DATABASE_URL: urlAs(scheduler) });

describe('the connection budget', () => {
  it("gives the runtime's role the database's limit less the reserve", () => {
    expect(roles.find((r) => r.name === runner)).toMatchObject({ created: true, connectionLimit: 8 });
    expect(roles.find((r) => r.name === scheduler)).toMatchObject({ created: true });
    expect(roles.find((r) => r.name === scheduler)?.connectionLimit).toBeUndefined();
  });

  it('a database with CONNECTION LIMIT 10 and 12 worker pools of 4 as the runner role: the fleet stays within 8 connections and the scheduler runs', async () => {
    const workers = Array.from({ length: 12 }, () =>
      connect(urlAs(runner), { max: 4, applicationName: 'leasehold-test-worker', connectTimeoutS: 5 }),
    );
    const sched = connect(urlAs(scheduler), { max: 4, applicationName: 'leasehold-test-scheduler' });
    try {
      let refused = 0;
      let held = 0;
      // Every worker wants its 4 connections at once, and holds them a while.
      const fleet = Promise.all(
        workers.flatMap((w) =>
          Array.from({ length: 4 }, () =>
            w`select pg_sleep(1.5)`.then(
              () => void held++,
              (e: unknown) => {
                if (!isConnectionRefused(e)) throw e;
                refused++;
              },
            ),
          ),
        ),
      );
      await sleep(500);
      const [{ n }] = await owner<{ n: number }[]>`select count(*) as n from pg_stat_activity where usename = ${runner}`;
      expect(n).toBeLessThanOrEqual(8);
      // The scheduler connects meanwhile, within its reserve: no refusal, no retry needed.
      let retries = 0;
      const result = await retryRefusedConnection(() => runScheduler({ sql: sched, config: config(), dispatcher: noDispatch }), {
        untilMs: Date.now() + 10_000,
        onRetry: () => void retries++,
      });
      expect(result.fleet.desired).toBe(3);
      expect(retries).toBe(0);
      await fleet;
      // The workers were refused what was over their budget, and lived on.
      expect(refused).toBeGreaterThan(0);
      expect(held).toBeGreaterThan(0);
      expect(held + refused).toBe(48);
    } finally {
      await Promise.all([...workers, sched].map((s) => s.end({ timeout: 5 })));
    }
  });

  it('a scheduler refused a connection retries with jittered backoff within its invocation, and runs once a connection frees', async () => {
    // The scheduler's own role is full for a moment (as when the whole database is). Sessions of
    // the earlier test may take a moment to leave the server.
    for (let i = 0; i < 100; i++) {
      const [{ n }] = await owner<{ n: number }[]>`select count(*) as n from pg_stat_activity where usename = ${scheduler}`;
      if (n === 0) break;
      await sleep(50);
    }
    await admin.unsafe(`alter role "${scheduler}" connection limit 1`);
    const hog = connect(urlAs(scheduler), { max: 1, applicationName: 'leasehold-test-hog' });
    const sched = connect(urlAs(scheduler), { max: 1, applicationName: 'leasehold-test-scheduler' });
    try {
      // Held 0.8 s, then closed (an idle pooled connection would keep holding it).
      const holding = hog`select pg_sleep(0.8)`.finally(() => hog.end({ timeout: 5 }));
      await sleep(200);
      const waits: number[] = [];
      const t0 = Date.now();
      const result = await retryRefusedConnection(() => runScheduler({ sql: sched, config: config(), dispatcher: noDispatch }), {
        untilMs: Date.now() + 10_000,
        baseMs: 50,
        maxMs: 400,
        onRetry: (e, waitMs) => {
          expect((e as { code?: string }).code).toBe('53300');
          waits.push(waitMs);
        },
      });
      await holding;
      expect(result.fleet.desired).toBe(3);
      expect(waits.length).toBeGreaterThan(0);
      expect(Date.now() - t0).toBeGreaterThan(300);
      // Each wait is drawn below a cap that doubles from 50 ms up to 400 ms.
      waits.forEach((w, i) => expect(w).toBeLessThanOrEqual(Math.min(400, 50 * 2 ** i)));

      // With the connection never freeing, it gives up when its time is up, with the refusal.
      const hog2 = connect(urlAs(scheduler), { max: 1, applicationName: 'leasehold-test-hog' });
      await sched.end({ timeout: 5 });
      const forever = hog2`select pg_sleep(3)`.finally(() => hog2.end({ timeout: 5 }));
      await sleep(200);
      const t1 = Date.now();
      const sched2 = connect(urlAs(scheduler), { max: 1, applicationName: 'leasehold-test-scheduler' });
      const error = await retryRefusedConnection(() => runScheduler({ sql: sched2, config: config(), dispatcher: noDispatch }), {
        untilMs: Date.now() + 700,
      }).catch((e: unknown) => e);
      expect((error as { code?: string }).code).toBe('53300');
      expect(Date.now() - t1).toBeLessThan(2_000);
      await forever;
      await sched2.end({ timeout: 5 });
    } finally {
      await admin.unsafe(`alter role "${scheduler}" connection limit -1`);
      await Promise.all([hog, sched].map((s) => s.end({ timeout: 5 })));
    }
  });
});
