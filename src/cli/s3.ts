// `leasehold s3 put`: load test data into S3, locally into `leasehold dev`'s S3-compatible server
// (docs/cli.md), with the real @aws-sdk/client-s3.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { CreateBucketCommand, HeadBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';

/** What {@link putFiles} takes. */
export interface PutFiles {
  /** A file (one object) or a directory (one object per file under it, `key` its prefix). */
  file: string;
  bucket: string;
  /** The object key, or a directory's prefix; default the file's name (a directory: none). */
  key?: string;
  /** Default `AWS_ENDPOINT_URL_S3`, else the port `leasehold dev` keeps in `.leasehold/s3.json`. */
  endpoint?: string;
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

/** `leasehold s3 put` could not upload: its message is the whole of what the command prints. */
export class S3PutError extends Error {
  override name = 'S3PutError';
}

// S3's rule for new buckets (general purpose buckets): 3 to 63 characters of lowercase letters,
// digits, dots and hyphens, beginning and ending with a letter or digit.
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * Upload the file(s); creates the bucket when it does not exist. Answers the objects written.
 * @throws {S3PutError} a bucket name S3 refuses, a file that cannot be read, S3 that cannot be
 *   reached or refuses a request (its error's name and message, no stack).
 */
export async function putFiles(p: PutFiles): Promise<number> {
  if (!BUCKET_NAME.test(p.bucket)) {
    throw new S3PutError(
      `bucket names are 3 to 63 characters of lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit (got "${p.bucket}")`,
    );
  }
  const endpoint = p.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? localEndpoint();
  const local = endpoint !== undefined && /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(endpoint);
  const client = new S3Client({
    region: process.env.AWS_REGION ?? 'us-east-1',
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    // leasehold dev's server knows the local stack's key pair.
    ...(local && !process.env.AWS_ACCESS_KEY_ID ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
  });
  let doing = `s3://${p.bucket}`;
  try {
    await client
      .send(new HeadBucketCommand({ Bucket: p.bucket }))
      .catch(() => client.send(new CreateBucketCommand({ Bucket: p.bucket })));
    const targets = statSync(p.file).isDirectory()
      ? [...files(p.file)].map((f) => ({ f, key: `${p.key ?? ''}${relative(p.file, f).split('\\').join('/')}` }))
      : [{ f: p.file, key: p.key ?? basename(p.file) }];
    for (const t of targets) {
      doing = `${t.f} to s3://${p.bucket}/${t.key}`;
      await client.send(new PutObjectCommand({ Bucket: p.bucket, Key: t.key, Body: readFileSync(t.f) }));
    }
    return targets.length;
  } catch (e) {
    const err = e as Error & { code?: string };
    if (err.code === 'ECONNREFUSED' || (err as { errors?: { code?: string }[] }).errors?.some((x) => x.code === 'ECONNREFUSED')) {
      throw new S3PutError(
        `cannot reach S3 at ${endpoint ?? 'AWS'} (is leasehold dev running? it serves the local S3; or pass --endpoint)`,
      );
    }
    throw new S3PutError(`s3 put ${doing}: ${err.code ?? err.name}: ${err.message}`);
  } finally {
    client.destroy();
  }
}
