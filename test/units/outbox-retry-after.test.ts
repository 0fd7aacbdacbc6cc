// Issue 38 item 4: an endpoint's Retry-After pauses it for the whole fleet (every shard of the
// tenant, on every process), in seconds or as an HTTP date, capped, with a jittered wake-up; the
// pause shows in the outbox status. Two deliverers on two pools stand for two containers.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { putTenantUnits } from '../../src/lease/index.js';
import {
  defaultUnitJobs,
  enqueueOutbox,
  idempotencyKey,
  OUTBOX_JOB,
  outboxDelivery,
  outboxStatus,
} from '../../src/units/index.js';
import { outboxStatusView } from '../../src/api/views.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { startProc, undelivered as undeliveredIn, type Proc } from './helpers.js';
import { sleep } from '../support/time.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase({ max: 5 });
const procs: Proc[] = [];
const closers: (() => Promise<void>)[] = [];

afterEach(async () => {
  await Promise.all(procs.splice(0).map((p) => p.kill().catch(() => {})));
  await Promise.all(closers.splice(0).map((c) => c()));
  await db.sql`delete from leasehold_units`;
});

const SHARDS = 4;
const PARALLEL = 4;

const jobs = (o: Parameters<typeof outboxDelivery>[0] = {}) =>
  defaultUnitJobs({
    outbox: outboxDelivery({
      intervalMs: 50,
      backoffMs: 100,
      maxBackoffMs: 500,
      timeoutMs: 3_000,
      batchSize: 25,
      parallel: PARALLEL,
      allow: ['127.0.0.1'],
      ...o,
    }) as never,
  });

function proc(o?: Parameters<typeof outboxDelivery>[0]): Proc {
  const p = startProc(db, jobs(o));
  procs.push(p);
  return p;
}

interface Arrival {
  at: number;
  path: string;
  key: string;
}

/** A webhook endpoint that counts every request and answers what `answer` says (after `delayMs`). */
async function countingServer(
  answer: (a: Arrival) => { status: number; headers?: Record<string, string> },
  delayMs = 0,
): Promise<{ url: string; arrivals: Arrival[] }> {
  const arrivals: Arrival[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    req.resume();
    const a: Arrival = { at: Date.now(), path: req.url ?? '', key: String(req.headers['idempotency-key']) };
    arrivals.push(a);
    const { status, headers } = answer(a);
    const send = () => res.writeHead(status, headers).end('{}');
    if (delayMs > 0 && status < 300) setTimeout(send, delayMs);
    else send();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrivals };
}

/** Two deliverers (own pools) sharing the tenant's shards, both owning some before messages flow. */
async function twoDeliverers(tenant: string): Promise<void> {
  proc();
  proc();
  await waitFor(
    'both deliverers own shards of the tenant',
    async () => {
      const [r] = await db.sql<{ owners: number; owned: number }[]>`select count(distinct owner) as owners,
          count(owner) as owned from leasehold_units where tenant = ${tenant}`;
      return r!.owners === 2 && r!.owned === SHARDS;
    },
    { timeoutMs: 10_000 },
  );
}

/** Enqueue `n` messages, one every `everyMs`, with keys spread over the shards; returns the Idempotency-Keys. */
async function produce(tenant: string, n: number, everyMs: number, onEach?: (i: number) => void): Promise<string[]> {
  const keys: string[] = [];
  for (let i = 0; i < n; i++) {
    const { id } = await enqueueOutbox(db.sql, tenant, { key: `m${i}`, payload: { i } });
    keys.push(idempotencyKey(tenant, id));
    onEach?.(i);
    await sleep(everyMs);
  }
  return keys;
}

describe('outbox Retry-After across the fleet', () => {
  // The endpoint asks once; the pause it asked for is honoured by the owners of all 4 shards on
  // both deliverers. Before issue 38 only the unit that got the answer paused: the other shards
  // went on posting (~150 requests in the 2 s).
  for (const form of ['seconds', 'HTTP date'] as const) {
    it(`one 429 with Retry-After as ${form} pauses the endpoint for every shard on both deliverers, then delivery resumes`, async () => {
      const tenant = form === 'seconds' ? 'ra-seconds' : 'ra-date';
      let trip = false;
      let refusedAt = 0;
      let resumeAt = 0;
      const server = await countingServer((a) => {
        if (!trip || refusedAt !== 0) return { status: 200 };
        refusedAt = a.at;
        if (form === 'seconds') {
          resumeAt = a.at + 2_000;
          return { status: 429, headers: { 'retry-after': '2' } };
        }
        // An HTTP date has whole seconds: 2 to 3 s from now.
        resumeAt = Math.ceil((a.at + 2_000) / 1_000) * 1_000;
        return { status: 503, headers: { 'retry-after': new Date(resumeAt).toUTCString() } };
      }, 50);
      const endpoint = `${server.url}/${tenant}`;
      await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: SHARDS, weight: 1, config: { endpoints: [endpoint] } });
      await twoDeliverers(tenant);
      // 100 messages a second for 4 s; the endpoint refuses one request from 0.5 s on.
      const keys = await produce(tenant, 400, 10, (i) => {
        if (i === 50) trip = true;
      });
      await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 30_000 });
      expect(refusedAt).toBeGreaterThan(0);

      const during = server.arrivals.filter((a) => a.at > refusedAt && a.at < resumeAt);
      const late = during.filter((a) => a.at > refusedAt + 300);
      console.log(
        `Retry-After (${form}) of ${resumeAt - refusedAt} ms: ${during.length} requests during the pause, ${late.length} of them later than 300 ms after the answer; ${server.arrivals.length} in all for ${keys.length} messages`,
      );
      // Only posts decided before the deliverers learned of the pause may land in it: at most one
      // per lane worker (shards × parallel), twice that for posts between the answer and the pause's commit.
      expect(during.length).toBeLessThanOrEqual(2 * SHARDS * PARALLEL);
      // Delivery resumed after the pause, and every message reached the endpoint.
      expect(server.arrivals.some((a) => a.at >= resumeAt)).toBe(true);
      expect(new Set(server.arrivals.map((a) => a.key))).toEqual(new Set(keys));
      await Promise.all(procs.splice(0).map((p) => p.stop()));
    });
  }

  it('an endpoint refusing every request for 2 s is asked at most once per lane worker meanwhile', async () => {
    const tenant = 'ra-storm';
    let trip = false;
    let refusedAt = 0;
    const server = await countingServer((a) => {
      if (trip && refusedAt === 0) refusedAt = a.at;
      if (refusedAt !== 0 && a.at < refusedAt + 2_000) return { status: 429, headers: { 'retry-after': '2' } };
      return { status: 200 };
    }, 50);
    const endpoint = `${server.url}/${tenant}`;
    await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: SHARDS, weight: 1, config: { endpoints: [endpoint] } });
    await twoDeliverers(tenant);
    const keys = await produce(tenant, 300, 10, (i) => {
      if (i === 50) trip = true;
    });
    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 30_000 });
    const refused = server.arrivals.filter((a) => a.at >= refusedAt && a.at < refusedAt + 2_000);
    console.log(
      `endpoint refusing for 2 s with Retry-After: 2: ${refused.length} requests refused; ${server.arrivals.length} in all`,
    );
    expect(refused.length).toBeLessThanOrEqual(2 * SHARDS * PARALLEL);
    expect(new Set(server.arrivals.map((a) => a.key))).toEqual(new Set(keys));
    await Promise.all(procs.splice(0).map((p) => p.stop()));
  });

  it('a Retry-After of a day is capped at 15 minutes, and the pause shows in the outbox status', async () => {
    const tenant = 'ra-day';
    let refusedAt = 0;
    const server = await countingServer((a) => {
      if (refusedAt !== 0) return { status: 200 };
      refusedAt = a.at;
      return { status: 429, headers: { 'retry-after': '86400' } };
    });
    const endpoint = `${server.url}/${tenant}`;
    await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, weight: 1, config: { endpoints: [endpoint] } });
    proc();
    await produce(tenant, 3, 0);
    await waitFor('the pause stored', async () => (await outboxStatus(db.sql, tenant)).endpoints[0]!.pause !== null, {
      timeoutMs: 10_000,
    });
    const [e] = (await outboxStatus(db.sql, tenant)).endpoints;
    expect(e!.pause!.askedMs).toBe(86_400_000);
    // 15 minutes, plus at most its wake-up jitter (a tenth), by the database clock.
    expect(e!.pause!.remainingMs).toBeGreaterThan(15 * 60_000 - 10_000);
    expect(e!.pause!.remainingMs).toBeLessThanOrEqual(16.5 * 60_000);
    const view = outboxStatusView(await outboxStatus(db.sql, tenant)).endpoints[0]!;
    expect(view.pause).toMatchObject({ askedMs: 86_400_000, until: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    await sleep(500);
    expect(server.arrivals.length).toBeLessThanOrEqual(PARALLEL);
  });

  it('a deliverer with a lower cap resumes after it, although the endpoint asked for a day', async () => {
    const tenant = 'ra-capped';
    let refusedAt = 0;
    const server = await countingServer((a) => {
      if (refusedAt !== 0) return { status: 200 };
      refusedAt = a.at;
      return { status: 503, headers: { 'retry-after': '86400' } };
    });
    const endpoint = `${server.url}/${tenant}`;
    await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, weight: 1, config: { endpoints: [endpoint] } });
    proc({ maxRetryAfterMs: 1_500 });
    const keys = await produce(tenant, 10, 0);
    await waitFor('every message delivered', async () => (await undelivered(tenant)) === 0, { timeoutMs: 15_000 });
    // Nothing but in-flight posts within the capped pause; all delivered after it.
    expect(server.arrivals.filter((a) => a.at > refusedAt + 300 && a.at < refusedAt + 1_500)).toEqual([]);
    expect(new Set(server.arrivals.map((a) => a.key))).toEqual(new Set(keys));
  });

  it('pauses asked for at the same moment wake up spread over their jitter, never before the wait', async () => {
    const tenant = 'ra-jitter';
    const seen = new Set<string>();
    const server = await countingServer((a) => {
      if (seen.has(a.path)) return { status: 200 };
      seen.add(a.path);
      return { status: 429, headers: { 'retry-after': '10' } };
    });
    const endpoints = Array.from({ length: 12 }, (_, i) => `${server.url}/${tenant}/${i}`);
    await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 1, weight: 12, config: { endpoints } });
    proc();
    await produce(tenant, 1, 0);
    await waitFor(
      'every endpoint paused',
      async () => (await db.sql`select 1 from leasehold_outbox_pauses where tenant = ${tenant}`).length === 12,
      { timeoutMs: 10_000 },
    );
    // Shard 0's wake-up of each pause, ms after it was asked for.
    const wakes = (
      await db.sql<{ ms: number }[]>`select (extract(epoch from paused_until - asked_at) * 1000
          + jitter_ms * (wake_offset - floor(wake_offset)))::float8 as ms
        from leasehold_outbox_pauses where tenant = ${tenant}`
    ).map((r) => r.ms);
    console.log(`wake-ups of 12 pauses of 10 s: ${wakes.map((w) => Math.round(w)).join(', ')} ms`);
    expect(Math.min(...wakes)).toBeGreaterThanOrEqual(10_000);
    expect(Math.max(...wakes)).toBeLessThanOrEqual(11_000 + 50);
    expect(Math.max(...wakes) - Math.min(...wakes)).toBeGreaterThan(150);
  });
});

const undelivered = (tenant: string) => undeliveredIn(db.sql, tenant);
