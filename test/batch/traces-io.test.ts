// Spans of a batch's I/O (docs/design.md, "Traces"; issue 41): with the SDK's in-memory exporter,
// a batch read from an S3 source and writing its results makes a `read source page` client span
// per page read (a child of its run's span, with the bucket and key), and one `write results`
// span in the batch's trace whose results page reads are PostgreSQL client spans with the
// database conventions' attributes. Real S3 calls against the local S3 server (s3rver).
import { trace, SpanKind } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getBatch, startBatch } from '../../src/batch/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { runUntilEnd } from '../support/runners.js';
import { localS3, type LocalS3 } from '../support/s3.js';

const db = useTestDatabase();
const exporter = new InMemorySpanExporter();
let s3: LocalS3;

beforeAll(async () => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  s3 = await localS3();
  for (const b of ['traces-in', 'traces-out']) await s3.createBucket(b);
}, 60_000);
afterAll(async () => {
  trace.disable();
  await s3?.close();
});

const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

describe('spans of source pages and results writes', () => {
  it('source pages are children of the run; the results write is in the batch trace, its page reads PostgreSQL spans', async () => {
    const body = Array.from({ length: 60 }, (_, i) => JSON.stringify({ i })).join('\n');
    await s3.put('traces-in', 'lines.jsonl', body);
    const { batch } = await startBatch(
      {
        sql: db.sql,
        jobs: { expand: () => Promise.reject(new Error('never expanded')), parseParams: async (_j, p) => ({ params: p }) },
        config: {},
        s3: () => s3.client,
      },
      {
        tenant: 'acme',
        datasource: 'traced-io',
        job: 'echo',
        params: {},
        source: { s3: { bucket: 'traces-in', key: 'lines.jsonl', format: 'jsonl' } },
        results: { s3: { bucket: 'traces-out', prefix: 'r/' } },
      },
    );
    await runUntilEnd(db.sql, batch.id, () => ({ work: async (item) => ({ seen: item.input }) }), {
      runner: { parallel: 4, beatMs: 200, staleMs: 2_000, backoffMs: 0, s3: () => s3.client, sourceRangeBytes: 256 },
      watchMs: 50,
      until: (b) => b.status !== 'open' && (b.resultsManifest !== null || b.resultsError !== null),
    });
    const ended = (await getBatch(db.sql, batch.id))!;
    expect(ended).toMatchObject({ status: 'succeeded', resultsError: null });
    expect(ended.resultsManifest).toMatch(/^s3:\/\/traces-out\//);

    const spans = exporter.getFinishedSpans();
    const create = spans.find((s) => s.name === 'create echo')!;
    const runs = new Set(spans.filter((s) => s.name === 'run echo').map(idOf));
    expect(runs.size).toBeGreaterThanOrEqual(1);

    // Ranges of 256 bytes over a 600-byte object: more than one page, each a child of a run.
    const pages = spans.filter((s) => s.name === 'read source page');
    expect(pages.length).toBeGreaterThan(1);
    for (const p of pages) {
      expect(p.kind).toBe(SpanKind.CLIENT);
      expect(runs.has(p.parentSpanContext!.spanId)).toBe(true);
      expect(traceOf(p)).toBe(traceOf(create));
      expect(p.attributes).toMatchObject({
        'rpc.system': 'aws-api',
        'rpc.service': 'S3',
        'aws.s3.bucket': 'traces-in',
        'aws.s3.key': 'lines.jsonl',
        'leasehold.batch.id': batch.id,
      });
    }

    // One write, a child of the batch's start span; its page reads are its children.
    const writes = spans.filter((s) => s.name === 'write results');
    expect(writes).toHaveLength(1);
    const write = writes[0]!;
    expect([traceOf(write), write.parentSpanContext?.spanId]).toEqual([traceOf(create), idOf(create)]);
    expect(write.attributes).toMatchObject({
      'leasehold.batch.id': batch.id,
      'aws.s3.bucket': 'traces-out',
      'leasehold.results.try': 1,
    });
    const reads = spans.filter((s) => s.name === 'SELECT leasehold_items');
    expect(reads.length).toBeGreaterThanOrEqual(1);
    for (const r of reads) {
      expect(r.kind).toBe(SpanKind.CLIENT);
      expect(r.parentSpanContext?.spanId).toBe(idOf(write));
      expect(r.attributes).toMatchObject({
        'db.system.name': 'postgresql',
        'db.operation.name': 'SELECT',
        'db.collection.name': 'leasehold_items',
      });
    }
    expect(reads.reduce((n, r) => n + (r.attributes['db.response.returned_rows'] as number), 0)).toBe(60);
  });
});
