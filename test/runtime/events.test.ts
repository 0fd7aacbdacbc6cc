// Batch Finished events (docs/design.md, "Events"): written in the ending transaction, sent at
// least once with their stable id through the real @aws-sdk/client-eventbridge to the local
// PutEvents endpoint (AWS_ENDPOINT_URL_EVENTBRIDGE), chained starts keyed by the event id, and
// the signed webhook through outbox delivery's client and address policy.
import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchEvents,
  cancelBatch,
  createBatch,
  redriveBatch,
  Runner,
  type BatchFinishedDetail,
  type NewBatch,
} from '../../src/batch/index.js';
import { z } from 'zod';
import { defaultJobContext, defineJob, JobRegistry } from '../../src/jobs/index.js';
import { createEventsEndpoint, localEventsEnv, type EventsEndpoint, type LocalBusEvent } from '../../src/local/index.js';
import { EventBridgePublisher, sendEvents, type EventSenderDeps } from '../../src/runtime/events.js';
import { loadConfig } from '../../src/runtime/config.js';
import { handleTrigger, parseChainRules, type TriggerResult } from '../../src/trigger/index.js';
import { EndpointGuard } from '../../src/units/index.js';
import { silentLog } from '../../src/log.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { waitFor } from '../support/waits.js';

const FIXTURE = fileURLToPath(new URL('./fixtures/finish-then-hang.ts', import.meta.url));

const db = useTestDatabase();
let bus: EventsEndpoint;
/** Every event the local bus received, in order, with when (ms, this process's clock). */
const received: { event: LocalBusEvent; at: number }[] = [];
/** What the bus routed to the trigger: chained starts. */
const triggered: Promise<TriggerResult>[] = [];
let deliver: (event: LocalBusEvent) => Promise<TriggerResult> = async () => ({ outcome: 'dropped', code: 'x', reason: 'x' });

beforeAll(async () => {
  bus = await createEventsEndpoint({
    deliver: (event) => {
      const p = deliver(event);
      triggered.push(p);
      return p;
    },
    onEvent: (event) => received.push({ event, at: Date.now() }),
  });
  // The real SDK client finds the endpoint the way leasehold dev points it there.
  Object.assign(process.env, localEventsEnv(bus.url));
});
afterAll(async () => {
  await bus?.close();
});

let seq = 0;
function batchOf(n: number, o: Partial<NewBatch> = {}): NewBatch {
  seq++;
  return {
    tenant: `t${seq}`,
    datasource: 'files',
    job: 'extract',
    params: {},
    requestKey: `r${seq}-${Math.random().toString(36).slice(2, 8)}`,
    items: Array.from({ length: n }, (_, i) => ({ key: `k${String(i).padStart(3, '0')}`, input: { i } })),
    ...o,
  };
}

function sender(o: Partial<EventSenderDeps> = {}): EventSenderDeps {
  return { sql: db.sql, publisher: new EventBridgePublisher('leasehold-test'), webhookSecret: undefined, log: silentLog, ...o };
}

const receivedFor = (batchId: string) => received.filter((r) => (r.event.detail as BatchFinishedDetail).batchId === batchId);

describe('the event row of an end', () => {
  it('is written once by every way a batch ends, in the transaction that ends it, many at once', async () => {
    const ROUNDS = 3;
    for (let round = 0; round < ROUNDS; round++) {
      // 24 batches at once: each worked by two runners while a cancel races the finish of every third.
      const runners = [new Runner(db.sql, { parallel: 4 }), new Runner(db.sql, { parallel: 4 })];
      const started = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          createBatch(db.sql, batchOf(30, { maxConcurrency: 2, toleratedFailures: i % 4 === 1 ? { count: 0 } : null })),
        ),
      );
      const work =
        (i: number) =>
        async ({ key }: { key: string }) => {
          if (i % 4 === 1 && key === 'k005') throw Object.assign(new Error('bad'), { permanent: true });
          return key;
        };
      await Promise.all(
        started.flatMap(({ batch }, i) => [
          ...runners.map((r) => r.takeOver(() => ({ work: work(i) }), batch.id)),
          ...(i % 3 === 0 ? [cancelBatch(db.sql, batch.id).catch(() => undefined)] : []),
        ]),
      );
      await waitFor(
        'every batch to end',
        async () => {
          const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from leasehold_batches
          where id in (select x::uuid from jsonb_array_elements_text(${db.sql.json(started.map((s) => s.batch.id))}) x) and status = 'open'`;
          return r.n === 0;
        },
        { timeoutMs: 30_000 },
      );
      for (const r of runners) await r.close();
      const rows = await db.sql<
        { id: string; status: string; finished_at: Date; events: number; created_at: Date; detail: BatchFinishedDetail }[]
      >`select b.id, b.status, b.finished_at, (select count(*)::int from leasehold_batch_events e where e.batch_id = b.id) as events,
          e.created_at, e.detail
        from leasehold_batches b left join leasehold_batch_events e on e.batch_id = b.id
        where b.id in (select x::uuid from jsonb_array_elements_text(${db.sql.json(started.map((s) => s.batch.id))}) x)`;
      expect(rows).toHaveLength(24);
      for (const r of rows) {
        expect(r.events).toBe(1);
        // now() is the transaction's start: the same value only within one transaction.
        expect(r.created_at.getTime()).toBe(r.finished_at.getTime());
        expect(r.detail).toMatchObject({ batchId: r.id, status: r.status, results: null, redrives: 0 });
        const c = r.detail.counts;
        expect(c.pending + c.running + c.done + c.failed).toBe(30);
        if (r.status === 'succeeded') expect(c).toMatchObject({ done: 30, failed: 0 });
      }
      // The tolerance end (count 0) and the cancels both happened.
      expect(rows.some((r) => r.status === 'cancelled')).toBe(true);
      expect(rows.some((r) => r.status === 'failed' && r.detail.reason?.startsWith('more items failed'))).toBe(true);
    }
  });

  it('gets a new event with a new id when a redriven batch ends again', async () => {
    let fail = true;
    const runner = new Runner(db.sql, { parallel: 2, attempts: 1 });
    const { batch } = await runner.start(batchOf(4), {}, async ({ key }) => {
      if (fail && key === 'k001') throw new Error('once');
      return key;
    });
    await runner.running(batch.id);
    fail = false;
    await redriveBatch(db.sql, batch.id);
    await runner.takeOver(() => ({ work: async ({ key }: { key: string }) => key }), batch.id);
    await runner.running(batch.id);
    await runner.close();
    const events = await batchEvents(db.sql, batch.id);
    expect(events.map((e) => [e.detail.status, e.detail.redrives])).toEqual([
      ['failed', 0],
      ['succeeded', 1],
    ]);
    expect(events[0].id).not.toBe(events[1].id);
    expect(events.map((e) => e.detail.id)).toEqual(events.map((e) => e.id));
  });
});

describe('sending', () => {
  it('puts the event on the bus through the real SDK client, once, with its stable id', async () => {
    const runner = new Runner(db.sql, { parallel: 4 });
    const { batch } = await runner.start(batchOf(10), {}, async ({ key }) => key);
    await runner.running(batch.id);
    await runner.close();
    const [row] = await batchEvents(db.sql, batch.id);
    expect(row.sentAt).toBeNull();
    expect(await sendEvents(sender(), { batchId: batch.id })).toMatchObject({ sent: 1, failed: 0 });
    expect(await sendEvents(sender(), { batchId: batch.id })).toMatchObject({ sent: 0 });
    const got = receivedFor(batch.id);
    expect(got).toHaveLength(1);
    expect(got[0].event).toMatchObject({ source: 'leasehold', 'detail-type': 'Batch Finished' });
    // As stored, with the batch's usage as recorded when it was sent (docs/design.md, "Usage and cost").
    const { usage, ...stored } = got[0].event.detail as typeof row.detail;
    expect(stored).toEqual(row.detail);
    expect(usage).toMatchObject({ runs: 1, diedRuns: 0, invocations: 1, items: 10, estimatedCost: { currency: 'USD' } });
    expect(usage!.workerMs).toBeGreaterThan(0);
    expect(got[0].event.detail).toMatchObject({
      id: row.id,
      batchId: batch.id,
      tenant: batch.tenant,
      datasource: 'files',
      job: 'extract',
      requestKey: batch.requestKey,
      status: 'succeeded',
      counts: { total: 10, pending: 0, running: 0, done: 10, failed: 0 },
      results: null,
    });
    expect((await batchEvents(db.sql, batch.id))[0]).toMatchObject({ sendAttempts: 1, sendError: null });
    expect((await batchEvents(db.sql, batch.id))[0].sentAt).toBeInstanceOf(Date);
  });

  it('a failed put is recorded and sent again later with the same id', async () => {
    const runner = new Runner(db.sql, { parallel: 4 });
    const { batch } = await runner.start(batchOf(3), {}, async ({ key }) => key);
    await runner.running(batch.id);
    await runner.close();
    // A bus that refuses (a real refusal of the local endpoint: no such port).
    const up = new EventBridgePublisher('leasehold-test');
    const { EventBridgeClient } = await import('@aws-sdk/client-eventbridge');
    const refused = new EventBridgePublisher(
      'leasehold-test',
      new EventBridgeClient({ endpoint: 'http://127.0.0.1:9', maxAttempts: 1 }),
    );
    expect(await sendEvents(sender({ publisher: refused }), { batchId: batch.id })).toMatchObject({ sent: 0, failed: 1 });
    const [failed] = await batchEvents(db.sql, batch.id);
    expect(failed.sendError).toMatch(/PutEvents failed/);
    expect(failed.sentAt).toBeNull();
    // Due again after its backoff (about 1 s).
    expect(await sendEvents(sender({ publisher: up }), { batchId: batch.id })).toMatchObject({ sent: 0 });
    await waitFor(
      'the retried put',
      async () => (await sendEvents(sender({ publisher: up }), { batchId: batch.id })).sent === 1,
      {
        timeoutMs: 5_000,
        everyMs: 100,
      },
    );
    expect(receivedFor(batch.id).map((r) => (r.event.detail as BatchFinishedDetail).id)).toEqual([failed.id]);
  });

  it('killed between the finish and the send: the event is still sent once the scheduler sends, with the same id', async () => {
    const tenant = `kill${seq++}`;
    const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, db.url, db.schema, tenant], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const ended = await new Promise<{ batchId: string; outcome: string }>((resolve, reject) => {
      let buf = '';
      child.stdout!.on('data', (d: Buffer) => {
        buf += d.toString();
        const line = buf.split('\n').find((l) => l.includes('"ended"'));
        if (line) resolve(JSON.parse(line) as { batchId: string; outcome: string });
      });
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before the finish`)));
    });
    expect(ended.outcome).toBe('succeeded');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(child.signalCode).toBe('SIGKILL');
    // The server's evidence: the finish committed, its event with it, nothing sent.
    const [row] = await batchEvents(db.sql, ended.batchId);
    expect(row).toMatchObject({ sentAt: null, sendAttempts: 0 });
    expect(row.detail.status).toBe('succeeded');
    // A sender that takes it and dies too (taken, never marked): the next sender, after the
    // claim window, sends it with the same id.
    const { takeUnsent } = await import('../../src/batch/sql/events.js');
    expect(await takeUnsent(db.sql, { limit: 1, claimMs: 300, batchId: ended.batchId })).toHaveLength(1);
    expect(await sendEvents(sender(), { batchId: ended.batchId })).toMatchObject({ sent: 0 });
    await waitFor(
      'the scheduler-like send',
      async () => (await sendEvents(sender())).sent >= 1 && receivedFor(ended.batchId).length > 0,
      {
        timeoutMs: 5_000,
        everyMs: 100,
      },
    );
    const got = receivedFor(ended.batchId);
    expect(got).toHaveLength(1);
    expect((got[0].event.detail as BatchFinishedDetail).id).toBe(row.id);
    expect((await batchEvents(db.sql, ended.batchId))[0]).toMatchObject({ sendAttempts: 2 });
    expect(await sendEvents(sender())).toMatchObject({ sent: 0 });
    expect(receivedFor(ended.batchId)).toHaveLength(1);
  });
});

describe('chaining', () => {
  it('a redelivered event starts the chained batch once', async () => {
    const transform = defineJob({
      name: 'transform',
      description: 'one item per upstream batch',
      params: z.record(z.string(), z.unknown()),
      expand: async (params) => ({ items: [{ key: 'from', input: params }] }),
      run: async () => null,
    });
    const jobs = new JobRegistry([transform as never], defaultJobContext());
    const rules = parseChainRules(
      JSON.stringify([
        { name: 'then-transform', after: { job: 'extract' }, job: 'transform', params: { format: 'csv' } },
        { name: 'on-failure', after: { job: 'extract', status: 'failed' }, job: 'transform' },
      ]),
    );
    // The settings as a deployment resolves them with no variable set: every default.
    deliver = (event) => handleTrigger(event, { sql: db.sql, jobs, config: loadConfig({}), log: silentLog, rules });
    const runner = new Runner(db.sql, { parallel: 2 });
    const { batch } = await runner.start(batchOf(2), {}, async ({ key }) => key);
    await runner.running(batch.id);
    await runner.close();
    const [row] = await batchEvents(db.sql, batch.id);
    // The event sent three times (a sender's resend after a lost answer, a scheduler's pass),
    // each a new EventBridge event with the same detail; two of them at once.
    const { markSent } = await import('../../src/batch/sql/events.js');
    const before = triggered.length;
    expect(await sendEvents(sender(), { batchId: batch.id })).toMatchObject({ sent: 1 });
    await db.sql`update leasehold_batch_events set sent_at = null, send_after = now() where id = ${row.id}`;
    await Promise.all([sendEvents(sender(), { batchId: batch.id }), new EventBridgePublisher('b').put([row.detail])]);
    await markSent(db.sql, [row.id]);
    // Each put's delivery is pushed as it arrives (onEvent, then deliver).
    await waitFor('three deliveries', () => receivedFor(batch.id).length === 3, { timeoutMs: 5_000 });
    const results = await Promise.all(triggered.slice(before));
    const starts = results.flatMap((r) => (r.outcome === 'chained' && r.eventId === row.id ? r.starts : []));
    expect(starts).toHaveLength(3);
    // Only the rule on success matched; one start, then repeats of it.
    expect(starts.every((s) => s.rule === 'then-transform')).toBe(true);
    expect(starts.filter((s) => s.outcome === 'started')).toHaveLength(1);
    expect(starts.filter((s) => s.outcome === 'repeated')).toHaveLength(2);
    const chained = await db.sql<{ id: string; job: string; request_key: string; params: Record<string, unknown> }[]>`
      select id, job, request_key, params from leasehold_batches where tenant = ${batch.tenant} and job = 'transform'`;
    expect(chained).toHaveLength(1);
    expect(chained[0].request_key).toBe(`after:then-transform:${row.id}`);
    expect(chained[0].params).toMatchObject({
      format: 'csv',
      after: { batchId: batch.id, eventId: row.id, status: 'succeeded' },
    });
  });
});

describe('the webhook', () => {
  it('is delivered signed through outbox delivery, and refused where its address policy refuses', async () => {
    const secret = 'a-test-secret-of-enough-length';
    const got: { headers: IncomingHttpHeaders; body: string }[] = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        got.push({ headers: req.headers, body });
        res.writeHead(got.length === 1 ? 500 : 204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const runner = new Runner(db.sql, { parallel: 2 });
      const { batch } = await runner.start(batchOf(3, { notify: { url } }), {}, async ({ key }) => key);
      await runner.running(batch.id);
      await runner.close();
      // Loopback is not public: refused unless allow-listed, as for an outbox endpoint.
      const strict = new EndpointGuard({ allow: [] });
      expect(await sendEvents(sender({ webhookSecret: secret, guard: strict }), { batchId: batch.id })).toMatchObject({
        sent: 1,
        notified: 0,
        notifyFailed: 1,
      });
      expect((await batchEvents(db.sql, batch.id))[0].notifyError).toMatch(/^refused: /);
      expect(got).toHaveLength(0);
      const allowed = new EndpointGuard({ allow: ['127.0.0.1'] });
      await db.sql`update leasehold_batch_events set notify_after = now() where batch_id = ${batch.id}`;
      // First answer 500: retried after its backoff; the second is accepted.
      expect(await sendEvents(sender({ webhookSecret: secret, guard: allowed }), { batchId: batch.id })).toMatchObject({
        notifyFailed: 1,
      });
      await waitFor(
        'the retried webhook',
        async () => (await sendEvents(sender({ webhookSecret: secret, guard: allowed }), { batchId: batch.id })).notified === 1,
        { timeoutMs: 5_000, everyMs: 100 },
      );
      const [row] = await batchEvents(db.sql, batch.id);
      expect(row).toMatchObject({ notifyAttempts: 3, notifyError: null });
      expect(row.notifiedAt).toBeInstanceOf(Date);
      expect(got).toHaveLength(2);
      for (const g of got) {
        const body = JSON.parse(g.body) as { id: string; detail: BatchFinishedDetail; 'detail-type': string };
        expect(body).toMatchObject({ id: row.id, source: 'leasehold', 'detail-type': 'Batch Finished', detail: row.detail });
        expect(g.headers['idempotency-key']).toBe(row.id);
        expect(g.headers['webhook-id']).toBe(row.id);
        const ts = String(g.headers['webhook-timestamp']);
        const mac = createHmac('sha256', secret).update(`${row.id}.${ts}.${g.body}`).digest('base64');
        expect(g.headers['webhook-signature']).toBe(`v1,${mac}`);
        expect(Math.abs(Number(ts) - Date.now() / 1000)).toBeLessThan(60);
      }
      // Nothing more to deliver.
      expect(await sendEvents(sender({ webhookSecret: secret, guard: allowed }))).toMatchObject({ notified: 0, notifyFailed: 0 });
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });

  it('waits out a Retry-After before its next try, cut at 15 minutes (issue 38)', async () => {
    const answers = [{ 'retry-after': '30' }, { 'retry-after': '86400' }];
    let posts = 0;
    const receiver = createServer((req, res) => {
      req.resume();
      res.writeHead(503, answers[posts++ % 2]).end();
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const runner = new Runner(db.sql, { parallel: 2 });
      const { batch } = await runner.start(batchOf(2, { notify: { url } }), {}, async ({ key }) => key);
      await runner.running(batch.id);
      await runner.close();
      const allowed = new EndpointGuard({ allow: ['127.0.0.1'] });
      const waitS = async () => {
        const [r] = await db.sql<{ s: number }[]>`select extract(epoch from notify_after - now())::float8 as s
          from leasehold_batch_events where batch_id = ${batch.id}`;
        return r!.s;
      };
      await db.sql`update leasehold_batch_events set notify_after = now() where batch_id = ${batch.id}`;
      expect(await sendEvents(sender({ guard: allowed }), { batchId: batch.id })).toMatchObject({ notifyFailed: 1 });
      // Asked for 30 s: not before (its backoff alone would be about 1 s).
      expect(await waitS()).toBeGreaterThan(28);
      expect(await waitS()).toBeLessThanOrEqual(30);
      await db.sql`update leasehold_batch_events set notify_after = now() where batch_id = ${batch.id}`;
      expect(await sendEvents(sender({ guard: allowed }), { batchId: batch.id })).toMatchObject({ notifyFailed: 1 });
      // Asked for a day: 15 minutes.
      expect(await waitS()).toBeGreaterThan(15 * 60 - 5);
      expect(await waitS()).toBeLessThanOrEqual(15 * 60);
      expect(posts).toBe(2);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });
});
