// Batch Finished events within EventBridge's limit (issue 37, item 9): an event is at most
// 256 KiB whatever its reason holds, and one large event never fails the others of its send.
// Through the real @aws-sdk/client-eventbridge to the local PutEvents endpoint, which refuses a
// call whose entries add up past 256 KiB as EventBridge does.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchEvents, cancelBatch, createBatch, type BatchFinishedDetail } from '../../src/batch/index.js';
import { PUT_EVENTS_MAX_BYTES, putEventsEntrySize } from '../../src/contract.js';
import { createEventsEndpoint, localEventsEnv, type EventsEndpoint, type LocalBusEvent } from '../../src/local/index.js';
import { silentLog } from '../../src/log.js';
import { boundDetail, MAX_DETAIL_BYTES, packCalls } from '../../src/runtime/event-size.js';
import { EventBridgePublisher, sendEvents } from '../../src/runtime/events.js';
import { useTestDatabase } from '../support/db-hooks.js';

const db = useTestDatabase();
let bus: EventsEndpoint;
const received: LocalBusEvent[] = [];

beforeAll(async () => {
  bus = await createEventsEndpoint({ deliver: async () => undefined, onEvent: (e) => received.push(e) });
  Object.assign(process.env, localEventsEnv(bus.url));
});
afterAll(async () => {
  await bus?.close();
});

let seq = 0;
/** `n` cancelled batches, each with its unsent event, the reason of event `i` set to `reason(i)`. */
async function endedBatches(n: number, reason: (i: number) => string | null): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    seq++;
    const { batch } = await createBatch(db.sql, {
      tenant: 'acme',
      datasource: 'files',
      job: 'extract',
      params: {},
      requestKey: `size-${seq}`,
      items: [{ key: 'a', input: {} }],
    });
    await cancelBatch(db.sql, batch.id);
    // A reason as long as any end may store (a source's parse error, a thrown error's text).
    await db.sql`update leasehold_batch_events set detail = jsonb_set(detail, '{reason}', ${db.sql.json(reason(i))})
      where batch_id = ${batch.id}`;
    ids.push(batch.id);
  }
  return ids;
}

const send = () =>
  sendEvents({ sql: db.sql, publisher: new EventBridgePublisher('leasehold-test'), webhookSecret: undefined, log: silentLog });

describe('a Batch Finished event', () => {
  it('is at most 256 KiB whatever its reason holds, says what was cut, and never fails the 9 others of its call', async () => {
    // One reason of 1 MiB (with characters of 2, 3 and 4 bytes), nine of 60 KiB: 10 entries
    // that no single call could carry.
    const huge = 'ab\u00e9\u20ac\ud83d\ude00'.repeat(150_000);
    const ids = await endedBatches(10, (i) => (i === 3 ? huge : `r${i} `.repeat(15_000)));
    received.length = 0;
    const result = await send();
    expect(result).toMatchObject({ sent: 10, failed: 0 });
    expect(received.map((e) => (e.detail as BatchFinishedDetail).batchId).sort()).toEqual([...ids].sort());
    for (const e of received) {
      const d = e.detail as BatchFinishedDetail;
      const size = putEventsEntrySize({ Time: 1, Source: e.source, DetailType: e['detail-type'], Detail: JSON.stringify(d) });
      expect(size).toBeLessThanOrEqual(PUT_EVENTS_MAX_BYTES);
      if (d.batchId === ids[3]) {
        expect(d.truncated).toEqual(['reason']);
        expect(d.reason!.endsWith('…')).toBe(true);
        expect(huge.startsWith(d.reason!.slice(0, -1))).toBe(true);
        // Cut close to the limit, not far below it.
        expect(size).toBeGreaterThan(PUT_EVENTS_MAX_BYTES - 8);
      } else {
        expect(d.truncated).toBeUndefined();
        expect(d.reason).toMatch(/^r\d /);
      }
    }
    // The stored detail stays whole.
    const [row] = await batchEvents(db.sql, ids[3]);
    expect(row.detail.reason).toBe(huge);
    expect(row.sentAt).not.toBeNull();
  }, 60_000);

  it('of ten whose entries add up past 256 KiB goes out in calls that each fit (without packing, the call fails whole)', async () => {
    const ids = await endedBatches(10, (i) => `${i}`.repeat(100_000));
    // The local endpoint refuses the ten in one call, as EventBridge does.
    const { EventBridgeClient, PutEventsCommand } = await import('@aws-sdk/client-eventbridge');
    const client = new EventBridgeClient({});
    const entries = ids.map(() => ({
      Source: 'leasehold',
      DetailType: 'Batch Finished',
      Detail: JSON.stringify({ r: '0'.repeat(100_000) }),
    }));
    await expect(client.send(new PutEventsCommand({ Entries: entries }))).rejects.toMatchObject({ name: 'ValidationException' });
    client.destroy();
    received.length = 0;
    expect(await send()).toMatchObject({ sent: 10, failed: 0 });
    expect(received).toHaveLength(10);
  }, 60_000);
});

describe('the cut of a detail', () => {
  const detail = (reason: string | null, manifest: string | null = null): BatchFinishedDetail => ({
    id: '00000000-0000-0000-0000-000000000000',
    batchId: '00000000-0000-0000-0000-000000000001',
    tenant: 't',
    datasource: 'd',
    job: 'j',
    requestKey: 'k',
    status: 'failed',
    reason,
    counts: { total: 1, pending: 0, running: 0, done: 0, failed: 1 },
    results: manifest === null ? null : { manifest },
    redrives: 0,
    createdAt: '2026-01-01T00:00:00.000Z',
    finishedAt: '2026-01-01T00:00:00.000Z',
  });

  it('leaves a detail that fits as it is, and fits any other within the bound, longest field first', () => {
    const small = detail('short');
    expect(boundDetail(small)).toBe(small);
    for (const max of [600, 1_000, 5_000]) {
      for (const reason of ['x'.repeat(10_000), '\u0000'.repeat(3_000), '😀'.repeat(4_000)]) {
        const cut = boundDetail(detail(reason, 's3://b/' + 'k'.repeat(2_000)), max);
        expect(Buffer.byteLength(JSON.stringify(cut))).toBeLessThanOrEqual(max);
        expect(cut.truncated!.length).toBeGreaterThan(0);
        // No lone surrogate left by a cut.
        expect(cut.reason).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
      }
    }
    expect(boundDetail(detail('x'.repeat(300_000))).truncated).toEqual(['reason']);
    expect(MAX_DETAIL_BYTES).toBe(PUT_EVENTS_MAX_BYTES - 14 - 'leasehold'.length - 'Batch Finished'.length);
  });

  it('packs entries into calls of at most 10 and 256 KiB, in order; one past the limit alone goes in none', () => {
    expect(packCalls([100, 200, 300], 1_000)).toEqual({ calls: [[0, 1, 2]], tooLarge: [] });
    expect(packCalls([600, 600, 300, 200], 1_000)).toEqual({ calls: [[0], [1, 2], [3]], tooLarge: [] });
    expect(packCalls([600, 600, 300, 2_000, 100], 1_000)).toEqual({ calls: [[0], [1, 2, 4]], tooLarge: [3] });
    expect(packCalls(Array(23).fill(1)).calls.map((c) => c.length)).toEqual([10, 10, 3]);
  });
});
