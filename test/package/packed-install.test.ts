// The package as a user gets it: `npm pack`, the tarball installed into a fresh app of its own
// (outside this repository, its own package.json, its own job), `leasehold dev --app` started
// there on the real test PostgreSQL, a batch started through the API and every output checked.
//
// And the driver fix as a user gets it: the app's own `postgres` is installed from npm
// unpatched, so the installed leasehold must run its bundled, patched copy
// (dist/vendor/postgres.js, scripts/build.mjs): a connection killed inside a transaction crashes
// a process that uses the app's `postgres`, and never one that uses leasehold, installed or
// bundled as SST bundles the app's handler file.
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishedBatch, killDevProcesses, outputs, startDev } from '../support/dev-process.js';
import { testDatabase, type TestDatabase } from '../support/db.js';
import { ARM_BACKEND_KILLER, installBackendKiller } from '../support/kill-backend.js';
import { buildLikeSst, bundleText } from '../support/sst-bundle.js';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

let db: TestDatabase;
let dir: string;
let app: string;
let files: string[];
/** The staged package.json before `npm pack`, and after it. */
let stagedManifest: string;
let stageAfterPack: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-packed-'));
  // dist/ is built by the test setup, and `prepack` would rebuild it under the other test files:
  // the pack runs in a copy of what it packs, with the real `npm pack` lifecycle but `prepack`
  // without its build step (what follows the build is what puts the tarball's manifest together).
  const stage = join(dir, 'stage');
  for (const path of ['package.json', 'README.md', 'bin', 'docs', 'dist', 'scripts/pack-manifest.mjs'])
    cpSync(join(ROOT, path), join(stage, path), { recursive: true });
  const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const build = 'node scripts/build.mjs && ';
  expect(manifest.scripts.prepack!.startsWith(build), manifest.scripts.prepack).toBe(true);
  manifest.scripts.prepack = manifest.scripts.prepack!.slice(build.length);
  stagedManifest = JSON.stringify(manifest, null, 2) + '\n';
  writeFileSync(join(stage, 'package.json'), stagedManifest);
  const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: stage, timeout: 60_000 });
  // npm prints the lifecycle scripts' output before its JSON.
  const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  files = info!.files.map((f) => f.path);
  stageAfterPack = readFileSync(join(stage, 'package.json'), 'utf8');

  // The app as docs/app.md makes it, literally: `npm init -y` (npm 11 writes
  // "type": "commonjs"), its install commands (the tarball's path put in), its tsconfig.json and
  // its files.
  app = join(dir, 'app');
  mkdirSync(app, { recursive: true });
  await run('npm', ['init', '-y'], { cwd: app, timeout: 30_000 });
  const section = appGuide();
  const commands = /```sh\n([\s\S]*?)```/
    .exec(section)![1]!
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim());
  expect(commands.filter(Boolean).map((c) => c.split(' ').slice(0, 2).join(' '))).toEqual([
    'npm init',
    'npm install',
    'npm install',
  ]);
  for (const command of commands.filter((c) => c.startsWith('npm install'))) {
    const args = command
      .split(/\s+/)
      .slice(1)
      .map((a) => (a.endsWith('leasehold-0.1.0.tgz') ? join(dir, info!.filename) : a));
    await run('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund'], { cwd: app, timeout: 240_000 });
  }
  const blockAfter = (file: string, lang: string) => {
    const at = section.indexOf(`(\`${file}\`)`);
    expect(at, file).toBeGreaterThan(0);
    return new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(section.slice(at))![1]!;
  };
  writeFileSync(join(app, 'tsconfig.json'), blockAfter('tsconfig.json', 'json'));
  for (const file of ['src/jobs.ts', 'src/leasehold.ts', 'src/functions/score.ts', 'sst.config.ts']) {
    mkdirSync(dirname(join(app, file)), { recursive: true });
    writeFileSync(join(app, file), blockAfter(file, 'ts'));
  }
  writeFileSync(join(app, 'death.mjs'), DEATH_SCRIPT);
  db = await testDatabase();
  // Statement triggers that terminate their own backend once per arming (disarmed: the other
  // tests start batches).
  await installBackendKiller(db.sql);
}, 300_000);

/** docs/app.md, which builds an app file by file. */
function appGuide(): string {
  return readFileSync(join(ROOT, 'docs', 'app.md'), 'utf8');
}

/**
 * The connection-death scenario (issue 9 item 3) as an app runs it: 4 times, a transaction whose
 * backend a trigger terminates while it inserts, then a statement on a fresh connection; prints
 * `{ rounds: [error code…], after: 2 }`. DRIVER=raw uses the app's own `postgres` (unpatched, from
 * npm); otherwise leasehold's `connect` and `createBatch` (a start inserting its items).
 */
const DEATH_SCRIPT = `const url = process.env.DATABASE_URL;
const rounds = [];
let sql, attempt;
if (process.env.DRIVER === 'raw') {
  const { default: postgres } = await import('postgres');
  sql = postgres(url, { max: 2, fetch_types: false, onnotice() {} });
  attempt = (i) => sql.begin(async (tx) => { await tx\`insert into kill_copy values (\${i})\`; });
} else {
  const { connect, createBatch } = await import('leasehold');
  sql = connect(url, { max: 2 });
  attempt = (i) => createBatch(sql, { tenant: 't', datasource: 'd' + i, job: 'j', params: {}, requestKey: 'death-' + process.pid + '-' + i,
    items: Array.from({ length: 50 }, (_, k) => ({ key: 'k' + k })) });
}
for (let i = 0; i < 4; i++) {
  await sql.unsafe(\`${ARM_BACKEND_KILLER}\`);
  const e = await attempt(i).then(() => undefined, (err) => err);
  rounds.push(e?.code ?? String(e));
  // Whatever the driver still had to write for the dead connection comes due meanwhile.
  await new Promise((r) => setTimeout(r, 50));
}
const [{ n }] = await sql\`select 1 + 1 as n\`;
await sql.end({ timeout: 5 });
console.log(JSON.stringify({ rounds, after: n }));
`;

/** Run `script` with node in the app, on the test schema: its exit code, output and error output. */
async function runInApp(
  script: string,
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return run(process.execPath, [script], {
    cwd: app,
    env: { PATH: process.env.PATH ?? '', DATABASE_URL: db.schemaUrl, ...env },
    timeout: 60_000,
  }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (e: { code?: number; stdout?: string; stderr?: string }) => ({
      code: e.code ?? -1,
      stdout: e.stdout ?? '',
      stderr: e.stderr ?? '',
    }),
  );
}

const SURVIVED = { rounds: ['CONNECTION_CLOSED', 'CONNECTION_CLOSED', 'CONNECTION_CLOSED', 'CONNECTION_CLOSED'], after: 2 };

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
      'dist/infra/index.js',
      'dist/infra/index.d.ts',
      'dist/src/cli/index.js',
      'dist/src/store/migrations/001_batches.sql',
      'dist/vendor/postgres.js',
      // The README links into docs/.
      'docs/design.md',
      'docs/api.md',
      'docs/app.md',
      'dist/dashboard/index.html',
      'dist/dashboard/app.js',
      'dist/dashboard/app.css',
      'dist/dashboard/LICENSES.txt',
    ]) {
      expect(files, path).toContain(path);
    }
    expect(
      files.filter((f) => /^(src|test|functions|examples|bench|scripts)\//.test(f) || (/\.ts$/.test(f) && !/\.d\.ts$/.test(f))),
    ).toEqual([]);
    // Nothing runs when an app installs it (patch-package, for one, is not there: the driver's
    // patch ships applied, in dist/vendor): the packed manifest has no scripts at all, so npm
    // lists none for approval; the clone's package.json is put back as it was.
    const installed = JSON.parse(readFileSync(join(app, 'node_modules', 'leasehold', 'package.json'), 'utf8')) as {
      scripts?: Record<string, string>;
      bin?: unknown;
      exports?: unknown;
    };
    expect(installed.scripts).toBeUndefined();
    expect(installed.bin).toEqual({ leasehold: 'bin/leasehold.js' });
    expect(installed.exports).toBeDefined();
    expect(stageAfterPack).toBe(stagedManifest);
  });

  it("type-checks as docs/app.md's tsconfig.json has it, with the TypeScript it installs", async () => {
    expect(JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'))).toMatchObject({ type: 'commonjs' });
    const r = await run(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '--noEmit'], {
      cwd: app,
    }).catch((e: { stdout: string; code: number }) => e);
    expect('code' in r ? r.stdout : '').toBe('');
  }, 60_000);

  it('installs into another app, whose leasehold dev --app runs its own job to the end', async () => {
    const dev = await startDev(
      join(app, 'node_modules', '.bin', 'leasehold'),
      ['dev', '--app', 'src/leasehold.ts', '--port', '0'],
      {
        cwd: app,
        env: { ...process.env, DATABASE_URL: db.schemaUrl, LEASEHOLD_LOCAL_SCHEDULE_MS: '300' },
      },
    );
    try {
      expect(dev.stderr()).toMatch(/app +src\/leasehold\.ts/);
      // The installed package serves its dashboard.
      expect(await (await fetch(`${dev.url}/`)).text()).toContain('/dashboard/app.js');
      expect((await fetch(`${dev.url}/dashboard/app.js`)).headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      const { batch } = await dev.api.startBatch({ tenant: 'acme', datasource: 'numbers', job: 'squares', params: { n: 50 } });
      expect(batch.total).toBe(50);
      const end = await finishedBatch(dev.api, batch.id);
      expect(end.status).toBe('succeeded');
      const { byKey, states } = await outputs(dev.api, batch.id);
      expect(states).toEqual(new Set(['done']));
      expect(byKey).toEqual(Object.fromEntries(Array.from({ length: 50 }, (_, i) => [String(i).padStart(5, '0'), i * i])));
      // Only the app's jobs: the built-in ones are opt-in.
      await expect(
        dev.api.startBatch({ tenant: 'acme', datasource: 'files', job: 'checksum', params: { dir: app } }),
      ).rejects.toMatchObject({ status: 404 });
      // Fleet processes owning units when Ctrl-C comes (their checks go nowhere: port 9).
      await dev.api.putUnits('acme', { job: 'uptime-check', shards: 2, config: { urls: ['http://127.0.0.1:9/'] } });
      await dev.api.setConcurrency(2);
      const until = Date.now() + 30_000;
      while ((await dev.api.listUnits({})).some((u) => !u.owner)) {
        if (Date.now() > until) throw new Error(`units never owned:\n${dev.stderr()}`);
        await sleep(100);
      }
    } finally {
      const stopped = await dev.stop();
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stderr).toMatch(/nothing left owned/);
      // One copy of leasehold for the app, CommonJS as it is: its function logs and metric lines
      // went to .leasehold/dev.log, not to the terminal, and the stop reached its workers, which
      // returned at once with nothing replaced.
      expect(`${stopped.stdout}${stopped.stderr}`).not.toMatch(/^\{"(level|_aws)"/m);
      const log = readFileSync(join(app, '.leasehold', 'dev.log'), 'utf8');
      expect(log).toMatch(/"message":"scheduler run"/);
      expect(log).toMatch(/"message":"worker returning".*"reason":"shutdown"/);
      expect(log).not.toMatch(/replacement invoke failed|continuation invoke failed/);
    }
  }, 120_000);

  it("a connection killed inside a transaction crashes the app's own postgres, and never the installed leasehold, which runs its patched copy", async () => {
    // The scenario is real: the driver npm installed for the app dies of it.
    const raw = await runInApp('death.mjs', { DRIVER: 'raw' });
    expect(raw.code, raw.stdout).not.toBe(0);
    expect(raw.stderr).toMatch(/TypeError: Cannot read properties of null \(reading 'write'\)/);
    expect(raw.stderr).toMatch(/node_modules\/postgres\/src\/connection\.js/);

    const installed = await runInApp('death.mjs');
    expect(installed.code, installed.stderr).toBe(0);
    expect(JSON.parse(installed.stdout)).toEqual(SURVIVED);
    // The installed package imports its own copy, which says what it is.
    const connectJs = readFileSync(join(app, 'node_modules', 'leasehold', 'dist', 'src', 'store', 'connect.js'), 'utf8');
    expect(connectJs).toMatch(/^import postgres from '\.\.\/\.\.\/vendor\/postgres\.js';$/m);
    expect(readFileSync(join(app, 'node_modules', 'leasehold', 'dist', 'vendor', 'postgres.js'), 'utf8')).toMatch(
      /^\/\*! leasehold-vendored-postgres: postgres\.js 3\.4\.9 .*patches\/postgres\+3\.4\.9\.patch/s,
    );
    // Its declarations still name the postgres package's types.
    expect(readFileSync(join(app, 'node_modules', 'leasehold', 'dist', 'src', 'store', 'connect.d.ts'), 'utf8')).toMatch(
      /from 'postgres'/,
    );
  }, 120_000);

  it("the app's handler file bundled as SST bundles it carries the patched driver, and the bundled scenario survives", async () => {
    const handlers = await buildLikeSst(join(app, 'src', 'leasehold.ts'), join(dir, 'bundle', 'leasehold.mjs'), {
      absWorkingDir: app,
    });
    const inputs = Object.keys(handlers.metafile.inputs);
    expect(inputs).toContain('node_modules/leasehold/dist/vendor/postgres.js');
    expect(inputs.filter((p) => p.startsWith('node_modules/postgres/'))).toEqual([]);
    // The legal comment of the patched copy survives minification (esbuild lists it at the end).
    expect(bundleText(handlers)).toMatch(
      /leasehold-vendored-postgres: postgres\.js 3\.4\.9 .*patches\/postgres\+3\.4\.9\.patch/s,
    );

    const death = await buildLikeSst(join(app, 'death.mjs'), join(dir, 'bundle', 'death.mjs'), { absWorkingDir: app });
    expect(Object.keys(death.metafile.inputs)).toContain('node_modules/leasehold/dist/vendor/postgres.js');
    const bundled = await runInApp(death.file);
    expect(bundled.code, bundled.stderr).toBe(0);
    expect(JSON.parse(bundled.stdout)).toEqual(SURVIVED);
  }, 120_000);
});
