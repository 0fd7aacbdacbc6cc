// Many runs joining one batch at once (docs/design.md, "Fan-out", "Tenant fairness"): a takeover
// sent for a batch waits for the batch's row and its tenant's rather than skipping them, so runs
// sent at once all join on their first statement, one after another, and never more than the
// batch's target or the tenant's limit. Each round holds the row in a transaction of its own
// until every takeover waits on a lock (the server's evidence: pg_stat_activity), then lets go.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Runner, createBatch, getTenant, setTenantLimit } from '../../src/batch/index.js';
import * as q from '../../src/batch/sql/index.js';
import type { Sql } from '../../src/store/index.js';
import { usePools, useTestDatabase } from '../support/db-hooks.js';
import { waitFor } from '../support/waits.js';
import { newBatch } from './helpers.js';

const db = useTestDatabase();

/** Takeovers racing in each round, each on a connection of its own. */
const RACERS = 24;
const ROUNDS = 3;
/** This file's sessions, told apart from other files' on a shared server. */
const APP = `join-${randomUUID().slice(0, 8)}`;

const pools = usePools(db);

/** A pool with RACERS open connections (so the takeovers run at once, not one after another). */
async function racers(): Promise<Sql> {
  // A lock_timeout past the test's wait for every racer to queue: on a loaded machine the last
  // racer may queue more than the default 2 s after the first.
  const p = pools(RACERS, { applicationName: APP, lockTimeoutMs: 60_000 });
  await Promise.all(Array.from({ length: RACERS }, () => p`select pg_sleep(0.05)`));
  return p;
}

let seq = 0;

/**
 * One round: a batch of `maxConcurrency` (target: `maxConcurrency`, 100 items a run) of a new
 * tenant (limited to `tenantLimit` when set); `held` of its rows locked while RACERS takeovers
 * sent for it start; every takeover waits on a lock, then the lock goes. Answers how many took it
 * and the counts the database keeps.
 */
async function round(
  pool: Sql,
  a: { maxConcurrency: number; held: 'batch' | 'tenant'; orFairer: boolean; tenantLimit?: number },
) {
  const tenant = `join-${++seq}-${randomUUID().slice(0, 6)}`;
  if (a.tenantLimit !== undefined) await setTenantLimit(db.sql, tenant, a.tenantLimit);
  const { batch } = await createBatch(db.sql, {
    ...newBatch(a.maxConcurrency * 100, { tenant }),
    maxConcurrency: a.maxConcurrency,
  });
  const process = randomUUID();
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const holding = db.sql.begin(async (tx) => {
    await (a.held === 'batch'
      ? tx`select 1 from leasehold_batches where id = ${batch.id} for update`
      : tx`select 1 from leasehold_tenants where tenant = ${tenant} for update`);
    locked();
    await released;
  });
  await isLocked;
  const taken = Promise.all(
    Array.from({ length: RACERS }, () =>
      q.takeOver(pool, {
        run: randomUUID(),
        process,
        staleMs: 60_000,
        maxRunning: q.NO_LIMIT,
        batchId: batch.id,
        orFairer: a.orFairer,
      }),
    ),
  );
  // Every takeover waits on a lock (the held row, or the row lock queue behind the first).
  await waitFor('every takeover waiting on a lock', async () => {
    const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from pg_stat_activity
      where application_name = ${APP} and wait_event_type = 'Lock'`;
    return r.n === RACERS;
  });
  release();
  await holding;
  const results = await taken;
  const [b] = await db.sql<{ live_runs: number; runs: number; rows: number }[]>`
    select live_runs, runs, (select count(*)::int from leasehold_runs where batch_id = ${batch.id}) as rows
    from leasehold_batches where id = ${batch.id}`;
  return {
    took: results.filter((r) => r?.id === batch.id).length,
    other: results.filter((r) => r !== undefined && r.id !== batch.id).length,
    ...b,
    tenant: await getTenant(db.sql, tenant),
  };
}

describe('runs sent at once for one batch', () => {
  it(`${RACERS} takeovers sent for a batch of target 16 while its row is held: 16 join on their first statement, no more, ${ROUNDS} rounds`, async () => {
    const pool = await racers();
    for (let i = 0; i < ROUNDS; i++) {
      for (const orFairer of [false, true]) {
        const r = await round(pool, { maxConcurrency: 16, held: 'batch', orFairer });
        expect(r).toMatchObject({ took: 16, other: 0, live_runs: 16, runs: 16, rows: 16 });
        expect(r.tenant).toMatchObject({ running: 16 });
      }
    }
  });

  it(`${RACERS} takeovers sent for a batch below its target while its tenant's row is held: as many join as the tenant's limit allows, ${ROUNDS} rounds`, async () => {
    const pool = await racers();
    for (let i = 0; i < ROUNDS; i++) {
      const r = await round(pool, { maxConcurrency: 64, held: 'tenant', orFairer: i % 2 === 0, tenantLimit: 10 });
      expect(r).toMatchObject({ took: 10, other: 0, live_runs: 10, runs: 10, rows: 10 });
      expect(r.tenant).toMatchObject({ running: 10 });
    }
  });

  it(`${RACERS} takeovers sent for a batch with room for all of them: every one joins on its first statement`, async () => {
    const pool = await racers();
    for (let i = 0; i < ROUNDS; i++) {
      const r = await round(pool, { maxConcurrency: 32, held: 'batch', orFairer: true });
      expect(r).toMatchObject({ took: RACERS, other: 0, live_runs: RACERS, runs: RACERS, rows: RACERS });
    }
  });

  it('a takeover sent for a batch whose row is held past lock_timeout takes nothing, and is tried again until it joins', async () => {
    const { batch } = await createBatch(db.sql, {
      ...newBatch(200, { tenant: `join-held-${randomUUID().slice(0, 6)}` }),
      maxConcurrency: 2,
    });
    const p = pools(2, { applicationName: APP, lockTimeoutMs: 100 });
    const runner = new Runner(p, { beatMs: 1_000, staleMs: 30_000 });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holding = db.sql.begin(async (tx) => {
      await tx`select 1 from leasehold_batches where id = ${batch.id} for update`;
      locked();
      await released;
    });
    await isLocked;
    const taking = runner.takeOver(() => ({ work: async () => null }), batch.id);
    // The server's evidence: a takeover statement of this runner waited past its lock_timeout.
    const watch = pools(1);
    await waitFor('a takeover waiting on the held row', async () => {
      const rows = await watch`select 1 from pg_stat_activity where application_name = ${APP} and wait_event_type = 'Lock'`;
      return rows.length > 0;
    });
    // 4 lock_timeouts: the statements waiting meanwhile gave up; the runner keeps trying.
    await new Promise((r) => setTimeout(r, 400));
    release();
    await holding;
    const taken = await taking;
    expect(taken?.id).toBe(batch.id);
    const [b] = await db.sql<{ live_runs: number }[]>`select live_runs from leasehold_batches where id = ${batch.id}`;
    expect(b.live_runs).toBe(1);
    await runner.close();
  });
});
