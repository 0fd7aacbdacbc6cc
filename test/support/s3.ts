// A real local S3-compatible server (s3rver, in a child process: src/local/s3.ts) for tests, reached by the real @aws-sdk/client-s3:
// never a mock of the SDK. Each call serves its own data folder on a free port of 127.0.0.1.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { startLocalS3 } from '../../src/local/s3.js';

/** A running local S3 server. */
export interface LocalS3 {
  /** `http://127.0.0.1:PORT`: what `AWS_ENDPOINT_URL_S3` would be. */
  endpoint: string;
  /** A client with s3rver's own credentials (`S3RVER`), path-style. */
  client: S3Client;
  /** A client whose access key the server does not know: every call is refused (403). */
  deniedClient: S3Client;
  createBucket(name: string): Promise<void>;
  put(bucket: string, key: string, body: string | Buffer): Promise<void>;
  close(): Promise<void>;
}

/** Start s3rver on a fresh folder and a free port. */
export async function localS3(): Promise<LocalS3> {
  const directory = mkdtempSync(join(tmpdir(), 'leasehold-s3-'));
  const server = await startLocalS3({ directory });
  const endpoint = server.endpoint;
  const clientWith = (accessKeyId: string) =>
    new S3Client({
      region: 'us-east-1',
      endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId, secretAccessKey: 'S3RVER' },
      maxAttempts: 2,
    });
  const client = clientWith('S3RVER');
  const deniedClient = clientWith('NOT-A-KEY');
  return {
    endpoint,
    client,
    deniedClient,
    async createBucket(name) {
      await client.send(new CreateBucketCommand({ Bucket: name }));
    },
    async put(bucket, key, body) {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    },
    async close() {
      client.destroy();
      deniedClient.destroy();
      await server.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
