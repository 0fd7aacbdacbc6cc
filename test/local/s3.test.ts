// The local S3 server (src/local/s3.ts: s3rver, patched in patches/s3rver+3.7.1.patch so that a
// listing reads a folder once and seeks to its continuation, instead of reading and stat'ing
// the whole folder for every page). Its listings must stay what S3's are: every key once, in
// key order across pages, a put or delete seen by the next listing, with each key's ETag and size.
import {
  AbortMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutBucketVersioningCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalS3 } from '../../src/local/s3.js';
import { localS3, type LocalS3 } from '../support/s3.js';
import { sleep } from '../support/time.js';

let s3: LocalS3;
beforeAll(async () => {
  s3 = await localS3();
  await s3.createBucket('listing');
});
afterAll(() => s3.close());

/** Every key under `prefix`, with size and ETag, listed `maxKeys` at a time; and the calls made. */
async function listAll(prefix: string, maxKeys: number) {
  const keys: { key: string; size: number; etag: string }[] = [];
  let token: string | undefined;
  let calls = 0;
  do {
    const r = await s3.client.send(
      new ListObjectsV2Command({ Bucket: 'listing', Prefix: prefix, MaxKeys: maxKeys, ContinuationToken: token }),
    );
    calls++;
    for (const o of r.Contents ?? []) keys.push({ key: o.Key!, size: o.Size!, etag: o.ETag! });
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
  return { keys, calls };
}

const put = (key: string, body = 'x') => s3.client.send(new PutObjectCommand({ Bucket: 'listing', Key: key, Body: body }));

describe('the local S3 server', () => {
  it('lists a flat prefix of 2,000 keys in key order across pages, each once, with its size and ETag', async () => {
    const keys = Array.from({ length: 2_000 }, (_, i) => `flat/${String(i).padStart(5, '0')}`);
    for (let i = 0; i < keys.length; i += 200) await Promise.all(keys.slice(i, i + 200).map((k) => put(k, k)));
    for (const maxKeys of [7, 1000]) {
      const { keys: listed, calls } = await listAll('flat/', maxKeys);
      expect(listed.map((o) => o.key)).toEqual(keys);
      expect(calls).toBe(Math.ceil(keys.length / maxKeys));
    }
    const { keys: listed } = await listAll('flat/', 1000);
    // Each object's size and MD5 ETag (the body is the key itself: 10 bytes).
    expect(listed[1234]).toEqual({ key: 'flat/01234', size: 10, etag: '"f854f6325c91e42cffd2e0d1c1cb69d7"' });
  }, 60_000);

  it('lists nested keys beside flat ones in key order, resuming inside a sub-folder', async () => {
    const keys = ['mix/a', 'mix/b/1', 'mix/b/2', 'mix/b/3/x', 'mix/c', 'mix/d/1', 'mix/e'];
    for (const k of keys) await put(k);
    for (const maxKeys of [1, 2, 3, 1000]) expect((await listAll('mix/', maxKeys)).keys.map((o) => o.key)).toEqual(keys);
    expect((await listAll('mix/b/', 1)).keys.map((o) => o.key)).toEqual(['mix/b/1', 'mix/b/2', 'mix/b/3/x']);
    // StartAfter inside a name that is also a folder's: `st/a/1` comes after `st/a-x` ('/' > '-').
    for (const k of ['st/a/1', 'st/a-x', 'st/b']) await put(k);
    const after = await s3.client.send(new ListObjectsV2Command({ Bucket: 'listing', Prefix: 'st/', StartAfter: 'st/a-x' }));
    expect(after.Contents!.map((o) => o.Key)).toEqual(['st/a/1', 'st/b']);
  });

  it('shows a put or a delete in the next listing, whether the folder changed a moment or a while ago', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `seen/${String(i).padStart(3, '0')}`);
    for (const k of keys) await put(k);
    const names = async () => (await listAll('seen/', 6)).keys.map((o) => o.key);
    expect(await names()).toEqual(keys);
    // At once after a listing.
    await put('seen/0105');
    await s3.client.send(new DeleteObjectCommand({ Bucket: 'listing', Key: 'seen/003' }));
    const now = [...keys.filter((k) => k !== 'seen/003'), 'seen/0105'].sort();
    expect(await names()).toEqual(now);
    // And once the folder has been still for more than a second (listings reuse what they read).
    await sleep(1_200);
    expect(await names()).toEqual(now);
    expect(await names()).toEqual(now);
    await put('seen/019a');
    await s3.client.send(new DeleteObjectCommand({ Bucket: 'listing', Key: 'seen/000' }));
    expect(await names()).toEqual([...now.filter((k) => k !== 'seen/000'), 'seen/019a'].sort());
    // An object written again shows its new size and ETag.
    await put('seen/005', 'longer body');
    expect((await listAll('seen/', 1000)).keys.find((o) => o.key === 'seen/005')).toMatchObject({ size: 11 });
  }, 30_000);
});

describe('what the local S3 server adds to s3rver', () => {
  it('keeps every version of an object in a versioned bucket and reads each by its VersionId', async () => {
    await s3.createBucket('versioned');
    const plain = await s3.client.send(new PutObjectCommand({ Bucket: 'listing', Key: 'unversioned', Body: 'a' }));
    expect(plain.VersionId).toBeUndefined();
    await s3.client.send(new PutBucketVersioningCommand({ Bucket: 'versioned', VersioningConfiguration: { Status: 'Enabled' } }));
    expect((await s3.client.send(new GetBucketVersioningCommand({ Bucket: 'versioned' }))).Status).toBe('Enabled');
    const v1 = await s3.client.send(new PutObjectCommand({ Bucket: 'versioned', Key: 'dir/obj', Body: 'first body' }));
    const v2 = await s3.client.send(new PutObjectCommand({ Bucket: 'versioned', Key: 'dir/obj', Body: 'second' }));
    expect(v1.VersionId).toMatch(/^[0-9a-f]{24}$/);
    expect(v2.VersionId).not.toBe(v1.VersionId);
    const head = await s3.client.send(new HeadObjectCommand({ Bucket: 'versioned', Key: 'dir/obj' }));
    expect(head.VersionId).toBe(v2.VersionId);
    expect(head.Metadata).toEqual({});
    const old = await s3.client.send(
      new GetObjectCommand({ Bucket: 'versioned', Key: 'dir/obj', VersionId: v1.VersionId, Range: 'bytes=6-9' }),
    );
    expect(old.VersionId).toBe(v1.VersionId);
    expect(await old.Body!.transformToString()).toBe('body');
    const oldHead = await s3.client.send(new HeadObjectCommand({ Bucket: 'versioned', Key: 'dir/obj', VersionId: v1.VersionId }));
    expect(oldHead.ContentLength).toBe(10);
    expect(oldHead.ETag).toBe(v1.ETag);
    const now = await s3.client.send(new GetObjectCommand({ Bucket: 'versioned', Key: 'dir/obj' }));
    expect(await now.Body!.transformToString()).toBe('second');
    // The copies are no objects of the bucket.
    const listed = await s3.client.send(new ListObjectsV2Command({ Bucket: 'versioned' }));
    expect(listed.Contents!.map((o) => o.Key)).toEqual(['dir/obj']);
  });

  it('URL-encodes a listing when asked, and resumes a listing after a key with a CR or LF', async () => {
    const keys = ['enc/a b', 'enc/a+b', 'enc/a\rb', 'enc/a\nb', 'enc/a%2Bb', 'enc/é'];
    for (const k of keys) await put(k, k);
    const sorted = [...keys].sort();
    const listed: string[] = [];
    let token: string | undefined;
    do {
      const r = await s3.client.send(
        new ListObjectsV2Command({
          Bucket: 'listing',
          Prefix: 'enc/',
          MaxKeys: 1,
          EncodingType: 'url',
          ContinuationToken: token,
        }),
      );
      expect(r.EncodingType).toBe('url');
      expect(r.Prefix).toBe('enc/');
      listed.push(...r.Contents!.map((o) => decodeURIComponent(o.Key!.replace(/\+/g, ' '))));
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    expect(listed).toEqual(sorted);
    // Unencoded, the XML answer loses the CR (read back as a LF): what EncodingType=url is for.
    const raw = await s3.client.send(new ListObjectsV2Command({ Bucket: 'listing', Prefix: 'enc/a\r' }));
    expect(raw.Contents!.map((o) => o.Key)).not.toEqual(['enc/a\rb']);
  });

  it('lists the multipart uploads under a prefix and aborts one', async () => {
    const { UploadId: a } = await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'listing', Key: 'up/one' }));
    const { UploadId: b } = await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'listing', Key: 'up/two' }));
    await s3.client.send(new CreateMultipartUploadCommand({ Bucket: 'listing', Key: 'other/three' }));
    const list = async () =>
      (await s3.client.send(new ListMultipartUploadsCommand({ Bucket: 'listing', Prefix: 'up/' }))).Uploads?.map((u) => [
        u.Key,
        u.UploadId,
      ]) ?? [];
    expect(await list()).toEqual([
      ['up/one', a],
      ['up/two', b],
    ]);
    await s3.client.send(new AbortMultipartUploadCommand({ Bucket: 'listing', Key: 'up/one', UploadId: a }));
    expect(await list()).toEqual([['up/two', b]]);
    await expect(
      s3.client.send(new AbortMultipartUploadCommand({ Bucket: 'listing', Key: 'up/one', UploadId: a })),
    ).rejects.toMatchObject({ name: 'NoSuchUpload' });
    await expect(
      s3.deniedClient.send(new ListMultipartUploadsCommand({ Bucket: 'listing', Prefix: 'up/' })),
    ).rejects.toMatchObject({ name: 'InvalidAccessKeyId' });
  });

  it('names the process it runs in (the S3 bench reads its CPU time), which is gone once closed', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'leasehold-s3-pid-'));
    const server = await startLocalS3({ directory });
    try {
      expect(server.pid).toBeGreaterThan(0);
      expect(server.pid).not.toBe(process.pid);
      // Signal 0 only asks whether the process exists.
      expect(process.kill(server.pid, 0)).toBe(true);
      await server.close();
      expect(() => process.kill(server.pid, 0)).toThrow(expect.objectContaining({ code: 'ESRCH' }));
    } finally {
      await server.close();
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('lists an unchanged object without reading its stored MD5 again, and a rewritten one at once', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'leasehold-s3-kept-'));
    const server = await startLocalS3({ directory, buckets: ['kept'] });
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: server.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    });
    const md5 = (body: string) => `"${createHash('md5').update(body).digest('hex')}"`;
    const etag = async () =>
      (await client.send(new ListObjectsV2Command({ Bucket: 'kept', Prefix: 'm/' }))).Contents?.map((o) => [
        o.Key,
        o.ETag,
        o.Size,
      ]);
    try {
      await client.send(new PutObjectCommand({ Bucket: 'kept', Key: 'm/k', Body: 'a' }));
      // Listed at once after the write: read, not kept (a rewrite in the same tick could hide).
      expect(await etag()).toEqual([['m/k', md5('a'), 1]]);
      await sleep(1_200);
      expect(await etag()).toEqual([['m/k', md5('a'), 1]]);
      // The stored MD5 changed behind the server's back, the object's file not: the listing shows
      // what it kept (without it, every listing read the MD5 file again).
      writeFileSync(join(directory, 'kept', 'm', 'k._S3rver_object.md5'), '0'.repeat(32));
      expect(await etag()).toEqual([['m/k', md5('a'), 1]]);
      // Written again (same size): its new ETag at once, and still once it is old.
      await client.send(new PutObjectCommand({ Bucket: 'kept', Key: 'm/k', Body: 'b' }));
      expect(await etag()).toEqual([['m/k', md5('b'), 1]]);
      await sleep(1_200);
      expect(await etag()).toEqual([['m/k', md5('b'), 1]]);
      await client.send(new PutObjectCommand({ Bucket: 'kept', Key: 'm/k', Body: 'cc' }));
      expect(await etag()).toEqual([['m/k', md5('cc'), 2]]);
      await client.send(new DeleteObjectCommand({ Bucket: 'kept', Key: 'm/k' }));
      expect(await etag()).toBeUndefined();
    } finally {
      client.destroy();
      await server.close();
      rmSync(directory, { recursive: true, force: true });
    }
  }, 30_000);
});
