import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, symlinkSync, writeFileSync, rmSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Runner, batchResults, createBatch, type ItemSource } from '../../src/batch/index.js';
import { checksum, defaultRegistry, defaultJobContext, InvalidParamsError } from '../../src/jobs/index.js';
import { useTestDatabase } from '../support/db-hooks.js';
import { jobItem } from '../support/job-item.js';

const db = useTestDatabase();
let dir: string;
let outside: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-checksum-'));
  outside = mkdtempSync(join(tmpdir(), 'leasehold-outside-'));
  writeFileSync(join(outside, 'secret.txt'), 'outside dir');
  mkdirSync(join(dir, 'a', 'b'), { recursive: true });
  writeFileSync(join(dir, 'empty'), '');
  writeFileSync(join(dir, 'a', 'one.txt'), 'one\n');
  writeFileSync(join(dir, 'a', 'b', 'bin.dat'), Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 31) % 256)));
  writeFileSync(join(dir, 'name with spaces.txt'), 'spaces');
  symlinkSync(join(outside, 'secret.txt'), join(dir, 'link-to-outside'));
  symlinkSync(outside, join(dir, 'linked-dir'));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

const registry = () => defaultRegistry(defaultJobContext({ allowedRoots: [tmpdir()] }));

/** The keys of an expansion's items, in the order they come. */
async function keysOf(items: ItemSource): Promise<string[]> {
  const keys: string[] = [];
  for await (const item of items) keys.push(item.key);
  return keys;
}

/** SHA-256 by the system's sha256sum, independent of node:crypto. */
function sha256sum(path: string): string {
  return execFileSync('sha256sum', [path], { encoding: 'utf8' }).split(' ')[0];
}

describe('checksum job', () => {
  it('outputs equal an independent SHA-256 of the same files; links are not items', async () => {
    const jobs = registry();
    expect(await keysOf((await jobs.expand('checksum', { dir })).items)).toEqual([
      'empty',
      'name with spaces.txt',
      'a/one.txt',
      'a/b/bin.dat',
    ]);
    // The listing is a stream, read once: expand again for the start.
    const { items, params } = await jobs.expand('checksum', { dir });
    const { batch } = await createBatch(db.sql, {
      tenant: 't',
      datasource: 'fs',
      job: 'checksum',
      params,
      requestKey: 'sum',
      items,
    });
    const runner = new Runner(db.sql, { beatMs: 1000, staleMs: 5000 });
    await runner.takeOver(jobs.resolve, batch.id);
    expect((await runner.running(batch.id))!.outcome).toBe('succeeded');
    const results = [];
    for await (const r of batchResults(db.sql, batch.id)) results.push(r);
    expect(results).toHaveLength(4);
    for (const r of results) {
      const path = join(dir, ...r.key.split('/'));
      expect(r.state).toBe('done');
      expect(r.output).toEqual({
        sha256: sha256sum(path),
        bytes: Number(execFileSync('stat', ['-c', '%s', path], { encoding: 'utf8' })),
      });
    }
  });

  it('a vanished file fails its item with a clear error', async () => {
    const jobs = registry();
    const ctx = jobs.context();
    writeFileSync(join(dir, 'gone.txt'), 'x');
    const { params } = await jobs.expand('checksum', { dir });
    rmSync(join(dir, 'gone.txt'));
    await expect(checksum.run(jobItem('gone.txt', params as { dir: string }), ctx)).rejects.toThrow(/gone\.txt vanished/);
  });

  it('a file replaced by a link to outside dir fails instead of being read', async () => {
    const jobs = registry();
    const { params } = await jobs.expand('checksum', { dir });
    await expect(checksum.run(jobItem('link-to-outside', params as { dir: string }), jobs.context())).rejects.toThrow(
      /symbolic link/,
    );
    await expect(checksum.run(jobItem('linked-dir/secret.txt', params as { dir: string }), jobs.context())).rejects.toThrow(
      /outside/,
    );
  });

  it.skipIf(process.getuid?.() === 0)(
    'an unreadable file fails its item with a clear error (skipped as root, who reads everything)',
    async () => {
      const jobs = registry();
      writeFileSync(join(dir, 'locked.txt'), 'x');
      chmodSync(join(dir, 'locked.txt'), 0o000);
      const { params } = await jobs.expand('checksum', { dir });
      await expect(checksum.run(jobItem('locked.txt', params as { dir: string }), jobs.context())).rejects.toThrow(
        /not readable/,
      );
      rmSync(join(dir, 'locked.txt'), { force: true });
    },
  );

  it('hashes files of exactly one read, of several reads and of a read and a byte as sha256sum does', async () => {
    const jobs = registry();
    const big = mkdtempSync(join(tmpdir(), 'leasehold-checksum-big-'));
    try {
      const sizes = { 'one-read.bin': 1024 * 1024, 'several.bin': 2.5 * 1024 * 1024 + 3, 'one-more.bin': 1024 * 1024 + 1 };
      for (const [name, size] of Object.entries(sizes)) {
        writeFileSync(join(big, name), Buffer.from(Array.from({ length: size }, (_, i) => (i * 7 + size) % 251)));
      }
      for (const [name, size] of Object.entries(sizes)) {
        const out = await checksum.run(jobItem(name, { dir: big }), jobs.context());
        expect(out).toEqual({ sha256: sha256sum(join(big, name)), bytes: size });
      }
    } finally {
      rmSync(big, { recursive: true, force: true });
    }
  });

  it('a file replaced by a named pipe fails as no longer a regular file, without blocking', async () => {
    const jobs = registry();
    const { params } = await jobs.expand('checksum', { dir });
    execFileSync('mkfifo', [join(dir, 'pipe')]);
    try {
      await expect(checksum.run(jobItem('pipe', params as { dir: string }), jobs.context())).rejects.toThrow(
        /pipe is no longer a regular file/,
      );
    } finally {
      rmSync(join(dir, 'pipe'), { force: true });
    }
  });

  it('an item whose signal aborted stops with an abort error, not a result', async () => {
    const jobs = registry();
    const { params } = await jobs.expand('checksum', { dir });
    const controller = new AbortController();
    controller.abort();
    await expect(
      checksum.run(jobItem('a/one.txt', params as { dir: string }, { signal: controller.signal }), jobs.context()),
    ).rejects.toThrow(/a\/one\.txt: reading was aborted/);
  });

  it('a dir outside the allowed roots, a missing dir and a file are refused with params.dir', async () => {
    const jobs = defaultRegistry(defaultJobContext({ allowedRoots: [dir] }));
    await expect(jobs.expand('checksum', { dir: outside })).rejects.toThrow(InvalidParamsError);
    await expect(jobs.expand('checksum', { dir: outside })).rejects.toThrow(/params\.dir: .*not under an allowed root/);
    await expect(jobs.expand('checksum', { dir: join(dir, 'nope') })).rejects.toThrow(/params\.dir: .*does not exist/);
    await expect(jobs.expand('checksum', { dir: join(dir, 'a', 'one.txt') })).rejects.toThrow(/params\.dir: .*not a directory/);
    // A link inside an allowed root pointing outside it does not smuggle the target in.
    await expect(jobs.expand('checksum', { dir: join(dir, 'linked-dir') })).rejects.toThrow(/not under an allowed root/);
    await expect(jobs.expand('checksum', { dir: 42 })).rejects.toThrow(/params\.dir/);
  });
});
