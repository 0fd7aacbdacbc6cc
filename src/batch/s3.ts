// The S3 client batches read sources with and write results with (docs/design.md, "Sources and
// results"). One client per container, from the environment: region, credentials and, locally,
// `AWS_ENDPOINT_URL_S3` (the SDK reads it itself), with path-style addressing then, since a local
// S3-compatible server answers on one host name. `@aws-sdk/client-s3` is loaded on first use,
// never by importing the library (docs/design.md, "Cold starts and code splitting").
import type { S3Client } from '@aws-sdk/client-s3';

let shared: Promise<S3Client> | undefined;

/**
 * The container's S3 client, created (and the SDK loaded) on first use: `AWS_REGION` (default
 * `us-east-1`), the SDK's default credentials, and with `AWS_ENDPOINT_URL_S3` set, that endpoint
 * with path-style addressing (`http://127.0.0.1:PORT/bucket/key`).
 */
export function defaultS3Client(): Promise<S3Client> {
  shared ??= import('@aws-sdk/client-s3').then(
    ({ S3Client }) =>
      new S3Client({
        region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
        forcePathStyle: Boolean(process.env.AWS_ENDPOINT_URL_S3),
      }),
  );
  return shared;
}

/** The client `option` gives, else the container's ({@link defaultS3Client}). */
export async function s3Client(option?: () => S3Client): Promise<S3Client> {
  return option ? option() : defaultS3Client();
}

/** What an S3 error says, as the source and results code needs it. */
export interface S3Fault {
  /** HTTP status, when the service answered. */
  status: number | undefined;
  /** The error's name (`NoSuchKey`, `NotFound`, `AccessDenied`, `InvalidAccessKeyId`, …). */
  name: string;
  /** 403: access denied, a refused signature or an unknown access key. */
  denied: boolean;
  /** 404: no such bucket or key. */
  missing: boolean;
}

/** Classify an error thrown by an S3 client call. */
export function s3Fault(e: unknown): S3Fault {
  const err = e as { name?: unknown; $metadata?: { httpStatusCode?: number } } | null;
  const status = err?.$metadata?.httpStatusCode;
  const name = typeof err?.name === 'string' ? err.name : 'Error';
  return {
    status,
    name,
    denied: status === 403 || name === 'AccessDenied' || name === 'InvalidAccessKeyId' || name === 'SignatureDoesNotMatch',
    missing: status === 404 || name === 'NoSuchKey' || name === 'NoSuchBucket' || name === 'NotFound',
  };
}
