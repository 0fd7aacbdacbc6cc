import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Leaser, putTenantUnits } from '../../src/lease/index.js';
import { startSink, type Sink } from '../../src/local/sink.js';
import {
  defaultUnitJobs,
  enqueueOutbox,
  idempotencyKey,
  markDelivered,
  NoOutboxUnitsError,
  OUTBOX_JOB,
  outboxDelivery,
  outboxShard,
  UnitRunner,
} from '../../src/units/index.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { auditMarks, sleep, startProc, until, type Proc } from './helpers.js';

let db: TestDatabase;
let sink: Sink;
const procs: Proc[] = [];

beforeAll(async () => {
  db = await testDatabase({ max: 5 });
  await auditMarks(db.sql);
  sink = await startSink({ failWhen: (d) => (d.body as { key?: string } | undefined)?.key === 'poison' });
});
// Each test's tenants and processes stop competing with the next test's.
afterEach(async () => {
  // A test that failed midway leaves processes running: end them before the next test.
  await Promise.all(procs.splice(0).map((p) => p.kill().catch(() => {})));
  await db.sql`delete from leasehold_units`;
});
afterAll(async () => {
  await sink.close();
  await db.close();
});

const fast = (o: Parameters<typeof outboxDelivery>[0] = {}) =>
  defaultUnitJobs({ outbox: outboxDelivery({ intervalMs: 50, backoffMs: 100, maxBackoffMs: 1_000, timeoutMs: 3_000, batchSize: 25, ...o }) as never });

function proc(jobs = fast()): Proc {
  const p = startProc(db, jobs);
  procs.push(p);
  return p;
}

async function register(tenant: string, shards: number, paths: string[]): Promise<string[]> {
  const endpoints = paths.map((p) => `${sink.url}${p}`);
  await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards, weight: endpoints.length, config: { endpoints } });
  return endpoints;
}

const undelivered = async (tenant: string) =>
  (await db.sql<{ n: number }[]>`select count(*) as n from leasehold_outbox where tenant = ${tenant} and delivered_at is null`)[0].n;

describe('outbox delivery', () => {
  it('delivers every message at least once and marks each once, while processes are killed, frozen and added', async () => {
    const tenant = 'acme';
    await register(tenant, 6, ['/acme/a', '/acme/b']);
    const [p1, p2, p3] = [proc(), proc(), proc()];

    const ids: number[] = [];
    const shards = new Set<number>();
    const payloads = new Map<number, unknown>();
    const produce = (async () => {
      for (let round = 0; round < 16; round++) {
        for (let i = 0; i < 15; i++) {
          const m = await enqueueOutbox(db.sql, tenant, { key: `order-${round}-${i}`, payload: { round, i } });
          ids.push(m.id);
          payloads.set(m.id, { round, i });
          shards.add(m.shard);
        }
        await sleep(100);
      }
    })();
    // Membership changes while messages flow: a crash, a newcomer, a zombie, another newcomer.
    await sleep(300);
    await p1.kill();
    await sleep(300);
    const p4 = proc();
    await sleep(300);
    await p2.freeze();
    await sleep(300);
    const p5 = proc();
    await produce;
    expect(shards.size).toBe(6);

    await until(async () => (await undelivered(tenant)) === 0, 20_000, 'every message delivered');

    const rows = await db.sql<{ id: number; marks: number; owner_marks: number }[]>`select o.id,
        (select count(*) from outbox_marks m where m.id = o.id) as marks,
        (select count(*) from outbox_marks m where m.id = o.id and m.old_delivered_at is null and m.owner is not null) as owner_marks
      from leasehold_outbox o where o.tenant = ${tenant} order by o.id`;
    expect(rows.map((r) => r.id)).toEqual([...ids].sort((a, b) => a - b));
    // Marked exactly once each, by the unit's owner at that moment.
    expect(rows.filter((r) => r.marks !== 1 || r.owner_marks !== 1)).toEqual([]);
    // The sink saw every message on every endpoint.
    for (const path of ['/acme/a', '/acme/b']) {
      const seen = sink.keys(path);
      expect(ids.filter((id) => !seen.has(idempotencyKey(tenant, id))), path).toEqual([]);
    }
    // Endpoints received the message as sent.
    const sample = sink.recent().find((d) => d.path === '/acme/a')!;
    const body = sample.body as { id: number; tenant: string; key: string; payload: unknown };
    expect(body).toEqual({ id: body.id, tenant, key: expect.stringMatching(/^order-/), payload: payloads.get(body.id) });
    expect(sample.idempotencyKey).toBe(idempotencyKey(tenant, body.id));
    // The crashed and the frozen process marked nothing after they lost their units, and the
    // newcomers took part: every live process owns units at the end.
    const [{ n: markedByDead }] = await db.sql<{ n: number }[]>`select count(*) as n
      from outbox_marks m join leasehold_processes p on p.id = m.owner
      where p.id in (${p1.processId}, ${p2.processId}) and m.at >= p.expires_at`;
    expect(markedByDead).toBe(0);
    for (const p of [p3, p4, p5]) expect(p.leaser.owned().length, p.processId).toBeGreaterThan(0);
    await Promise.all([p3, p4, p5].map((p) => p.stop()));
  });

  it('retries a failing message with growing backoff without holding up its shard or the other shards', async () => {
    const tenant = 'beta';
    await register(tenant, 2, ['/beta']);
    const poison = await enqueueOutbox(db.sql, tenant, { key: 'poison', payload: 'never accepted' });
    const p = proc(fast({ backoffMs: 200, maxBackoffMs: 5_000 }));
    const others = [];
    for (let i = 0; i < 20; i++) others.push(await enqueueOutbox(db.sql, tenant, { key: `k${i}`, payload: i }));
    expect(new Set(others.map((m) => m.shard))).toEqual(new Set([0, 1]));
    expect(others.some((m) => m.shard === poison.shard)).toBe(true);

    // Everything else, on the poison's shard too, is delivered while the poison keeps failing.
    await until(async () => (await undelivered(tenant)) === 1, 3_000, 'every other message delivered');
    const poisonKey = idempotencyKey(tenant, poison.id);
    await until(() => sink.recent().filter((d) => d.idempotencyKey === poisonKey).length >= 4, 5_000, 'four attempts of the poison');
    // Each failure set the next attempt backoff × 2^(attempts−1) plus up to 25 % jitter ahead
    // (database clock): 200, 400, 800 ms; and the endpoint saw no attempt before it was due.
    const delays = await db.sql<{ attempts: number; delay_ms: number }[]>`select attempts, delay_ms from outbox_failures
      where id = ${poison.id} and attempts <= 3 order by attempts`;
    expect(delays.map((d) => d.attempts)).toEqual([1, 2, 3]);
    [200, 400, 800].forEach((d, i) => {
      expect(delays[i].delay_ms, `delay after attempt ${i + 1}`).toBeGreaterThanOrEqual(d - 1);
      expect(delays[i].delay_ms, `delay after attempt ${i + 1}`).toBeLessThanOrEqual(d * 1.25 + 1);
    });
    const times = sink.recent().filter((d) => d.idempotencyKey === poisonKey).map((d) => d.at);
    const gaps = times.slice(1, 4).map((t, i) => t - times[i]);
    [200, 400, 800].forEach((d, i) => expect(gaps[i], `gap ${i + 1} of ${gaps}`).toBeGreaterThanOrEqual(d - 20));
    // The sink counts a POST before the failure is recorded.
    await until(
      async () => (await db.sql`select 1 from leasehold_outbox where id = ${poison.id} and attempts >= 4`).length === 1,
      1_000,
      'the fourth failure recorded',
    );
    const [row] = await db.sql<{ attempts: number; last_error: string; delivered: boolean }[]>`select attempts,
        last_error, delivered_at is not null as delivered from leasehold_outbox where id = ${poison.id}`;
    expect(row.last_error).toMatch(/\/beta: HTTP 503/);
    expect(row.delivered).toBe(false);
    await p.stop();
  });

  it('retries while an endpoint is down and delivers once it is back', async () => {
    const tenant = 'gamma';
    await register(tenant, 3, ['/gamma/up', '/gamma/down']);
    sink.fail('/gamma/down', true);
    const p = proc();
    const ids = [];
    for (let i = 0; i < 12; i++) ids.push((await enqueueOutbox(db.sql, tenant, { key: `g${i}`, payload: i })).id);
    await until(
      async () => (await db.sql`select 1 from leasehold_outbox where tenant = ${tenant} and attempts < 2`).length === 0,
      5_000,
      'two failed attempts of each message',
    );
    expect(await undelivered(tenant)).toBe(12);
    sink.fail('/gamma/down', false);
    await until(async () => (await undelivered(tenant)) === 0, 5_000, 'every message delivered');
    const seen = sink.keys('/gamma/down');
    expect(ids.every((id) => seen.has(idempotencyKey(tenant, id)))).toBe(true);
    await p.stop();
  });

  it('an endpoint answering 200 with an endless body gets its messages marked delivered, unread', async () => {
    // The answer's body never ends: reading it would fill memory and never finish.
    const endless = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(1 << 20);
      const pump = () => {
        while (res.write(chunk));
        res.once('drain', pump);
      };
      pump();
      res.on('close', () => res.removeAllListeners('drain'));
    });
    await new Promise<void>((r) => endless.listen(0, '127.0.0.1', r));
    const { port } = endless.address() as AddressInfo;
    try {
      const tenant = 'endless';
      await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, config: { endpoints: [`http://127.0.0.1:${port}/hook`] } });
      const p = proc();
      for (let i = 0; i < 4; i++) await enqueueOutbox(db.sql, tenant, { key: `e${i}`, payload: i });
      await until(async () => (await undelivered(tenant)) === 0, 10_000, 'every message marked delivered');
      await p.stop();
    } finally {
      endless.closeAllConnections();
      await new Promise((r) => endless.close(r));
    }
  });

  it('a process that lost its unit mid-delivery cannot mark the message; the new owner delivers and marks it', async () => {
    const tenant = 'delta';
    await register(tenant, 1, ['/delta']);
    sink.delay('/delta', 1_500);
    const m = await enqueueOutbox(db.sql, tenant, { key: 'slow', payload: 'x' });
    const a = proc();
    await until(() => a.leaser.owned().some((u) => u.tenant === tenant), 2_000, 'A owns the unit');
    await sleep(150);
    // A is paused: no heartbeats, but its POST is in flight. B takes the unit once A's TTL passed.
    await a.freeze();
    const b = proc();
    await until(() => b.leaser.owned().some((u) => u.tenant === tenant), 3_000, 'B owns the unit');
    await until(async () => (await undelivered(tenant)) === 0, 5_000, 'the message delivered');
    const marks = await db.sql<{ owner: string }[]>`select owner from outbox_marks where id = ${m.id}`;
    expect(marks).toEqual([{ owner: b.processId }]);
    // Both posted it (at least once); only B's mark counted.
    expect(sink.recent().filter((d) => d.idempotencyKey === idempotencyKey(tenant, m.id)).length).toBeGreaterThanOrEqual(2);
    await until(() => a.log.some((e) => /unit lost during delivery/.test(e.message)), 3_000, "A's report of the loss");
    sink.delay('/delta', 0);
    await b.stop();
  });

  it('marks a message delivered only for the owner of its unit, and only once', async () => {
    const tenant = 'epsilon';
    await register(tenant, 1, ['/epsilon']);
    // The owner is a bare leaser here: nothing delivers on its own.
    const owner = new Leaser(db.sql, { ttlMs: 2_000, heartbeatIntervalMs: 500 }, { unitsGained() {}, unitsLost() {}, inFlight: () => 0 });
    await owner.heartbeat();
    await owner.tick();
    const m = await enqueueOutbox(db.sql, tenant, { key: 'k', payload: null });
    const unit = { tenant, shard: 0 };
    expect(await markDelivered(db.sql, unit, randomUUID(), m.id)).toBe(false);
    expect(await markDelivered(db.sql, { tenant, shard: 1 }, owner.processId, m.id)).toBe(false);
    expect(await markDelivered(db.sql, unit, owner.processId, m.id)).toBe(true);
    expect(await markDelivered(db.sql, unit, owner.processId, m.id)).toBe(false);
    const [row] = await db.sql<{ payload: unknown }[]>`select payload from leasehold_outbox where id = ${m.id}`;
    expect(row.payload).toBeNull();
    await owner.release();
    await owner.deleteProcess();
  });

  it('moves messages of removed shards onto the remaining ones, so a shard count shrink loses nothing', async () => {
    const tenant = 'zeta';
    await register(tenant, 5, ['/zeta']);
    const ids = [];
    for (let i = 0; i < 30; i++) ids.push(await enqueueOutbox(db.sql, tenant, { key: `z${i}`, payload: i }));
    expect(ids.some((m) => m.shard >= 2)).toBe(true);
    await register(tenant, 2, ['/zeta']);
    const p = proc();
    await until(async () => (await undelivered(tenant)) === 0, 5_000, 'every message delivered');
    const seen = sink.keys('/zeta');
    expect(ids.filter((m) => !seen.has(idempotencyKey(tenant, m.id)))).toEqual([]);
    await p.stop();
  });

  it('enqueues on the shard the key hashes to, and refuses a tenant without outbox units', async () => {
    await register('eta', 7, ['/eta']);
    for (const key of ['a', 'b', 'order-17', 'ünïcode']) {
      const m = await enqueueOutbox(db.sql, 'eta', { key, payload: {} });
      expect(m.shard).toBe(outboxShard(key, 7));
    }
    expect(outboxShard('a', 7)).toBe(outboxShard('a', 7));
    await expect(enqueueOutbox(db.sql, 'nobody', { key: 'a', payload: {} })).rejects.toBeInstanceOf(NoOutboxUnitsError);
    await putTenantUnits(db.sql, 'theta', { job: 'something-else', shards: 2 });
    await expect(enqueueOutbox(db.sql, 'theta', { key: 'a', payload: {} })).rejects.toMatchObject({ code: 'no_outbox_units' });
  });
});

// The runner and the job are usable without a leaser too (what the worker wires).
it('the default registry knows outbox-delivery, weighted by endpoint count', () => {
  const job = defaultUnitJobs().get(OUTBOX_JOB);
  expect(job.weight?.({ endpoints: ['http://a', 'http://b'] })).toBe(2);
  expect(job.config.safeParse({ endpoints: ['ftp://x'] }).success).toBe(false);
  expect(new UnitRunner({ sql: db.sql, processId: randomUUID(), jobs: defaultUnitJobs() }).units()).toEqual([]);
});
