import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
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
  outboxStatus,
  UnitRunner,
  type AddressLookup,
} from '../../src/units/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import * as q from '../../src/units/sql/outbox.js';
import { auditMarks, startProc, undelivered as undeliveredIn, type Proc } from './helpers.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';
import { histogram, histogramLine } from '../support/random.js';
import { silentLog } from '../../src/log.js';

const db = useTestDatabase({ max: 5 });
let sink: Sink;
const procs: Proc[] = [];

beforeAll(async () => {
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
});

// The sink listens on loopback, which delivery refuses unless allow-listed.
const fast = (o: Parameters<typeof outboxDelivery>[0] = {}) =>
  defaultUnitJobs({
    outbox: outboxDelivery({
      intervalMs: 50,
      backoffMs: 100,
      maxBackoffMs: 1_000,
      timeoutMs: 3_000,
      batchSize: 25,
      allow: ['127.0.0.1'],
      ...o,
    }) as never,
  });

function proc(jobs = fast(), timing?: Parameters<typeof startProc>[2]): Proc {
  const p = startProc(db, jobs, timing);
  procs.push(p);
  return p;
}

async function register(tenant: string, shards: number, paths: string[]): Promise<string[]> {
  const endpoints = paths.map((p) => `${sink.url}${p}`);
  await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards, weight: endpoints.length, config: { endpoints } });
  return endpoints;
}

const undelivered = (tenant: string) => undeliveredIn(db.sql, tenant);

describe('outbox delivery', () => {
  it('delivers every message at least once and marks each once, while processes are killed, frozen and added', async () => {
    const tenant = 'acme';
    await register(tenant, 6, ['/acme/a', '/acme/b']);
    const [p1, p2, p3] = [proc(), proc(), proc()];

    const ids: string[] = [];
    const shards = new Set<number>();
    const payloads = new Map<string, unknown>();
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

    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 20_000 });

    const rows = await db.sql<
      { id: string; endpoint: string; marks: number; owner_marks: number }[]
    >`select d.message_id::text as id, d.endpoint,
        (select count(*) from outbox_marks m where m.id = d.message_id and m.endpoint = d.endpoint) as marks,
        (select count(*) from outbox_marks m where m.id = d.message_id and m.endpoint = d.endpoint and m.old_delivered_at is null and m.owner is not null) as owner_marks
      from leasehold_outbox_deliveries d where d.tenant = ${tenant} order by d.message_id, d.endpoint`;
    // One delivery per message and endpoint...
    expect(rows.map((r) => r.id)).toEqual([...ids].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1)).flatMap((id) => [id, id]));
    // ...marked exactly once each, by the unit's owner at that moment.
    expect(rows.filter((r) => r.marks !== 1 || r.owner_marks !== 1)).toEqual([]);
    // The sink saw every message on every endpoint.
    for (const path of ['/acme/a', '/acme/b']) {
      const seen = sink.keys(path);
      expect(
        ids.filter((id) => !seen.has(idempotencyKey(tenant, id))),
        path,
      ).toEqual([]);
    }
    // Endpoints received the message as sent.
    const sample = sink.recent().find((d) => d.path === '/acme/a')!;
    const body = sample.body as { id: string; tenant: string; key: string; payload: unknown };
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
    await waitFor('every other message delivered', async () => (await undelivered(tenant)) === 1, { timeoutMs: 3_000 });
    const poisonKey = idempotencyKey(tenant, poison.id);
    await waitFor('four attempts of the poison', () => sink.recent().filter((d) => d.idempotencyKey === poisonKey).length >= 4, {
      timeoutMs: 5_000,
    });
    // Each failure set the next attempt a random time within backoff × 2^(attempts−1) ahead
    // (database clock): within 200, 400, 800 ms; and the endpoint saw no attempt before it was due.
    const delays = await db.sql<{ attempts: number; delay_ms: number }[]>`select attempts, delay_ms from outbox_failures
      where id = ${poison.id} and attempts <= 3 order by attempts`;
    expect(delays.map((d) => d.attempts)).toEqual([1, 2, 3]);
    [200, 400, 800].forEach((d, i) => {
      expect(delays[i].delay_ms, `delay after attempt ${i + 1}`).toBeGreaterThanOrEqual(-1);
      expect(delays[i].delay_ms, `delay after attempt ${i + 1}`).toBeLessThanOrEqual(d + 1);
    });
    const times = sink
      .recent()
      .filter((d) => d.idempotencyKey === poisonKey)
      .map((d) => d.at);
    const gaps = times.slice(1, 4).map((t, i) => t - times[i]);
    delays.forEach((d, i) => expect(gaps[i], `gap ${i + 1} of ${gaps}`).toBeGreaterThanOrEqual(d.delay_ms - 20));
    // The sink counts a POST before the failure is recorded.
    await waitFor(
      'the fourth failure recorded',
      async () =>
        (await db.sql`select 1 from leasehold_outbox_deliveries where message_id = ${poison.id} and attempts >= 4`).length === 1,
      { timeoutMs: 1_000 },
    );
    const [row] = await db.sql<{ attempts: number; last_error: string; delivered: boolean }[]>`select attempts,
        last_error, delivered_at is not null as delivered from leasehold_outbox_deliveries where message_id = ${poison.id}`;
    expect(row.last_error).toBe('HTTP 503');
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
    await waitFor(
      'two failed attempts of each message',
      async () =>
        (
          await db.sql`select 1 from leasehold_outbox_deliveries where tenant = ${tenant} and endpoint like '%/down' and attempts >= 2`
        ).length === 12,
      { timeoutMs: 5_000 },
    );
    expect(await undelivered(tenant)).toBe(12);
    // The endpoint that is up took each message once, however often the other one failed.
    expect(sink.recent().filter((d) => d.path === '/gamma/up').length).toBe(12);
    sink.fail('/gamma/down', false);
    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 5_000 });
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
      await putTenantUnits(db.sql, tenant, {
        job: OUTBOX_JOB,
        shards: 1,
        config: { endpoints: [`http://127.0.0.1:${port}/hook`] },
      });
      const p = proc();
      for (let i = 0; i < 4; i++) await enqueueOutbox(db.sql, tenant, { key: `e${i}`, payload: i });
      await waitFor('every message marked delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 10_000 });
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
    await waitFor('A owns the unit', () => a.leaser.owned().some((u) => u.tenant === tenant), { timeoutMs: 2_000 });
    await sleep(150);
    // A is paused: no heartbeats, but its POST is in flight. B takes the unit once A's TTL passed.
    await a.freeze();
    const b = proc();
    await waitFor('B owns the unit', () => b.leaser.owned().some((u) => u.tenant === tenant), { timeoutMs: 3_000 });
    await waitFor('the message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 5_000 });
    const marks = await db.sql<{ owner: string }[]>`select owner from outbox_marks where id = ${m.id}`;
    expect(marks).toEqual([{ owner: b.processId }]);
    // Both posted it (at least once); only B's mark counted.
    expect(sink.recent().filter((d) => d.idempotencyKey === idempotencyKey(tenant, m.id)).length).toBeGreaterThanOrEqual(2);
    await waitFor("A's report of the loss", () => a.log.some((e) => /unit lost during delivery/.test(e.message)), {
      timeoutMs: 3_000,
    });
    sink.delay('/delta', 0);
    await b.stop();
  });

  it('marks a delivery delivered only for the owner of its unit, and only once', async () => {
    const tenant = 'epsilon';
    const [endpoint] = await register(tenant, 1, ['/epsilon']);
    // The owner is a bare leaser here: nothing delivers on its own.
    const owner = new Leaser(
      db.sql,
      { ttlMs: 2_000, heartbeatIntervalMs: 500 },
      { unitsGained() {}, unitsLost() {}, inFlight: () => 0 },
    );
    await owner.heartbeat();
    await owner.tick();
    const m = await enqueueOutbox(db.sql, tenant, { key: 'k', payload: null });
    const unit = { tenant, shard: 0 };
    // Not assigned to its endpoint yet: nothing to mark. Assigning is fenced on owning the unit too.
    expect(await markDelivered(db.sql, unit, owner.processId, m.id, endpoint)).toBe(false);
    expect(await q.assign(db.sql, unit, randomUUID(), [endpoint], 10)).toBe(0);
    expect(await q.assign(db.sql, unit, owner.processId, [endpoint], 10)).toBe(1);
    expect(await q.assign(db.sql, unit, owner.processId, [endpoint], 10)).toBe(0);
    expect(await markDelivered(db.sql, unit, randomUUID(), m.id, endpoint)).toBe(false);
    expect(await markDelivered(db.sql, { tenant, shard: 1 }, owner.processId, m.id, endpoint)).toBe(false);
    expect(await markDelivered(db.sql, unit, owner.processId, m.id, `${endpoint}/other`)).toBe(false);
    expect(await markDelivered(db.sql, unit, owner.processId, m.id, endpoint)).toBe(true);
    expect(await markDelivered(db.sql, unit, owner.processId, m.id, endpoint)).toBe(false);
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
    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 5_000 });
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

describe('outbox delivery per endpoint', () => {
  it('a failing endpoint makes no healthy one receive a message twice; it retries on its own backoff, and the status shows it', async () => {
    // Issue 9, item 10: a message counted as delivered only once every endpoint took it, so
    // each retry for the failing endpoint re-posted it to the healthy ones.
    const tenant = 'iota';
    const [ok1, ok2, bad] = await register(tenant, 3, ['/iota/ok1', '/iota/ok2', '/iota/bad']);
    sink.fail('/iota/bad', true);
    // Delivery is at least once: a POST whose answer comes after the request's timeout, or
    // after the process's lease lapsed (a heartbeat late past the TTL), is sent again. Neither
    // is what this test is about, so a loaded machine gets room for both (CI sent some messages
    // to a healthy endpoint 2 and 3 times with a 1 s TTL and a 3 s timeout).
    const p = proc(fast({ timeoutMs: 10_000 }), { ttlMs: 5_000 });
    const ids: string[] = [];
    for (let i = 0; i < 15; i++) ids.push((await enqueueOutbox(db.sql, tenant, { key: `i${i}`, payload: i })).id);
    await waitFor(
      'three failed attempts of each message at the failing endpoint',
      async () =>
        (await db.sql`select 1 from leasehold_outbox_deliveries where endpoint = ${bad} and attempts >= 3`).length === 15,
      { timeoutMs: 10_000 },
    );
    const received = (path: string) =>
      ids.map((id) => sink.recent().filter((d) => d.path === path && d.idempotencyKey === idempotencyKey(tenant, id)).length);
    expect(received('/iota/ok1')).toEqual(ids.map(() => 1));
    expect(received('/iota/ok2')).toEqual(ids.map(() => 1));
    expect(Math.min(...received('/iota/bad'))).toBeGreaterThanOrEqual(3);
    // The healthy endpoints' deliveries took one attempt each; the failing one's deliveries each
    // waited a random time within backoff × 2^(attempts−1) (100, 200 ms) between attempts.
    const attempts = await db.sql<
      { endpoint: string; attempts: number; n: number }[]
    >`select endpoint, min(attempts) as attempts, count(*) as n
      from leasehold_outbox_deliveries where endpoint in (${ok1}, ${ok2}) group by endpoint order by endpoint`;
    expect(attempts).toEqual([ok1, ok2].map((endpoint) => ({ endpoint, attempts: 1, n: 15 })));
    const delays = await db.sql<
      { attempts: number; min: number; max: number }[]
    >`select attempts, min(delay_ms) as min, max(delay_ms) as max
      from outbox_failures where endpoint = ${bad} and attempts <= 2 group by attempts order by attempts`;
    expect(delays.map((d) => d.attempts)).toEqual([1, 2]);
    [100, 200].forEach((d, i) => {
      expect(delays[i].min, `delay after attempt ${i + 1}`).toBeGreaterThanOrEqual(-1);
      expect(delays[i].max, `delay after attempt ${i + 1}`).toBeLessThanOrEqual(d + 1);
    });
    expect(await db.sql`select 1 from outbox_failures where endpoint <> ${bad} and id in ${db.sql(ids)}`).toEqual([]);

    // The status: per endpoint the backlog, the oldest undelivered message and the last error.
    const status = await outboxStatus(db.sql, tenant);
    expect(status.shards).toBe(3);
    expect(status.endpoints.map((e) => e.url)).toEqual([ok1, ok2, bad]);
    for (const e of status.endpoints.slice(0, 2)) {
      expect(e).toMatchObject({ backlog: 0, oldest: null, failures: 0, lastError: null, lastDeliveredAt: expect.any(Date) });
    }
    const failing = status.endpoints[2];
    expect(failing).toMatchObject({
      backlog: 15,
      oldest: { id: ids[0], enqueuedAt: expect.any(Date) },
      lastError: { message: 'HTTP 503', at: expect.any(Date) },
      lastDeliveredAt: null,
    });
    expect(failing.failures).toBeGreaterThanOrEqual(45);
    expect(failing.oldest!.ageMs).toBeGreaterThan(0);

    // Once it is back it gets every message; the healthy ones still got each once.
    sink.fail('/iota/bad', false);
    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 10_000 });
    expect(received('/iota/ok1')).toEqual(ids.map(() => 1));
    expect(received('/iota/ok2')).toEqual(ids.map(() => 1));
    const after = (await outboxStatus(db.sql, tenant)).endpoints[2];
    expect(after).toMatchObject({
      backlog: 0,
      oldest: null,
      failures: 0,
      lastError: { message: 'HTTP 503' },
      lastDeliveredAt: expect.any(Date),
    });
    await p.stop();
  });

  it("an endpoint answering 429 with Retry-After: 3 gets nothing for 3 s, while the tenant's other endpoint keeps flowing", async () => {
    // Issue 22 item 2: the wait is honoured per endpoint, across runs, in seconds or an HTTP date.
    const arrivals: number[] = [];
    let refusedAt = 0;
    const server = createServer((req, res) => {
      req.resume();
      arrivals.push(Date.now());
      if (refusedAt === 0) {
        refusedAt = Date.now();
        res.writeHead(429, { 'retry-after': '3' }).end();
      } else {
        res.writeHead(200).end('{}');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const tenant = 'kappa';
      const paused = `http://127.0.0.1:${(server.address() as AddressInfo).port}/kappa/paused`;
      const ok = `${sink.url}/kappa/ok`;
      await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, weight: 2, config: { endpoints: [paused, ok] } });
      const p = proc();
      const ids: string[] = [];
      // A message every 100 ms for 4 s.
      for (let i = 0; i < 40; i++) {
        ids.push((await enqueueOutbox(db.sql, tenant, { key: `k${i}`, payload: i })).id);
        await sleep(100);
      }
      await waitFor('every message delivered to both', async () => (await undelivered(tenant)) === 0, { timeoutMs: 15_000 });
      await p.stop();
      expect(refusedAt).toBeGreaterThan(0);
      // Nothing reached the paused endpoint within 3 s of its 429 (a little slack for the clocks),
      // past the first 500 ms: a POST of the lane's other worker may have been in flight already.
      const during = arrivals.filter((t) => t > refusedAt + 500 && t < refusedAt + 2_950);
      expect(during).toEqual([]);
      expect(arrivals.length).toBeGreaterThanOrEqual(41);
      // The other endpoint kept receiving during the pause.
      const okDuring = sink.recent().filter((d) => d.path === '/kappa/ok' && d.at > refusedAt && d.at < refusedAt + 2_950);
      expect(okDuring.length).toBeGreaterThanOrEqual(15);
      const [row] = await db.sql<{ paused_until: Date }[]>`select paused_until from leasehold_outbox_pauses
        where tenant = ${tenant} and endpoint = ${paused}`;
      expect(row!.paused_until).toBeInstanceOf(Date);
    } finally {
      server.close();
    }
  });

  it('an endpoint removed drops its pending deliveries and blocks nothing; one added gets only messages that came after it', async () => {
    const tenant = 'kappa';
    const [a, gone] = await register(tenant, 2, ['/kappa/a', '/kappa/gone']);
    sink.fail('/kappa/gone', true);
    const p = proc();
    const early: string[] = [];
    for (let i = 0; i < 6; i++) early.push((await enqueueOutbox(db.sql, tenant, { key: `early${i}`, payload: i })).id);
    await waitFor(
      'a failed attempt of each early message at the endpoint to be removed',
      async () =>
        (await db.sql`select 1 from leasehold_outbox_deliveries where endpoint = ${gone} and attempts >= 1`).length === 6,
      { timeoutMs: 5_000 },
    );
    expect(await undelivered(tenant)).toBe(6);

    const [, added] = await register(tenant, 2, ['/kappa/a', '/kappa/new']);
    await waitFor('nothing left pending once the failing endpoint is gone', async () => (await undelivered(tenant)) === 0, {
      timeoutMs: 5_000,
    });
    expect(await db.sql`select 1 from leasehold_outbox_deliveries where endpoint = ${gone} and delivered_at is null`).toEqual([]);
    const late: string[] = [];
    for (let i = 0; i < 6; i++) late.push((await enqueueOutbox(db.sql, tenant, { key: `late${i}`, payload: i })).id);
    await waitFor('the later messages delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 5_000 });

    const keys = (path: string) => [...sink.keys(path)].sort();
    const keysOf = (ids: string[]) => ids.map((id) => idempotencyKey(tenant, id)).sort();
    expect(keys('/kappa/a')).toEqual(keysOf([...early, ...late]));
    expect(keys('/kappa/new')).toEqual(keysOf(late));
    expect((await outboxStatus(db.sql, tenant)).endpoints.map((e) => [e.url, e.backlog])).toEqual([
      [a, 0],
      [added, 0],
    ]);
    sink.fail('/kappa/gone', false);
    await p.stop();
  });
});

describe('outbox delivery connects only to checked addresses', () => {
  let trap: ReturnType<typeof createServer>;
  let trapped = 0;
  let redirector: ReturnType<typeof createServer>;
  let redirectorUrl: string;
  const port = () => Number(new URL(sink.url).port);

  beforeAll(async () => {
    // Something that must never be reached: the same port as the sink, on another loopback
    // address (127.0.0.2), which the allow-list (127.0.0.1) does not cover.
    trap = createServer((req, res) => {
      trapped++;
      res.end('{}');
    });
    await new Promise<void>((r) => trap.listen(port(), '127.0.0.2', r));
    redirector = createServer((_req, res) => {
      res.writeHead(307, { location: `http://127.0.0.2:${port()}/redirected` });
      res.end();
    });
    await new Promise<void>((r) => redirector.listen(0, '127.0.0.1', r));
    redirectorUrl = `http://127.0.0.1:${(redirector.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    trap.closeAllConnections();
    redirector.closeAllConnections();
    await new Promise((r) => trap.close(r));
    await new Promise((r) => redirector.close(r));
  });

  it('refuses stored literals, names resolving or rebinding to non-public addresses and redirects, while the public endpoint gets every message', async () => {
    // A resolver standing for DNS: good.test is the (allow-listed) sink; rebind.test answers a
    // public address to the registration's check and 127.0.0.2 afterwards; mixed.test has both.
    let rebindLookups = 0;
    const lookup: AddressLookup = async (host) => {
      if (host === 'good.test') return [{ address: '127.0.0.1', family: 4 }];
      if (host === 'rebind.test') return [{ address: rebindLookups++ === 0 ? '93.184.215.14' : '127.0.0.2', family: 4 }];
      if (host === 'mixed.test')
        return [
          { address: '127.0.0.1', family: 4 },
          { address: '127.0.0.2', family: 4 },
        ];
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    };
    const job = outboxDelivery({
      intervalMs: 50,
      backoffMs: 100,
      maxBackoffMs: 200,
      timeoutMs: 3_000,
      allow: ['127.0.0.1'],
      lookup,
    });
    const rebind = `http://rebind.test:${port()}/rebind`;
    expect(await job.admit!({ endpoints: [rebind] })).toEqual([]);

    const tenant = 'lambda';
    const good = `http://good.test:${port()}/good`;
    const refused: [string, RegExp][] = [
      // Stored before registration checked them (or written straight to the table).
      [`http://127.0.0.2:${port()}/literal`, /refused: 127\.0\.0\.2 is a loopback address/],
      [`http://0x7f000002:${port()}/hex`, /refused: 127\.0\.0\.2 is a loopback address/],
      [`http://[::ffff:127.0.0.2]:${port()}/mapped`, /refused: ::ffff:7f00:2 is an IPv4-mapped/],
      [`http://localhost:${port()}/name`, /refused: localhost is a special-use name/],
      [rebind, /refused: rebind\.test resolves to 127\.0\.0\.2 is a loopback address/],
      [`http://mixed.test:${port()}/mixed`, /refused: mixed\.test resolves to 127\.0\.0\.2/],
      [`${redirectorUrl}/redirect`, /^HTTP 307$/],
    ];
    const endpoints = [good, ...refused.map(([url]) => url)];
    await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, weight: endpoints.length, config: { endpoints } });
    const p = proc(defaultUnitJobs({ outbox: job as never }));
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await enqueueOutbox(db.sql, tenant, { key: `l${i}`, payload: i })).id);
    await waitFor(
      'two attempts of each delivery to each refused endpoint',
      async () =>
        (
          await db.sql`select 1 from leasehold_outbox_deliveries where tenant = ${tenant} and endpoint <> ${good} and attempts >= 2`
        ).length ===
        3 * refused.length,
      { timeoutMs: 10_000 },
    );
    await waitFor(
      'the public endpoint got every message',
      () => ids.every((id) => sink.keys('/good').has(idempotencyKey(tenant, id))),
      { timeoutMs: 5_000 },
    );
    expect(trapped).toBe(0);
    const errors = await db.sql<
      { endpoint: string; last_error: string }[]
    >`select endpoint, last_error from leasehold_outbox_endpoints where tenant = ${tenant}`;
    for (const [url, why] of refused) expect(errors.find((e) => e.endpoint === url)?.last_error, url).toMatch(why);
    expect(errors.find((e) => e.endpoint === good)?.last_error ?? null).toBeNull();
    await p.stop();
  });
});

// The runner and the job are usable without a leaser too (what the worker wires).
it('the default registry knows outbox-delivery, weighted by endpoint count', () => {
  const job = defaultUnitJobs().get(OUTBOX_JOB);
  expect(job.weight?.({ endpoints: ['http://a', 'http://b'] })).toBe(2);
  expect(z.safeParse(job.config, { endpoints: ['ftp://x'] }).success).toBe(false);
  expect(new UnitRunner({ log: silentLog, sql: db.sql, processId: randomUUID(), jobs: defaultUnitJobs() }).units()).toEqual([]);
});

describe('outbox retry waves', () => {
  it('spreads the retries of 1,000 deliveries that failed at once over the whole backoff interval', async () => {
    // An endpoint blip: one run posts 1,000 due deliveries, every one refused.
    const tenant = 'wave';
    const [down] = await register(tenant, 1, ['/wave/down']);
    sink.fail('/wave/down', true);
    const N = 1_000;
    const backoffMs = 60_000;
    await db.sql`insert into leasehold_outbox (tenant, shard, key, payload)
      select ${tenant}, 0, 'w' || i, to_jsonb(i) from generate_series(1, ${N}) i`;
    // A lease CI's load cannot let lapse: the wave's one run posts 1,000 times, and at the 1 s TTL
    // of the other tests a heartbeat late under load lapsed its lease mid-run; each such run counts
    // a crash of the unit, and the third in a row quarantines it for 5 minutes (docs/design.md,
    // "Crashes and quarantine"), which held the wave past the test's 30 s once in CI.
    const p = proc(fast({ backoffMs, maxBackoffMs: backoffMs, batchSize: N, parallel: 50, failureStreak: 10 * N }), {
      ttlMs: 10_000,
      heartbeatIntervalMs: 1_000,
    });
    await waitFor(
      'every delivery failed once',
      async () => {
        const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_outbox_deliveries
          where endpoint = ${down} and attempts >= 1`;
        return r.n === N;
      },
      { timeoutMs: 25_000 },
    ).catch(async (e: Error) => {
      // Within the test's 30 s, so that a wave held up says what held it.
      const units = await db.sql`select shard, owner, crashes, quarantines, quarantined_until from leasehold_units
        where tenant = ${tenant}`;
      throw new Error(`${e.message}; its unit: ${JSON.stringify(units)}; its process's log: ${JSON.stringify(p.log.slice(-20))}`);
    });
    await p.stop();
    // The delay each failure set (next_attempt_at − now() of its statement, database clock).
    const rows = await db.sql<{ delay_ms: number }[]>`select f.delay_ms from outbox_failures f
      join leasehold_outbox o on o.id = f.id where o.tenant = ${tenant} and f.attempts = 1`;
    expect(rows).toHaveLength(N);
    const delays = rows.map((r) => r.delay_ms);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(-1);
      expect(d).toBeLessThanOrEqual(backoffMs + 1);
    }
    // About a quarter of the wave in each quarter of the interval (expected 250, standard
    // deviation 14: PostgreSQL's random() is not seeded here); the old rule, backoff plus up to
    // 25 %, put every one past the interval's end.
    const quarters = histogram(delays, backoffMs, 4);
    for (const q of quarters) {
      expect(q).toBeGreaterThanOrEqual(190);
      expect(q).toBeLessThanOrEqual(310);
    }
    console.log(
      `outbox retry wave: ${N} deliveries failed at once; due again over the ${backoffMs} ms interval, in tenths: ` +
        `${histogramLine(histogram(delays, backoffMs, 10))} (quarters ${quarters.join(' ')})`,
    );
  });
});
