// A connection that dies at any point of any statement or transaction never crashes the process
// (issue 9, item 3). postgres.js 3.4.9 threw from a timer callback when a statement was written
// to a connection whose socket had closed (porsager/postgres#1154, #1208): a transaction's own
// rollback after its backend died did that, so the process died. patches/postgres+3.4.9.patch
// guards the driver; these tests fail on the unpatched driver.
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createBatch, getBatch, findBatchByKey } from '../../src/batch/index.js';
import { defineJob, defaultJobContext, JobRegistry } from '../../src/jobs/index.js';
import { putTenantUnits } from '../../src/lease/index.js';
import { isConnectionError, loadConfig, runScheduler, runWorker } from '../../src/runtime/index.js';
import { type Dispatcher } from '../../src/batch/index.js';
import { connect, type Sql } from '../../src/store/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { ARM_BACKEND_KILLER, installBackendKiller } from '../support/kill-backend.js';
import { PgProxy } from '../support/pgproxy.js';
import { sleep } from '../support/time.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase();
beforeAll(async () => {
  await installBackendKiller(db.sql);
});

/** Arm the trigger: the next insert into `leasehold_items` or `kill_copy` terminates its backend. */
const arm = () => db.sql.unsafe(ARM_BACKEND_KILLER);

// Errors thrown where nothing can catch them (a driver's timer callback), collected per test.
let uncaught: unknown[] = [];
const onUncaught = (e: unknown) => void uncaught.push(e);
const cleanup: (() => Promise<unknown>)[] = [];
beforeAll(() => void process.on('uncaughtException', onUncaught));
afterAll(() => void process.off('uncaughtException', onUncaught));
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
  uncaught = [];
});

/** A pool of its own (ending it is part of what a test checks). */
function pool(max = 2): Sql {
  const sql = db.connect({ max, applicationName: 'leasehold-test-death' });
  return sql;
}

/** `p`, or a rejection naming `what` after `ms`. */
function within<T>(what: string, p: Promise<T>, ms: number): Promise<T> {
  let t: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise<never>((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))),
  ]);
}

const items = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}` }));
let seq = 0;
const startOf = (n: number) => ({
  tenant: 't',
  datasource: `d${++seq}`,
  job: 'test',
  params: {},
  requestKey: `death-${seq}`,
  items: items(n),
});

describe('a connection killed inside a transaction', () => {
  it("a backend terminated while a start inserts its items fails that start, 4 times out of 4, and the process, the pool and the pool's end carry on", async () => {
    const sql = pool();
    for (let round = 0; round < 4; round++) {
      await arm();
      const start = startOf(50);
      const error = await createBatch(sql, start).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isConnectionError(error), `round ${round}: ${String(error)}`).toBe(true);
      // Nothing of the start committed.
      expect(await findBatchByKey(db.sql, start.tenant, start.requestKey)).toBeUndefined();
      // Whatever the driver still had to write for the dead connection came due meanwhile.
      await sleep(20);
      expect(uncaught).toEqual([]);
      // The pool serves the next start on a fresh connection.
      const next = await within('the next start', createBatch(sql, startOf(3)), 10_000);
      expect(next.created).toBe(true);
      expect((await getBatch(db.sql, next.batch.id)).total).toBe(3);
    }
    // Nothing of the dead sessions is left waiting: the pool ends.
    await within('the end of the pool', sql.end({ timeout: 5 }), 10_000);
    expect(uncaught).toEqual([]);
  });

  it('the guard holds whatever the transaction runs: statements in flight together, and a COPY', async () => {
    const sql = pool();
    for (let round = 0; round < 3; round++) {
      // Several statements in flight on the transaction's connection when its backend dies.
      await arm();
      const many = await sql
        .begin(async (tx) => {
          await tx`select 1`;
          await Promise.all([tx`insert into kill_copy values (1)`, tx`select pg_sleep(0.05)`, tx`select 2`]);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(isConnectionError(many), String(many)).toBe(true);

      // A COPY whose backend dies when its rows land.
      await arm();
      const copy = await sql
        .begin(async (tx) => {
          const w = await tx`copy kill_copy from stdin`.writable();
          await pipeline(Readable.from(Array.from({ length: 5_000 }, (_, i) => `${i}\n`)), w);
          await tx`select 3`;
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(copy).toBeInstanceOf(Error);
      await sleep(20);
      expect(uncaught).toEqual([]);
      expect((await within('a statement after', sql`select ${round}::int as n`, 10_000))[0].n).toBe(round);
    }
    expect((await db.sql`select count(*) as n from kill_copy`)[0].n).toBe(0);
    await within('the end of the pool', sql.end({ timeout: 5 }), 10_000);
    expect(uncaught).toEqual([]);
  });
});

const quick = defineJob({
  name: 'quick',
  description: 'returns its key after a few ms',
  params: z.object({}),
  parallel: 4,
  async expand() {
    return { items: [] };
  },
  async run(item) {
    await sleep(3);
    return { key: item.key };
  },
});
const jobs = new JobRegistry([quick], defaultJobContext());
const noDispatch: Dispatcher = { invoke: async () => {} };

const config = (extra: Record<string, string> = {}) =>
  loadConfig({
    DATABASE_URL: db.url,
    LEASEHOLD_TTL_MS: '2000',
    LEASEHOLD_HEARTBEAT_MS: '200',
    LEASEHOLD_REBALANCE_MS: '200',
    LEASEHOLD_WORKER_POLL_MS: '100',
    LEASEHOLD_WORKER_IDLE_MS: '300',
    LEASEHOLD_BEAT_MS: '100',
    LEASEHOLD_STALE_MS: '1500',
    LEASEHOLD_MOVE_BACKOFF_MS: '20',
    LEASEHOLD_STORE_TIMEOUT_MS: '2000',
    LEASEHOLD_DEADLINE_MARGIN_MS: '500',
    ...extra,
  });

const remaining = (ms: number) => {
  const end = Date.now() + ms;
  return { getRemainingTimeInMillis: () => end - Date.now() };
};

describe('connections cut at random points', () => {
  it('cuts during starts, claims, moves, beats, heartbeats, releases and scheduler runs never crash the process; once they stop, every started batch finishes and nothing is left owned', async () => {
    const proxy = await PgProxy.start(db.url);
    const sql = connect(proxy.url, { schema: db.schema, max: 6, applicationName: 'leasehold-test-chaos' });
    cleanup.push(async () => {
      await proxy.close();
      await Promise.race([sql.end({ timeout: 0 }), sleep(2_000)]);
    });
    // Units, so the workers heartbeat, claim, rebalance and release.
    await putTenantUnits(db.sql, 'chaos', { job: 'noop', shards: 8, weight: 1 });
    const started: string[] = [];
    const chaos = proxy.chaos({ probability: 0.02, seed: 9 });
    const until = Date.now() + 5_000;
    const starts = (async () => {
      while (Date.now() < until) {
        const s = { ...startOf(40), job: 'quick' };
        // A start on a cut connection fails as a whole: it is sent again with its request key.
        for (let tries = 0; tries < 20; tries++) {
          try {
            const { batch } = await createBatch(sql, s);
            started.push(batch.id);
            break;
          } catch (e) {
            if (!isConnectionError(e)) throw e;
          }
        }
        await sleep(100);
      }
    })();
    const scheduler = (async () => {
      while (Date.now() < until) {
        await runScheduler({ sql, config: config(), dispatcher: noDispatch }).catch((e: unknown) => {
          if (!isConnectionError(e)) throw e;
        });
        await sleep(150);
      }
    })();
    const workers = Array.from({ length: 3 }, () =>
      within(
        'a worker under cuts',
        runWorker({}, remaining(5_500), { log: silentLog, sql, jobs, config: config(), dispatcher: noDispatch }),
        20_000,
      ).catch((e: unknown) => {
        if (!isConnectionError(e)) throw e;
      }),
    );
    await Promise.all([starts, scheduler, ...workers]);
    chaos.stop();
    expect(chaos.kills).toBeGreaterThan(10);
    expect(uncaught).toEqual([]);
    expect(started.length).toBeGreaterThan(0);

    // Without cuts, one worker (through the same proxy and pool) finishes what is left, and
    // returns at its deadline (units keep it until then) owning nothing.
    const rest = await within(
      'the worker after the cuts',
      runWorker({}, remaining(12_000), { log: silentLog, sql, jobs, config: config(), dispatcher: noDispatch }),
      20_000,
    );
    expect(rest.reason).toBe('deadline');
    for (const id of started) {
      expect(await getBatch(db.sql, id)).toMatchObject({
        status: 'succeeded',
        counts: { pending: 0, running: 0, done: 40, failed: 0 },
      });
    }
    // Nothing owned by a live process, and no run owns an open batch.
    const owned =
      await db.sql`select count(*) as n from leasehold_units u join leasehold_processes p on p.id = u.owner where p.expires_at > now()`;
    expect(owned[0].n).toBe(0);
    expect((await db.sql`select count(*) as n from leasehold_batches where status = 'open' and job = 'quick'`)[0].n).toBe(0);
    expect(uncaught).toEqual([]);
  });
});
