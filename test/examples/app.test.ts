// examples/app, used as its README says: `npm install` (leasehold from this clone, built), of
// the module kind `npm init -y` writes (CommonJS under npm 11), its code type-checked against the
// built package's declarations, its sst.config.ts evaluated with recording stand-ins, and
// `leasehold dev --app src/leasehold.ts` run on the real test PostgreSQL: its batch job, a
// lambda-invoke batch of its own function and its unit job. A fresh app made from docs/app.md
// alone (npm init -y, its installs, files and tsconfig.json) is test/package/packed-install.test.ts.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Server } from 'node:http';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { deploy, functions, handlerProblems, handlersOf, invokeGrants } from '../support/sst-evaluate.js';
import { removeStandIns } from '../support/sst-stand-ins.js';
import { API_ROUTES } from '../../infra/api-routes.js';
import { finishedBatch, killDevProcesses, outputs, startDev } from '../support/dev-process.js';
import { testDatabase, type TestDatabase } from '../support/db.js';

const ROOT = resolve(import.meta.dirname, '../..');
const APP = join(ROOT, 'examples', 'app');
const run = promisify(execFile);

let db: TestDatabase;

beforeAll(async () => {
  // dist/ is built by the test setup; --ignore-scripts keeps npm from rebuilding it under
  // other test files (the link's `prepare`).
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock', '--ignore-scripts'], {
    cwd: APP,
    timeout: 120_000,
  });
  db = await testDatabase();
}, 180_000);

afterAll(async () => {
  killDevProcesses();
  await db?.close();
});

describe('examples/app', () => {
  it('is of the module kind `npm init -y` writes, as a fresh app following docs/app.md is', async () => {
    // test/package/packed-install.test.ts builds that fresh app from docs/app.md alone.
    const fresh = mkdtempSync(join(tmpdir(), 'leasehold-npm-init-'));
    try {
      await run('npm', ['init', '-y'], { cwd: fresh, timeout: 30_000 });
      const defaults = JSON.parse(readFileSync(join(fresh, 'package.json'), 'utf8')) as { type?: string };
      const example = JSON.parse(readFileSync(join(APP, 'package.json'), 'utf8')) as { type?: string };
      expect(example.type ?? 'commonjs').toBe(defaults.type ?? 'commonjs');
    } finally {
      rmSync(fresh, { recursive: true, force: true });
    }
  });

  it("type-checks against the built package's declarations", async () => {
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = await run(process.execPath, [tsc, '-p', join(APP, 'tsconfig.json')], { cwd: APP }).catch(
      (e: { stdout: string; code: number }) => e,
    );
    expect('code' in r ? r.stdout : '').toBe('');
  }, 60_000);

  it('is what docs/app.md shows, file by file', () => {
    const section = readFileSync(join(ROOT, 'docs', 'app.md'), 'utf8');
    for (const file of ['src/jobs.ts', 'src/leasehold.ts', 'src/functions/score.ts', 'sst.config.ts']) {
      const at = section.indexOf(`(\`${file}\`)`);
      expect(at, file).toBeGreaterThan(0);
      const block = /```ts\n([\s\S]*?)```/.exec(section.slice(at))![1];
      expect(block, file).toBe(readFileSync(join(APP, file), 'utf8'));
    }
    const at = section.indexOf('(`tsconfig.json`)');
    expect(at).toBeGreaterThan(0);
    const tsconfig = /```json\n([\s\S]*?)```/.exec(section.slice(at))![1]!;
    expect(JSON.parse(tsconfig)).toEqual(JSON.parse(readFileSync(join(APP, 'tsconfig.json'), 'utf8')));
  });

  describe('sst.config.ts, evaluated', () => {
    afterEach(() => removeStandIns());

    it("points the runner's functions at the app's handler file and its own function at its own", async () => {
      const { world } = await deploy(APP);
      const refs = handlersOf(world);
      expect(refs.map((r) => `${r.where} ${r.handler}`).sort()).toEqual([
        'Function RunnerApi src/leasehold.api',
        'Function RunnerEvents src/leasehold.events',
        'Function RunnerMigrate src/leasehold.migrate',
        'Function RunnerScheduler src/leasehold.scheduler',
        'Function RunnerTrigger src/leasehold.trigger',
        'Function RunnerWorker src/leasehold.worker',
        'Function Score src/functions/score.handler',
      ]);
      expect(handlerProblems(APP, refs)).toEqual([]);
    });

    it('lets the worker invoke only itself and the invokable function, the dispatchers only the worker', async () => {
      const { world } = await deploy(APP);
      const arn = (name: string) => (world.one('sst.aws.Function', name).instance as { arn: string }).arn;
      const worker = arn('RunnerWorker');
      const score = arn('Score');
      expect(invokeGrants(world)).toEqual({
        RunnerApi: [worker],
        RunnerScheduler: [worker],
        RunnerTrigger: [worker],
        RunnerWorker: [score, worker].sort(),
      });
      // The runtime learns the function by the name batches use.
      for (const r of functions(world).filter((f) => f.name.startsWith('Runner') && f.name !== 'RunnerMigrate')) {
        expect(r.args.environment.LEASEHOLD_INVOKABLE, r.name).toBe(`score=${score}`);
      }
    });

    it('puts IAM auth on every route but the callback routes and returns its outputs', async () => {
      const { world, outputs: out } = await deploy(APP);
      const routes = world.calls.filter((c) => c.method === 'route');
      expect(routes.map((c) => String(c.args[0]))).toEqual([...API_ROUTES]);
      for (const { args } of routes) {
        const open = String(args[0]).startsWith('POST /callbacks/');
        expect(args[2]?.auth, String(args[0])).toEqual(open ? false : { iam: true });
      }
      expect(routes.filter((c) => c.args[2]?.auth === false)).toHaveLength(3);
      expect(out).toEqual({
        api: (world.one('sst.aws.ApiGatewayV2', 'RunnerHttpApi').instance as { url: string }).url,
        bus: (world.one('sst.aws.Bus', 'RunnerEvents').instance as { name: string }).name,
        worker: 'example-dev-runner-worker',
      });
      // The package's migration files ship with the migrate function.
      const [copy] = world.one('sst.aws.Function', 'RunnerMigrate').args.copyFiles as { from: string }[];
      expect(resolve(APP, copy!.from)).toBe(join(ROOT, 'src', 'store', 'migrations'));
    });
  });

  it('runs with leasehold dev --app: its batch job, a lambda-invoke batch of its function, its unit job', async () => {
    // Where the unit job's checks land: counts GETs by tenant and shard.
    const pings = new Map<string, number>();
    const target: Server = createServer((req, res) => {
      const key = `${req.headers['x-tenant']}/${req.headers['x-shard']}`;
      pings.set(key, (pings.get(key) ?? 0) + 1);
      res.end('ok');
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const targetUrl = `http://127.0.0.1:${(target.address() as { port: number }).port}/health`;

    const dev = await startDev(
      join(APP, 'node_modules', '.bin', 'leasehold'),
      ['dev', '--app', 'src/leasehold.ts', '--port', '0'],
      {
        cwd: APP,
        // Short retry backoff: one item of the lambda-invoke batch fails on every attempt.
        env: { ...process.env, DATABASE_URL: db.schemaUrl, LEASEHOLD_LOCAL_SCHEDULE_MS: '300', LEASEHOLD_BACKOFF_MS: '100' },
      },
    );
    try {
      expect(dev.stderr()).toMatch(/app +src\/leasehold\.ts/);
      expect(dev.stderr()).toMatch(/functions +score \(local/);

      const squares = (await dev.api.startBatch({ tenant: 'acme', datasource: 'numbers', job: 'squares', params: { n: 20 } }))
        .batch;
      const scored = (
        await dev.api.startBatch({
          tenant: 'acme',
          datasource: 'reviews',
          job: 'lambda-invoke',
          params: {
            functionName: 'score',
            items: [
              { key: 'r1', input: { text: 'Great and fast, love it' } },
              { key: 'r2', input: { text: 'slow and broken' } },
              { key: 'r3', input: { text: 42 } },
            ],
          },
          // r3 fails on every attempt: tolerated, so the batch succeeds with it listed.
          toleratedFailures: { count: 1 },
        })
      ).batch;
      expect((await finishedBatch(dev.api, squares.id)).status).toBe('succeeded');
      const sq = await outputs(dev.api, squares.id);
      expect(sq.byKey).toEqual(Object.fromEntries(Array.from({ length: 20 }, (_, i) => [String(i).padStart(5, '0'), i * i])));

      const done = await finishedBatch(dev.api, scored.id);
      expect(done).toMatchObject({ status: 'succeeded', allowedFailures: 1, counts: { done: 2, failed: 1 } });
      // acme's own routes show it; another tenant's do not.
      expect((await dev.api.forTenant('acme').getBatch(scored.id)).id).toBe(scored.id);
      await expect(dev.api.forTenant('globex').getBatch(scored.id)).rejects.toMatchObject({
        status: 404,
        code: 'batch_not_found',
      });
      const items: Record<string, { state: string; output: unknown; error: string | null }> = {};
      for await (const item of dev.api.items(scored.id)) items[item.key] = item;
      expect(items.r1).toMatchObject({ state: 'done', output: { words: 5, score: 3 } });
      expect(items.r2).toMatchObject({ state: 'done', output: { words: 3, score: -2 } });
      expect(items.r3).toMatchObject({
        state: 'failed',
        error: expect.stringContaining('function score failed: TypeError: item r3: input.text must be a string'),
      });

      // A function the app did not register is refused at start.
      await expect(
        dev.api.startBatch({
          tenant: 'acme',
          datasource: 'reviews',
          job: 'lambda-invoke',
          params: { functionName: 'other', items: [{ key: 'a' }] },
        }),
      ).rejects.toMatchObject({ status: 400 });

      await dev.api.putUnits('acme', { job: 'uptime-check', shards: 2, config: { urls: [targetUrl] } });
      await dev.api.setConcurrency(2);
      const until = Date.now() + 30_000;
      while (!(pings.get('acme/0') && pings.get('acme/1'))) {
        if (Date.now() > until) throw new Error(`uptime checks seen: ${JSON.stringify([...pings])}\n${dev.stderr()}`);
        await sleep(100);
      }
      await dev.api.deleteUnits('acme');
    } finally {
      const stopped = await dev.stop();
      target.close();
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(stopped.stderr).toMatch(/nothing left owned/);
    }
  }, 120_000);
});
