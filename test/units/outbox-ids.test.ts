// Issue 38 item 5: ids past 2^53 round-trip exactly, end to end. The outbox's sequence is the only
// id sequence leasehold exposes (batches, runs, processes and events have UUIDs; a catalog check
// below keeps it so): set past 2^53, every id in the API's JSON, in the webhook body, in the
// Idempotency-Key, in the status view and in retention is the database's, digit for digit.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiDeps } from '../../src/api/index.js';
import { putTenantUnits } from '../../src/lease/index.js';
import { defaultUnitJobs, idempotencyKey, OUTBOX_JOB, outboxDelivery } from '../../src/units/index.js';
import { deleteDeliveredOutbox } from '../../src/units/sql/retention.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { apiDeps, call, InvokeEndpoint } from '../support/api.js';
import { startProc, undelivered } from './helpers.js';
import { waitFor } from '../support/waits.js';

const db = useTestDatabase({ max: 5 });
let endpoint: InvokeEndpoint;
let deps: ApiDeps;

beforeAll(async () => {
  endpoint = await InvokeEndpoint.start();
  deps = apiDeps(db.sql, endpoint);
});
afterAll(async () => {
  await endpoint.close();
});

/** 2^53: the first integer past which a JS number (and a JSON number read by most parsers) skips integers. */
const TWO_53 = 2n ** 53n;

describe('ids past 2^53', () => {
  it('the only id sequence is the outbox message id', async () => {
    // A new bigint id sequence must be read as text like this one (src/units/sql/outbox.ts).
    const seqs = await db.sql<{ name: string }[]>`select c.relname as name from pg_class c
      join pg_namespace n on n.oid = c.relnamespace
      where c.relkind = 'S' and n.nspname = current_schema() and c.relname like 'leasehold%' order by 1`;
    expect(seqs.map((s) => s.name)).toEqual(['leasehold_outbox_id_seq']);
  });

  it('every message id, webhook body, Idempotency-Key and status id is exact around 2^53', async () => {
    const tenant = 'big-ids';
    const bodies: { raw: string; key: string }[] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push({ raw: Buffer.concat(chunks).toString('utf8'), key: String(req.headers['idempotency-key']) });
        res.writeHead(200).end('{}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
      await putTenantUnits(db.sql, tenant, { job: OUTBOX_JOB, shards: 3, weight: 1, config: { endpoints: [url] } });
      // The next id is 2^53 − 4: the messages straddle 2^53, where 2^53 + 1 reads as 2^53 in a number.
      await db.sql`select setval('leasehold_outbox_id_seq', ${(TWO_53 - 5n).toString()}::bigint)`;
      const sent: { id: string; n: number }[] = [];
      for (let n = 0; n < 12; n++) {
        const res = await call(deps, 'POST', `/tenants/${tenant}/outbox`, { body: { key: `k${n}`, payload: { n } } });
        expect(res.status).toBe(201);
        // On the wire a JSON string, never a number.
        expect(res.raw.body).toMatch(/"id":"\d+"/);
        sent.push({ id: res.body.id as string, n });
      }
      const stored = await db.sql<{ id: string; n: number }[]>`select id::text as id, (payload->>'n')::int as n
        from leasehold_outbox where tenant = ${tenant} order by id`;
      expect(stored).toEqual(sent);
      expect(sent.map((s) => BigInt(s.id))).toEqual(Array.from({ length: 12 }, (_, i) => TWO_53 - 4n + BigInt(i)));

      // The status names the oldest exactly.
      const status = await call(deps, 'GET', `/tenants/${tenant}/outbox`);
      expect(status.body.endpoints[0].oldest.id).toBe(sent[0]!.id);

      const p = startProc(db, defaultUnitJobs({ outbox: outboxDelivery({ intervalMs: 50, allow: ['127.0.0.1'] }) as never }));
      try {
        await waitFor('every message delivered', async () => (await undelivered(db.sql, tenant)) === 0, { timeoutMs: 15_000 });
      } finally {
        await p.stop();
      }
      // Each message went out once, under its own id and key, with its own payload.
      const seen = bodies.map((b) => {
        const body = JSON.parse(b.raw) as { id: unknown; payload: { n: number } };
        expect(b.raw).toMatch(/^\{"id":"\d+",/);
        return { id: body.id, n: body.payload.n, key: b.key };
      });
      const expected = sent.map((s) => ({ id: s.id, n: s.n, key: idempotencyKey(tenant, s.id) }));
      const byId = (a: { id: unknown }, b: { id: unknown }) => (BigInt(a.id as string) < BigInt(b.id as string) ? -1 : 1);
      expect(seen.sort(byId)).toEqual(expected);

      // Retention pages on after the exact last id (all delivered just now: none expired yet).
      const chunk = await deleteDeliveredOutbox(db.sql, { days: 1, after: (TWO_53 - 5n).toString(), limit: 100 });
      expect(chunk).toMatchObject({ scanned: 12, last: sent[11]!.id, messages: 0 });
      const next = await deleteDeliveredOutbox(db.sql, { days: 1, after: sent[10]!.id, limit: 100 });
      expect(next).toMatchObject({ scanned: 1, last: sent[11]!.id });
    } finally {
      server.close();
    }
  });
});
