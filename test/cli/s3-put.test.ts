// `leasehold s3 put` (docs/cli.md) against the local S3 server, read back with the real SDK: a
// file becomes one object, a directory one object per file under its prefix; a bucket name S3
// refuses, a missing file and an S3 that does not answer are one line each and exit 1, with no
// stack and no SDK warning about Node.js versions.
import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalS3, type LocalS3Server } from '../../src/local/s3.js';

const BIN = resolve(import.meta.dirname, '../../bin/leasehold.js');
const run = promisify(execFile);

let dir: string;
let server: LocalS3Server;
let client: S3Client;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'leasehold-s3-put-'));
  server = await startLocalS3({ directory: join(dir, 's3') });
  client = new S3Client({
    region: 'us-east-1',
    endpoint: server.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
});
afterAll(async () => {
  client?.destroy();
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

/** The command, as a user runs it: no variable that would silence the SDK's warnings. */
async function leasehold(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env };
  delete env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED;
  delete env.AWS_ACCESS_KEY_ID;
  delete env.AWS_SECRET_ACCESS_KEY;
  return run(process.execPath, [BIN, ...args], { env, cwd: dir }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

async function text(bucket: string, key: string): Promise<string> {
  const r = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return r.Body!.transformToString();
}

describe('leasehold s3 put', () => {
  it('uploads a file as one object and a directory as one object per file under the prefix, creating the bucket', async () => {
    await writeFile(join(dir, 'list.jsonl'), '{"n":1}\n{"n":2}\n');
    const one = await leasehold(['s3', 'put', 'list.jsonl', 'inputs', 'in/list.jsonl', '--endpoint', server.endpoint]);
    expect(one).toMatchObject({ code: 0, stdout: 'uploaded 1 object to s3://inputs/in/list.jsonl\n', stderr: '' });
    expect(await text('inputs', 'in/list.jsonl')).toBe('{"n":1}\n{"n":2}\n');

    await mkdir(join(dir, 'tree', 'sub'), { recursive: true });
    await writeFile(join(dir, 'tree', 'a.txt'), 'a');
    await writeFile(join(dir, 'tree', 'sub', 'b.txt'), 'b');
    const many = await leasehold(['s3', 'put', 'tree', 'inputs', 'files/', '--endpoint', server.endpoint]);
    expect(many).toMatchObject({ code: 0, stdout: 'uploaded 2 objects to s3://inputs/files/\n', stderr: '' });
    const listed = await client.send(new ListObjectsV2Command({ Bucket: 'inputs', Prefix: 'files/' }));
    expect(listed.Contents?.map((o) => o.Key)).toEqual(['files/a.txt', 'files/sub/b.txt']);
    expect(await text('inputs', 'files/sub/b.txt')).toBe('b');
    // A directory's prefix without its `/` gets one (it made `morea.txt`), and a file put with no
    // key is named by its own name.
    const noSlash = await leasehold(['s3', 'put', 'tree', 'inputs', 'more', '--endpoint', server.endpoint]);
    expect(noSlash).toMatchObject({ code: 0, stdout: 'uploaded 2 objects to s3://inputs/more/\n' });
    const more = await client.send(new ListObjectsV2Command({ Bucket: 'inputs', Prefix: 'more' }));
    expect(more.Contents?.map((o) => o.Key)).toEqual(['more/a.txt', 'more/sub/b.txt']);
    const named = await leasehold(['s3', 'put', 'list.jsonl', 'inputs', '--endpoint', server.endpoint]);
    expect(named).toMatchObject({ code: 0, stdout: 'uploaded 1 object to s3://inputs/list.jsonl\n' });
  });

  it('refuses a bucket name S3 refuses, a missing file and an S3 that does not answer: one line each, exit 1', async () => {
    const short = await leasehold(['s3', 'put', 'list.jsonl', 'in', '--endpoint', server.endpoint]);
    expect(short.code).toBe(1);
    expect(short.stderr).toBe(
      'leasehold: bucket names are 3 to 63 characters of lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit (got "in")\n',
    );
    const upper = await leasehold(['s3', 'put', 'list.jsonl', 'Inputs', '--endpoint', server.endpoint]);
    expect(upper).toMatchObject({ code: 1, stderr: expect.stringContaining('(got "Inputs")') });

    const missing = await leasehold(['s3', 'put', 'nothing-here.jsonl', 'inputs', '--endpoint', server.endpoint]);
    expect(missing.code).toBe(1);
    // The file is named, once, and not the bucket, which is not the problem.
    expect(missing.stderr).toBe('leasehold: nothing-here.jsonl: no such file or directory\n');

    const down = await leasehold(['s3', 'put', 'list.jsonl', 'inputs', '--endpoint', 'http://127.0.0.1:9']);
    expect(down.code).toBe(1);
    expect(down.stderr).toBe(
      'leasehold: cannot reach S3 at http://127.0.0.1:9 (is leasehold dev running? it serves the local S3; or pass --endpoint)\n',
    );
  });
});

describe('leasehold s3 mb, ls and get', () => {
  it('makes a bucket, lists buckets and objects under a prefix, and writes an object to stdout or a file', async () => {
    const made = await leasehold(['s3', 'mb', 's3://made-here', '--endpoint', server.endpoint]);
    expect(made).toMatchObject({ code: 0, stdout: 'made bucket s3://made-here\n', stderr: '' });
    const again = await leasehold(['s3', 'mb', 'made-here', '--endpoint', server.endpoint]);
    expect(again).toMatchObject({ code: 0, stdout: 'already there: bucket s3://made-here\n' });
    await writeFile(join(dir, 'one.jsonl'), '{"n":1}\n');
    await leasehold(['s3', 'put', 'one.jsonl', 'made-here', 'in/one.jsonl', '--endpoint', server.endpoint]);
    await leasehold(['s3', 'put', 'one.jsonl', 'made-here', 'other/two.jsonl', '--endpoint', server.endpoint]);

    const buckets = await leasehold(['s3', 'ls', '--endpoint', server.endpoint]);
    expect(buckets.stdout.split('\n')).toContain('made-here');
    const listed = await leasehold(['s3', 'ls', 's3://made-here/in/', '--endpoint', server.endpoint]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^\d{4}-\d\d-\d\dT\S+ +8 {2}in\/one\.jsonl\n$/);

    const none = await leasehold(['s3', 'ls', 's3://made-here/nothing/', '--endpoint', server.endpoint]);
    expect(none).toMatchObject({ code: 0, stdout: '', stderr: 'no objects in s3://made-here/nothing/\n' });

    const out = await leasehold(['s3', 'get', 's3://made-here/in/one.jsonl', '--endpoint', server.endpoint]);
    expect(out).toMatchObject({ code: 0, stdout: '{"n":1}\n', stderr: '' });
    const toFile = await leasehold(['s3', 'get', 's3://made-here/other/two.jsonl', 'copy.jsonl', '--endpoint', server.endpoint]);
    expect(toFile).toMatchObject({ code: 0, stderr: 'wrote 8 bytes of s3://made-here/other/two.jsonl to copy.jsonl\n' });
    expect(await readFile(join(dir, 'copy.jsonl'), 'utf8')).toBe('{"n":1}\n');

    const missing = await leasehold(['s3', 'get', 's3://made-here/nothing', '--endpoint', server.endpoint]);
    expect(missing).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/^leasehold: s3 get s3:\/\/made-here\/nothing: NoSuchKey: .*\n$/),
    });
  }, 120_000);
});
