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

/** Upload the file(s); creates the bucket when it does not exist. Answers the objects written. */
export async function putFiles(p: PutFiles): Promise<number> {
  const endpoint = p.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? localEndpoint();
  const local = endpoint !== undefined && /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(endpoint);
  const client = new S3Client({
    region: process.env.AWS_REGION ?? 'us-east-1',
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    // leasehold dev's server knows the local stack's key pair.
    ...(local && !process.env.AWS_ACCESS_KEY_ID ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
  });
  try {
    await client
      .send(new HeadBucketCommand({ Bucket: p.bucket }))
      .catch(() => client.send(new CreateBucketCommand({ Bucket: p.bucket })));
    const targets = statSync(p.file).isDirectory()
      ? [...files(p.file)].map((f) => ({ f, key: `${p.key ?? ''}${relative(p.file, f).split('\\').join('/')}` }))
      : [{ f: p.file, key: p.key ?? basename(p.file) }];
    for (const t of targets) await client.send(new PutObjectCommand({ Bucket: p.bucket, Key: t.key, Body: readFileSync(t.f) }));
    return targets.length;
  } finally {
    client.destroy();
  }
}
