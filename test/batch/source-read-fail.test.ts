// A source whose reading fails for good ends its batch (docs/design.md, "Sources and results";
// "Stalled-run give-up"), against a real local S3-compatible server and the real PostgreSQL:
// - a JSON Lines object rewritten shorter than the reader's cursor: S3 answers the next range
//   with 416 InvalidRange (before any ETag compare), which is the object having changed, so the
//   batch ends `failed` at once. s3rver does not answer 416, so a client wrapper answers as S3
//   does once the object was really rewritten to 8 bytes;
// - a reader whose S3 side cannot even be made (a lazily imported chunk that fails to load):
//   each run hands off after its tries, and those handoffs count as stalled runs, so the batch
//   is given up after `maxStalledRuns` with a reason naming the read error, rather than being
//   handed around several times a second for ever.
import { GetObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { startSourceBatch } from '../support/source-batch.js';

const db = useTestDatabase();
let s3: LocalS3;
beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('rf-bucket');
}, 60_000);
afterAll(async () => {
  await s3?.close();
});

const body = Array.from({ length: 4000 }, (_, i) => JSON.stringify({ i, pad: 'x'.repeat(20) })).join('\n') + '\n';

describe('a source that cannot be read any more', () => {
  it('a JSON Lines object rewritten shorter than the cursor (S3 answers 416) ends the batch failed at once', async () => {
    await s3.put('rf-bucket', 'k.jsonl', body);
    const { batch } = await startSourceBatch(db.sql, s3.client, {
      tenant: 'rf',
      datasource: 'ds',
      job: 'echo',
      params: {},
      requestKey: 'shrunk',
      source: { s3: { bucket: 'rf-bucket', key: 'k.jsonl', format: 'jsonl' } },
    });
    let rewritten = false;
    let answered416 = 0;
    // S3 replaces an object at once; s3rver truncates its file, writes the new bytes, then its
    // metadata, so a GET meanwhile may answer the old ETag and length with the new (or no)
    // bytes. The rewrite therefore waits until no GET's body is being read, and GETs wait for it.
    let reading = 0;
    let idle: (() => void) | undefined;
    let rewriting: Promise<void> | undefined;
    const rewrite = async () => {
      let done!: () => void;
      rewriting = new Promise<void>((r) => (done = r));
      while (reading > 0) await new Promise<void>((r) => (idle = r));
      await s3.put('rf-bucket', 'k.jsonl', '{"a":1}\n');
      rewritten = true;
      rewriting = undefined;
      done();
    };
    const real = s3.client;
    const client = new Proxy(real, {
      get(target, prop, recv) {
        if (prop !== 'send') return Reflect.get(target, prop, recv);
        return async (cmd: unknown, ...rest: unknown[]) => {
          const send = () => (target.send as (...a: unknown[]) => Promise<unknown>).call(target, cmd, ...rest);
          if (!(cmd instanceof GetObjectCommand)) return send();
          while (rewriting) await rewriting;
          if (rewritten) {
            const from = Number(/bytes=(\d+)-/.exec(String(cmd.input.Range))?.[1] ?? 0);
            if (from >= 8) {
              answered416++;
              throw new S3ServiceException({
                name: 'InvalidRange',
                $fault: 'client',
                $metadata: { httpStatusCode: 416 },
                message: 'The requested range is not satisfiable',
              });
            }
          }
          // Read until the reader destroys the body (it always does, read to its end or not).
          reading++;
          let open = true;
          const finished = () => {
            if (!open) return;
            open = false;
            if (--reading === 0) idle?.();
          };
          try {
            const out = (await send()) as { Body?: { destroy?: () => void } };
            const body = out.Body;
            if (body?.destroy) {
              const destroy = body.destroy.bind(body);
              body.destroy = () => {
                destroy();
                finished();
              };
            } else finished();
            return out;
          } catch (e) {
            finished();
            throw e;
          }
        };
      },
    });
    const end = await runUntilEnd(
      db.sql,
      batch.id,
      () => ({
        work: async () => {
          if (!rewritten) await (rewriting ?? rewrite());
          return 1;
        },
      }),
      {
        runners: 2,
        runner: {
          parallel: 1,
          beatMs: 200,
          staleMs: 2_000,
          backoffMs: 0,
          moveBackoffMs: 20,
          s3: () => client,
          sourceRangeBytes: 8192,
        },
        timeoutMs: 20_000,
      },
    );
    expect(end.status).toBe('failed');
    // No range is in flight at the rewrite, so the end is the 416's (not the ETag check's).
    expect(end.reason).toMatch(/changed while it was read: it now ends before where reading stopped \(InvalidRange, HTTP 416\)/);
    // Failed at the first 416 (the wrapper's or s3rver's own): no run tried again (a read
    // ahead may have met one too).
    expect(answered416).toBeLessThanOrEqual(2);
    const [row] = await db.sql<{ runs: number }[]>`select runs from leasehold_batches where id = ${batch.id}`;
    expect(row.runs).toBeLessThanOrEqual(2);
  }, 60_000);

  it('a reader whose S3 client cannot be loaded: its handoffs count as stalled, the batch is given up naming the error', async () => {
    await s3.put('rf-bucket', 'a.jsonl', '{"a":1}\n{"a":2}\n');
    const { batch } = await startSourceBatch(db.sql, s3.client, {
      tenant: 'rf',
      datasource: 'ds',
      job: 'echo',
      params: {},
      requestKey: 'unloadable',
      source: { s3: { bucket: 'rf-bucket', key: 'a.jsonl', format: 'jsonl' } },
    });
    let calls = 0;
    const end = await runUntilEnd(db.sql, batch.id, () => ({ work: async () => 1 }), {
      runners: 2,
      runner: {
        beatMs: 200,
        staleMs: 2_000,
        backoffMs: 0,
        moveBackoffMs: 20,
        maxStalledRuns: 3,
        s3: () => {
          calls++;
          throw new Error("Cannot find module './chunk-XYZ.mjs'");
        },
      },
      timeoutMs: 20_000,
    });
    expect(end.status).toBe('failed');
    expect(end.reason).toMatch(/^given up: its last \d+ runs ended without storing any item result/);
    expect(end.reason).toContain("Cannot find module './chunk-XYZ.mjs'");
    const [row] = await db.sql<
      { runs: number; reading: boolean }[]
    >`select runs, reading from leasehold_batches where id = ${batch.id}`;
    // maxStalledRuns 3: given up by the fifth run at the latest (two runners may each join once more).
    expect(row.runs).toBeLessThanOrEqual(6);
    // Each run tried READ_TRIES (4) times before it handed off.
    expect(calls).toBeLessThanOrEqual(4 * row.runs);
    const items = await db.sql<{ error: string }[]>`select error from leasehold_items where batch_id = ${batch.id}`;
    expect(items).toEqual([]);
  }, 60_000);
});
