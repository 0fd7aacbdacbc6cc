// Results to S3 (docs/design.md, "Sources and results"): when a batch that names a results
// target finishes, its items are written as JSON Lines parts under
// `{prefix}{batchId}/succeeded/` (items done) and `{prefix}{batchId}/failed/` (every other
// item), one line per item `{ key, state, attempts, output | error }`, then `manifest.json` with
// the counts and the parts, last. Items are read from PostgreSQL in key order, a page at a time,
// and each part is held in memory only until it is uploaded (`@aws-sdk/lib-storage`), so memory
// is bounded by the part size however many items there are. Part names follow from the key
// order and the part size alone, so a write retried after a crash overwrites the same objects
// and never duplicates a line; a reader trusts a manifest, which exists only once every part did.
// A writer that died mid-upload leaves an incomplete multipart upload behind (S3 bills its parts
// until it is aborted): a write first aborts those under its batch's folder; a bucket lifecycle
// rule (docs/deploy.md) aborts whatever else is left.
import type { S3Client } from '@aws-sdk/client-s3';
import type { Context } from '@opentelemetry/api';
import type { Sql } from '../store/index.js';
import { parseTraceparent, tracing, type Tracing } from '../tracing.js';
import { listedKey, retrySlowDown, s3Fault } from './s3.js';
import * as q from './sql/results.js';
import { RESULTS_MAX_TRIES } from './sql/results.js';
import type { ItemResult } from './types.js';

/** Settings of {@link writeResults}. */
export interface ResultsSettings {
  /** Most lines of one part. Default 100,000. */
  partItems?: number;
  /** A part is closed once it holds this many bytes (one line may take it past). Default 16 MiB. */
  partBytes?: number;
  /** Items read per statement. Default 2,000. */
  pageItems?: number;
  /** A writer that began longer ago than this is taken to have died; another writes, ms. Default 300,000. */
  leaseMs?: number;
}

export { RESULTS_MAX_TRIES };

/** Defaults of {@link ResultsSettings}. */
export const RESULTS_DEFAULTS = {
  partItems: 100_000,
  partBytes: 16 * 1024 * 1024,
  pageItems: 2_000,
  leaseMs: 300_000,
} as const;

/** One part as the manifest lists it. */
export interface ResultsPart {
  key: string;
  items: number;
  bytes: number;
}

/** The manifest (`manifest.json`), written after every part. */
export interface ResultsManifest {
  batchId: string;
  tenant: string;
  datasource: string;
  job: string;
  status: string;
  total: number;
  finishedAt: string;
  counts: { succeeded: number; failed: number };
  parts: { succeeded: ResultsPart[]; failed: ResultsPart[] };
}

/** The part key of group `group`, number `n`: deterministic (`part-00000.jsonl`, …). */
export function partKey(prefix: string, batchId: string, group: 'succeeded' | 'failed', n: number): string {
  return `${prefix}${batchId}/${group}/part-${String(n).padStart(5, '0')}.jsonl`;
}

/** The line of one item: key, state, attempts, and its output (done) or error (otherwise). */
function line(i: ItemResult): string {
  const base = `{"key":${JSON.stringify(i.key)},"state":"${i.state}","attempts":${i.attempts}`;
  return i.state === 'done'
    ? `${base},"output":${JSON.stringify(i.output ?? null)}}\n`
    : `${base},"error":${JSON.stringify(i.error)}}\n`;
}

class PartWriter {
  readonly parts: ResultsPart[] = [];
  private lines: string[] = [];
  private bytes = 0;
  count = 0;

  constructor(
    private readonly client: S3Client,
    private readonly bucket: string,
    private readonly keyOf: (n: number) => string,
    private readonly s: Required<ResultsSettings>,
    private readonly signal: AbortSignal | undefined,
  ) {}

  async add(l: string): Promise<void> {
    this.lines.push(l);
    this.bytes += Buffer.byteLength(l);
    this.count++;
    if (this.lines.length >= this.s.partItems || this.bytes >= this.s.partBytes) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.lines.length === 0) return;
    const key = this.keyOf(this.parts.length);
    const body = Buffer.from(this.lines.join(''));
    const part = { key, items: this.lines.length, bytes: body.length };
    this.lines = [];
    this.bytes = 0;
    // The SDK loads on first use, not with the library.
    const { Upload } = await import('@aws-sdk/lib-storage');
    this.signal?.throwIfAborted();
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key: key, Body: body, ContentType: 'application/x-ndjson' },
      queueSize: 2,
    });
    const abort = () => void upload.abort().catch(() => {});
    this.signal?.addEventListener('abort', abort, { once: true });
    try {
      await upload.done();
    } finally {
      this.signal?.removeEventListener('abort', abort);
    }
    this.parts.push(part);
  }
}

/**
 * Write the results of finished batch `batchId` when it names a target, has no manifest yet and
 * has tries left ({@link RESULTS_MAX_TRIES} writes begun), unless another writer began less than
 * `leaseMs` ago. Answers the manifest's location (`s3://bucket/key`), or undefined when there was
 * nothing to write here. A write that fails records why (`resultsError`) and ends its claim, so
 * the scheduler's next pass tries again while tries are left; after the last one the batch is no
 * longer due. The batch's Batch Finished event never waits for its results: its end wrote it.
 * `signal` cuts the write short (a worker at its deadline): that try fails, the next writes it.
 * @throws S3's or the store's errors; the signal's reason once it aborts.
 */
export async function writeResults(
  sql: Sql,
  client: S3Client,
  batchId: string,
  settings: ResultsSettings & { signal?: AbortSignal } = {},
): Promise<string | undefined> {
  const s: Required<ResultsSettings> = { ...RESULTS_DEFAULTS, ...settings };
  const job = await q.beginResults(sql, batchId, s.leaseMs);
  if (!job) return undefined;
  try {
    const t = await tracing();
    const write = (pages?: PageSpans) => writeAll(sql, client, job, s, settings.signal, pages);
    return await (t ? tracedWrite(t, job, write) : write());
  } catch (e) {
    const why = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    // Best effort: should the store fail too, the claim lapses after leaseMs all the same.
    await q.resultsFailed(sql, batchId, `try ${job.results_tries} of ${RESULTS_MAX_TRIES}: ${why}`).catch(() => {});
    throw e;
  }
}

/**
 * `write` in a span `write results` of the batch's trace (a child of its start's span; linked to
 * the active span, the run's or the scheduler service's, when there is one: docs/design.md, "Traces").
 */
async function tracedWrite<T>(t: Tracing, job: q.ResultsJob, write: (pages: PageSpans) => Promise<T>): Promise<T> {
  const parent = parseTraceparent(job.trace_context);
  const active = t.activeSpanContext();
  const span = t.start(
    'write results',
    'internal',
    {
      'leasehold.batch.id': job.id,
      'leasehold.tenant': job.tenant,
      'leasehold.results.try': job.results_tries,
      'aws.s3.bucket': job.results.s3.bucket,
    },
    parent,
    parent && active ? [{ context: active, attributes: { 'leasehold.link': 'writer' } }] : undefined,
  );
  try {
    const pages = new PageSpans(t, t.contextOf(span), job.id);
    return await t.within(span, () => write(pages));
  } catch (e) {
    t.fail(span, e);
    throw e;
  } finally {
    span.end();
  }
}

/** The spans of the results page reads of one write: PostgreSQL client spans (OpenTelemetry database conventions), children of the write's. */
class PageSpans {
  private readonly attributes;

  constructor(
    private readonly t: Tracing,
    private readonly parent: Context,
    batchId: string,
  ) {
    this.attributes = {
      'db.system.name': 'postgresql',
      'db.operation.name': 'SELECT',
      'db.collection.name': 'leasehold_items',
      'leasehold.batch.id': batchId,
    };
  }

  /** `read` in a span `SELECT leasehold_items` with the number of rows it answered. */
  async read<T extends unknown[]>(read: () => Promise<T>): Promise<T> {
    const span = this.t.startIn('SELECT leasehold_items', 'client', this.attributes, this.parent);
    try {
      const rows = await read();
      span.setAttribute('db.response.returned_rows', rows.length);
      return rows;
    } catch (e) {
      this.t.fail(span, e);
      throw e;
    } finally {
      span.end();
    }
  }
}

async function writeAll(
  sql: Sql,
  client: S3Client,
  job: q.ResultsJob,
  s: Required<ResultsSettings>,
  signal: AbortSignal | undefined,
  pages: PageSpans | undefined,
): Promise<string> {
  const batchId = job.id;
  const { bucket, prefix } = job.results.s3;
  await abortUploads(client, bucket, `${prefix}${batchId}/`, signal);
  const groups = {
    succeeded: new PartWriter(client, bucket, (n) => partKey(prefix, batchId, 'succeeded', n), s, signal),
    failed: new PartWriter(client, bucket, (n) => partKey(prefix, batchId, 'failed', n), s, signal),
  };
  let after: string | null = null;
  for (;;) {
    signal?.throwIfAborted();
    const read = () => q.resultsPage(sql, batchId, after, s.pageItems);
    const page = await (pages ? pages.read(read) : read());
    for (const item of page) await groups[item.state === 'done' ? 'succeeded' : 'failed'].add(line(item));
    if (page.length < s.pageItems) break;
    after = page[page.length - 1].key;
  }
  await groups.succeeded.flush();
  await groups.failed.flush();
  const manifest: ResultsManifest = {
    batchId,
    tenant: job.tenant,
    datasource: job.datasource,
    job: job.job,
    status: job.status,
    total: job.total,
    finishedAt: new Date(job.finished_at).toISOString(),
    counts: { succeeded: groups.succeeded.count, failed: groups.failed.count },
    parts: { succeeded: groups.succeeded.parts, failed: groups.failed.parts },
  };
  const key = `${prefix}${batchId}/manifest.json`;
  const { PutObjectCommand } = await import('@aws-sdk/client-s3');
  const put = new PutObjectCommand({
    Bucket: bucket,
    Key: key,
    Body: JSON.stringify(manifest, null, 2),
    ContentType: 'application/json',
  });
  await retrySlowDown((abortSignal) => client.send(put, { abortSignal }), { signal });
  const location = `s3://${bucket}/${key}`;
  await q.recordManifest(sql, batchId, location);
  return location;
}

/**
 * Abort the incomplete multipart uploads under `folder` (a batch's own results folder): those of
 * an earlier writer of the batch that died mid-upload. Answers how many were aborted. An upload
 * gone meanwhile (`NoSuchUpload`) is no error; a listing refused (403) ends it quietly, and the
 * bucket's lifecycle rule (docs/deploy.md, "Results buckets") aborts them instead.
 * @throws S3's errors (the write's try fails, the next one aborts them again).
 */
export async function abortUploads(client: S3Client, bucket: string, folder: string, signal?: AbortSignal): Promise<number> {
  const { AbortMultipartUploadCommand, ListMultipartUploadsCommand } = await import('@aws-sdk/client-s3');
  let aborted = 0;
  let KeyMarker: string | undefined;
  let UploadIdMarker: string | undefined;
  for (;;) {
    const list = new ListMultipartUploadsCommand({
      Bucket: bucket,
      Prefix: folder,
      EncodingType: 'url',
      KeyMarker,
      UploadIdMarker,
    });
    let r;
    try {
      r = await retrySlowDown((abortSignal) => client.send(list, { abortSignal }), { signal });
    } catch (e) {
      // A role without s3:ListBucketMultipartUploads (a deployment's own grants): the write goes
      // on, and the bucket's lifecycle rule aborts what is left.
      if (s3Fault(e).denied) return aborted;
      throw e;
    }
    for (const u of r.Uploads ?? []) {
      if (u.Key === undefined || u.UploadId === undefined) continue;
      const abort = new AbortMultipartUploadCommand({
        Bucket: bucket,
        Key: listedKey(u.Key, r.EncodingType),
        UploadId: u.UploadId,
      });
      try {
        await retrySlowDown((abortSignal) => client.send(abort, { abortSignal }), { signal });
        aborted++;
      } catch (e) {
        if (s3Fault(e).name !== 'NoSuchUpload') throw e;
      }
    }
    if (!r.IsTruncated || r.NextKeyMarker === undefined) return aborted;
    KeyMarker = listedKey(r.NextKeyMarker, r.EncodingType);
    UploadIdMarker = r.NextUploadIdMarker;
  }
}

/**
 * {@link writeResults} right after a run finished its batch; a failure is reported to `onError`
 * and left to the scheduler, never thrown (the batch is finished either way).
 */
export async function writeResultsAfterFinish(
  sql: Sql,
  client: S3Client,
  batchId: string,
  onError: (e: unknown) => void,
  settings?: ResultsSettings & { signal?: AbortSignal },
): Promise<void> {
  try {
    await writeResults(sql, client, batchId, settings);
  } catch (e) {
    onError(e);
  }
}

/** What {@link writeDueResults} did. */
export interface DueResults {
  written: number;
  failed: number;
}

/**
 * The scheduler's pass: write the results of finished batches still due (their writer died, or
 * failed), at most `limit` (default 10) per pass, oldest finished first. A failure is counted
 * and left for the next pass. With `budgetMs`, no write begins after that many ms and a write
 * still going then is cut short (it fails that try; the next pass writes it again), so the
 * pass ends within its function's timeout.
 */
export async function writeDueResults(
  sql: Sql,
  client: S3Client | (() => Promise<S3Client>),
  options: ResultsSettings & { limit?: number; budgetMs?: number; onError?: (batchId: string, e: unknown) => void } = {},
): Promise<DueResults> {
  const t0 = Date.now();
  const leaseMs = options.leaseMs ?? RESULTS_DEFAULTS.leaseMs;
  const ids = await q.dueResults(sql, leaseMs, options.limit ?? 10);
  const out = { written: 0, failed: 0 };
  // The client (and so the SDK) only when something is due.
  const s3 = ids.length === 0 ? undefined : typeof client === 'function' ? await client() : client;
  for (const id of ids) {
    const left = options.budgetMs === undefined ? undefined : options.budgetMs - (Date.now() - t0);
    if (left !== undefined && left <= 0) break;
    try {
      const signal = left === undefined ? undefined : AbortSignal.timeout(left);
      if (await writeResults(sql, s3!, id, { ...options, signal })) out.written++;
    } catch (e) {
      out.failed++;
      options.onError?.(id, e);
    }
  }
  return out;
}
