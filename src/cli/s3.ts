// `leasehold s3 put|mb|ls|get`: load test data into S3 and look at it, locally in `leasehold
// dev`'s S3-compatible server (docs/cli.md), with the real @aws-sdk/client-s3.
import { createWriteStream, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadBucketCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';

/** Where the S3 commands go: default `AWS_ENDPOINT_URL_S3`, else the port `leasehold dev` keeps in `.leasehold/s3.json`. */
export interface S3Target {
  endpoint?: string;
}

/** What {@link putFiles} takes. */
export interface PutFiles extends S3Target {
  /** A file (one object) or a directory (one object per file under it, `key` its prefix). */
  file: string;
  bucket: string;
  /** The object key, or a directory's prefix; default the file's name (a directory: none). */
  key?: string;
}

function localEndpoint(): string | undefined {
  try {
    const { port } = JSON.parse(readFileSync(join(process.cwd(), '.leasehold', 's3.json'), 'utf8')) as { port: number };
    return `http://127.0.0.1:${port}`;
  } catch {
    return undefined;
  }
}

function* files(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* files(p);
    else if (e.isFile()) yield p;
  }
}

/** An S3 command could not do its work: its message is the whole of what the command prints. */
export class S3CommandError extends Error {
  override name = 'S3CommandError';
}

// S3's rule for new buckets (general purpose buckets): 3 to 63 characters of lowercase letters,
// digits, dots and hyphens, beginning and ending with a letter or digit.
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** @throws {S3CommandError} a bucket name S3 refuses for a new bucket. */
function checkBucketName(bucket: string): void {
  if (!BUCKET_NAME.test(bucket)) {
    throw new S3CommandError(
      `bucket names are 3 to 63 characters of lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit (got "${bucket}")`,
    );
  }
}

/**
 * Run `work` with a client of the target's S3, destroyed after; an error becomes one line: S3
 * unreachable (with the hint that `leasehold dev` serves the local one), else `doing()`, the
 * error's code or name, and its message (no stack).
 */
async function withS3<T>(target: S3Target, doing: () => string, work: (client: S3Client) => Promise<T>): Promise<T> {
  const endpoint = target.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? localEndpoint();
  const local = endpoint !== undefined && /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(endpoint);
  const client = new S3Client({
    region: process.env.AWS_REGION ?? 'us-east-1',
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    // leasehold dev's server knows the local stack's key pair.
    ...(local && !process.env.AWS_ACCESS_KEY_ID ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
  });
  try {
    return await work(client);
  } catch (e) {
    if (e instanceof S3CommandError) throw e;
    const err = e as Error & { code?: string };
    if (err.code === 'ECONNREFUSED' || (err as { errors?: { code?: string }[] }).errors?.some((x) => x.code === 'ECONNREFUSED')) {
      throw new S3CommandError(
        `cannot reach S3 at ${endpoint ?? 'AWS'} (is leasehold dev running? it serves the local S3; or pass --endpoint)`,
      );
    }
    throw new S3CommandError(`${doing()}: ${err.code ?? err.name}: ${err.message}`);
  } finally {
    client.destroy();
  }
}

/** The files to upload with their keys. @throws {S3CommandError} the file does not exist or cannot be read. */
function targetsOf(p: PutFiles): { targets: { f: string; key: string }[]; at: string } {
  let isDirectory: boolean;
  try {
    isDirectory = statSync(p.file).isDirectory();
  } catch (e) {
    const code = (e as { code?: string }).code;
    throw new S3CommandError(
      code === 'ENOENT' ? `${p.file}: no such file or directory` : `${p.file}: cannot be read (${code ?? (e as Error).message})`,
    );
  }
  // A directory's files go under KEY as a folder: `KEY/` (a KEY without its `/` made `KEYfile`).
  const under = p.key === undefined || p.key === '' || p.key.endsWith('/') ? (p.key ?? '') : `${p.key}/`;
  if (!isDirectory) return { targets: [{ f: p.file, key: p.key ?? basename(p.file) }], at: p.key ?? basename(p.file) };
  return {
    targets: [...files(p.file)].map((f) => ({ f, key: `${under}${relative(p.file, f).split('\\').join('/')}` })),
    at: under,
  };
}

/**
 * Upload the file(s); creates the bucket when it does not exist. Answers how many objects it
 * wrote and where: the object's key, or the prefix (`KEY/`) a directory's files went under.
 * @throws {S3CommandError} a bucket name S3 refuses, a file that does not exist or cannot be read
 *   (checked first, naming the file), S3 that cannot be reached or refuses a request (its
 *   error's name and message, no stack).
 */
export async function putFiles(p: PutFiles): Promise<{ count: number; at: string }> {
  checkBucketName(p.bucket);
  const { targets, at } = targetsOf(p);
  let doing = `s3 put s3://${p.bucket}`;
  return withS3(
    p,
    () => doing,
    async (client) => {
      await client
        .send(new HeadBucketCommand({ Bucket: p.bucket }))
        .catch(() => client.send(new CreateBucketCommand({ Bucket: p.bucket })));
      for (const t of targets) {
        doing = `s3 put ${t.f} to s3://${p.bucket}/${t.key}`;
        let body: Buffer;
        try {
          body = readFileSync(t.f);
        } catch (e) {
          throw new S3CommandError(`${t.f}: cannot be read (${(e as { code?: string }).code ?? (e as Error).message})`);
        }
        await client.send(new PutObjectCommand({ Bucket: p.bucket, Key: t.key, Body: body }));
      }
      return { count: targets.length, at };
    },
  );
}

/**
 * Make `bucket`; answers false when it existed already (as S3's own `mb` would fail, this does not).
 * @throws {S3CommandError} a name S3 refuses, S3 unreachable or refusing.
 */
export async function makeBucket(bucket: string, target: S3Target): Promise<boolean> {
  checkBucketName(bucket);
  return withS3(
    target,
    () => `s3 mb s3://${bucket}`,
    async (client) => {
      const exists = await client.send(new HeadBucketCommand({ Bucket: bucket })).then(
        () => true,
        () => false,
      );
      if (!exists) await client.send(new CreateBucketCommand({ Bucket: bucket }));
      return !exists;
    },
  );
}

/** One object of {@link listObjects}: key, size in bytes, last modified (ISO). */
export interface S3Entry {
  key: string;
  size: number;
  lastModified: string;
}

/**
 * The objects under `prefix` (all of the bucket when empty) in the order S3 lists them, page by
 * page, at most `limit`; or, without a bucket, the bucket names.
 * @throws {S3CommandError} S3 unreachable or refusing (a missing bucket: `NoSuchBucket`).
 */
export async function listObjects(
  where: { bucket?: string; prefix?: string; limit?: number },
  target: S3Target,
  each: (line: S3Entry | string) => void,
): Promise<number> {
  const { bucket, prefix = '', limit = Infinity } = where;
  return withS3(
    target,
    () => `s3 ls s3://${bucket ?? ''}${bucket ? `/${prefix}` : ''}`,
    async (client) => {
      if (bucket === undefined) {
        const buckets = (await client.send(new ListBucketsCommand({}))).Buckets ?? [];
        for (const b of buckets) each(b.Name ?? '');
        return buckets.length;
      }
      let n = 0;
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix || undefined, ContinuationToken: token }),
        );
        for (const o of page.Contents ?? []) {
          if (n >= limit) return n;
          each({ key: o.Key ?? '', size: o.Size ?? 0, lastModified: o.LastModified?.toISOString() ?? '' });
          n++;
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return n;
    },
  );
}

/**
 * Write the object `bucket`/`key` to `out` (a file, or stdout when undefined or `-`); answers
 * its size in bytes.
 * @throws {S3CommandError} S3 unreachable or refusing (a missing key: `NoSuchKey`), or `out` not writable.
 */
export async function getObject(bucket: string, key: string, out: string | undefined, target: S3Target): Promise<number> {
  return withS3(
    target,
    () => `s3 get s3://${bucket}/${key}`,
    async (client) => {
      const r = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      const body = r.Body as Readable;
      let size = 0;
      body.on('data', (chunk: Buffer) => (size += chunk.length));
      if (out === undefined || out === '-') {
        await pipeline(body, process.stdout, { end: false });
      } else {
        try {
          await pipeline(body, createWriteStream(out));
        } catch (e) {
          throw new S3CommandError(`${out}: cannot be written (${(e as { code?: string }).code ?? (e as Error).message})`);
        }
      }
      return size;
    },
  );
}

/**
 * `s3://bucket/rest` into its bucket and the rest (a key or a prefix, '' when none).
 * @throws {S3CommandError} not an s3:// URL with a bucket.
 */
export function parseS3Url(url: string, what: string): { bucket: string; rest: string } {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(url.trim());
  if (!m) throw new S3CommandError(`${what} takes s3://BUCKET/KEY or s3://BUCKET/PREFIX, got "${url}"`);
  return { bucket: m[1], rest: m[2] ?? '' };
}
