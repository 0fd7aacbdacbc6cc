// The package as a user gets it: `npm pack`, the tarball installed into a fresh app of its own
// (outside this repository, its own package.json, its own job), `leasehold dev --app` started
// there on the real test PostgreSQL, a batch started through the API and every output checked.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishedBatch, killDevProcesses, outputs, startDev } from '../support/dev-process.js';
import { testDatabase, type TestDatabase } from '../support/db.js';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

let db: TestDatabase;
let dir: string;
let app: string;
let files: string[];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-packed-'));
  // dist/ is built by the test setup; --ignore-scripts keeps `prepack` from rebuilding it under
  // the other test files.
  const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: ROOT, timeout: 60_000 });
  const [info] = JSON.parse(packed.stdout) as { filename: string; files: { path: string }[] }[];
  files = info!.files.map((f) => f.path);

  app = join(dir, 'app');
  mkdirSync(join(app, 'src'), { recursive: true });
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({
      name: 'packed-app',
      private: true,
      type: 'module',
      dependencies: { leasehold: `file:${join(dir, info!.filename)}`, zod: '^4.6.7' },
    }),
  );
  writeFileSync(
    join(app, 'src', 'leasehold.ts'),
    `import { defineJob } from 'leasehold';
import { createHandlers } from 'leasehold/lambda';
import * as z from 'zod';

/** params { n }, items 0..n-1, output 2i. */
const double = defineJob({
  name: 'double',
  description: 'twice every i in 0..n-1',
  params: z.object({ n: z.number().int().min(1).max(1000) }),
  async expand({ n }) {
    return { items: Array.from({ length: n }, (_, i) => ({ key: String(i), input: i })) };
  },
  async run(item) {
    return 2 * (item.input as number);
  },
});

export const { worker, scheduler, api, trigger, migrate } = createHandlers({ jobs: [double] });
`,
  );
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: app, timeout: 240_000 });
  db = await testDatabase();
}, 300_000);

afterAll(async () => {
  killDevProcesses();
  await db?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('holds the built JavaScript, its declarations, the migrations and the command, and no sources or tests', () => {
    for (const path of [
      'package.json',
      'README.md',
      'bin/leasehold.js',
      'dist/src/index.js',
      'dist/src/index.d.ts',
      'dist/src/lambda.js',
      'dist/src/lambda.d.ts',
      'dist/src/sst/index.js',
      'dist/src/sst/index.d.ts',
      'dist/src/cli.js',
      'dist/src/store/migrations/001_batches.sql',
    ]) {
      expect(files, path).toContain(path);
    }
    expect(files.filter((f) => /^(src|test|functions|examples|bench|scripts)\//.test(f) || (/\.ts$/.test(f) && !/\.d\.ts$/.test(f)))).toEqual([]);
  });

  it('installs into another app, whose leasehold dev --app runs its own job to the end', async () => {
    const dev = await startDev(join(app, 'node_modules', '.bin', 'leasehold'), ['dev', '--app', 'src/leasehold.ts', '--port', '0'], {
      cwd: app,
      env: { ...process.env, DATABASE_URL: db.schemaUrl, LEASEHOLD_LOCAL_SCHEDULE_MS: '300' },
    });
    try {
      expect(dev.stderr()).toMatch(/app +src\/leasehold\.ts/);
      const { batch } = await dev.api.startBatch({ tenant: 'acme', datasource: 'numbers', job: 'double', params: { n: 50 } });
      expect(batch.total).toBe(50);
      const end = await finishedBatch(dev.api, batch.id);
      expect(end.status).toBe('succeeded');
      const { byKey, states } = await outputs(dev.api, batch.id);
      expect(states).toEqual(new Set(['done']));
      expect(byKey).toEqual(Object.fromEntries(Array.from({ length: 50 }, (_, i) => [String(i), 2 * i])));
      // Only the app's job: the built-in ones are opt-in.
      await expect(dev.api.startBatch({ tenant: 'acme', datasource: 'files', job: 'checksum', params: { dir: app } })).rejects.toMatchObject({ status: 404 });
    } finally {
      const stopped = await dev.stop();
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stderr).toMatch(/nothing left owned/);
    }
  }, 120_000);
});
