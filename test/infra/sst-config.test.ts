// This repository's sst.config.ts, which deploys its runner through the Leasehold component
// (infra/), evaluated with recording stand-ins for SST's globals and components
// (test/support/sst-stand-ins.ts): what a deploy would create, checked without AWS.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { builtinJobs } from '../../src/jobs/index.js';
import { databaseFromEnv, PRODUCTION_STAGES, START_BATCH_DETAIL_TYPE, type ScheduleDeclaration } from '../../infra/index.js';
import { checkSchedules, resolveSettings, RUNTIME, scheduleEvent } from '../../infra/settings.js';
import {
  deploy as evaluate,
  functions,
  handlerProblems,
  handlersOf,
  invokeGrants,
  invokersOf,
  permissionsOf,
  seconds,
} from '../support/sst-evaluate.js';
import {
  ACCOUNT,
  applyTransform,
  DB_HOST,
  DB_RESOURCE_ID,
  installStandIns,
  PROXY_RESOURCE_ID,
  REGION,
  removeStandIns,
  type Recorded,
  type World,
} from '../support/sst-stand-ins.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const deploy = (stage = 'dev') => evaluate(root, stage);

afterEach(() => {
  removeStandIns();
  vi.unstubAllEnvs();
});

/** Deploy-time variables of an existing database, unset unless a test sets them. */
function noExistingDatabase() {
  for (const name of ['LEASEHOLD_DATABASE_HOST', 'LEASEHOLD_VPC_SUBNETS', 'LEASEHOLD_VPC_SECURITY_GROUPS']) vi.stubEnv(name, '');
}

const fn = (w: World, role: string) => w.one('sst.aws.Function', `Runner${role}`);

/** The functions that run the runner's code against the database (all but the migration). */
const RUNNER_FUNCTIONS = ['RunnerApi', 'RunnerEvents', 'RunnerScheduler', 'RunnerTrigger', 'RunnerWorker'];

describe('sst.config.ts, evaluated', () => {
  it('names the app leasehold, homed on AWS, retaining and protecting only production stages', async () => {
    noExistingDatabase();
    const { app } = await deploy('dev');
    expect(app).toMatchObject({ name: 'leasehold', home: 'aws', removal: 'remove', protect: false });
    expect(app.version).toMatch(/^\^4\./);
    for (const stage of PRODUCTION_STAGES) {
      const prod = await deploy(stage);
      expect(prod.app).toMatchObject({ removal: 'retain', protect: true });
    }
  });

  it("pins the SST CLI as a dev dependency: npm ci installs it and its binary for this platform, in the config's range", async () => {
    noExistingDatabase();
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      devDependencies: Record<string, string>;
      dependencies: Record<string, string>;
    };
    const pinned = pkg.devDependencies.sst;
    expect(pinned, 'an exact version').toMatch(/^\d+\.\d+\.\d+$/);
    expect(pkg.dependencies.sst, 'apps install their own').toBeUndefined();
    const installed = JSON.parse(readFileSync(join(root, 'node_modules', 'sst', 'package.json'), 'utf8')) as {
      version: string;
      scripts?: Record<string, string>;
    };
    expect(installed.version).toBe(pinned);
    // Nothing of it runs at install (npm 11 would skip it unless allowed): the CLI comes as a
    // plain binary package for the platform, found by node_modules/.bin/sst.
    expect(Object.keys(installed.scripts ?? {}).filter((s) => /^(pre|post)?install$/.test(s))).toEqual([]);
    const binary = join(root, 'node_modules', `sst-${process.platform}-${process.arch}`, 'bin', 'sst');
    expect(statSync(binary).size, binary).toBeGreaterThan(1_000_000);
    expect(existsSync(join(root, 'node_modules', '.bin', 'sst'))).toBe(true);
    // The config asks for ^X.Y.Z: the pinned version is X.*, at least Y.Z.
    const { app } = await deploy('dev');
    const [major, minor, patch] = String(app.version).replace(/^\^/, '').split('.').map(Number);
    const [pMajor, pMinor, pPatch] = pinned.split('.').map(Number);
    expect(pMajor).toBe(major);
    expect(pMinor * 1e6 + pPatch).toBeGreaterThanOrEqual(minor * 1e6 + patch);
  });

  it('creates one Leasehold component, parent of everything it creates', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const [component, ...more] = world.of('leasehold:aws:Leasehold');
    expect(more).toHaveLength(0);
    expect(component!.name).toBe('Runner');
    const children = world.records.filter((r) => r !== component);
    expect(children.length).toBeGreaterThan(10);
    for (const r of children) {
      expect(r.opts?.parent, `${r.type} ${r.name}`).toBe(component!.instance);
      expect(r.name, `${r.type} ${r.name}`).toMatch(/^Runner/);
    }
  });

  it('points every function at one export of the handler file, functions/leasehold.ts', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const refs = handlersOf(world);
    expect(refs.map((r) => r.handler).sort()).toEqual([
      'functions/leasehold.api',
      'functions/leasehold.events',
      'functions/leasehold.migrate',
      'functions/leasehold.scheduler',
      'functions/leasehold.trigger',
      'functions/leasehold.worker',
    ]);
    expect(handlerProblems(root, refs)).toEqual([]);
  });

  it('reports a wrong handler path, file or export', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const refs = handlersOf(world).map((r) =>
      r.where === 'Function RunnerWorker'
        ? { ...r, handler: 'functions/lesaehold.worker' }
        : r.where === 'Function RunnerScheduler'
          ? { ...r, handler: 'functions/leasehold.schedule' }
          : r.where === 'Function RunnerApi'
            ? { ...r, handler: 'functions/leasehold' }
            : r,
    );
    expect(handlerProblems(root, refs)).toEqual([
      'Function RunnerWorker: handler "functions/lesaehold.worker": functions/lesaehold.ts does not exist',
      'Function RunnerScheduler: handler "functions/leasehold.schedule": functions/leasehold.ts has no export "schedule"',
      'Function RunnerApi: handler "functions/leasehold" is not "path/file.export"',
    ]);
  });

  it('runs every function on nodejs22.x in the VPC, bundled as ESM with code splitting', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const vpc = world.one('sst.aws.Vpc', 'RunnerVpc');
    expect(functions(world).length).toBe(6);
    for (const r of functions(world)) {
      expect(r.args.runtime, r.name).toBe(RUNTIME);
      expect(RUNTIME).toBe('nodejs22.x');
      expect(r.args.vpc, r.name).toBe(vpc.instance);
      // A cold start loads only the handler file's static imports (test/support/sst-bundle.ts).
      expect(r.args.nodejs, r.name).toEqual({ format: 'esm', splitting: true });
    }
  });

  it('lets functions in the VPC reach the Lambda Invoke API (NAT or a Lambda endpoint)', async () => {
    noExistingDatabase();
    for (const stage of ['dev', 'production']) {
      const { world } = await deploy(stage);
      const nat = world.one('sst.aws.Vpc', 'RunnerVpc').args.nat;
      const endpoints = world.of('aws.ec2.VpcEndpoint').filter((e) => String(e.args.serviceName).endsWith('.lambda'));
      expect(['ec2', 'managed'].includes(nat) || endpoints.length > 0, stage).toBe(true);
      if (stage === 'production') expect(nat).toBe('managed');
    }
  });

  it('gives the worker a timeout beyond its deadline margin plus drain, and reserved concurrency', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const worker = fn(world, 'Worker');
    const env = worker.args.environment as Record<string, string>;
    const marginMs = Number(env.LEASEHOLD_DEADLINE_MARGIN_MS);
    const drainMs = Number(env.LEASEHOLD_DRAIN_MS);
    expect(marginMs).toBeGreaterThan(0);
    expect(drainMs).toBeLessThan(marginMs);
    expect(seconds(worker.args.timeout) * 1000).toBeGreaterThan(marginMs + drainMs);
    expect(seconds(worker.args.timeout)).toBe(900);
    expect(Number.isInteger(worker.args.concurrency.reserved) && worker.args.concurrency.reserved > 0).toBe(true);
    expect(worker.args.retries).toBe(0);
    // Late and repeated events: no async retries, and events older than a minute dropped.
    expect(applyTransform(worker.args.transform?.eventInvokeConfig, { maximumRetryAttempts: 2 }).args).toEqual({
      maximumRetryAttempts: 0,
      maximumEventAgeInSeconds: 60,
    });
  });

  it('refuses settings that cannot work, naming the option', () => {
    const ok = { handlers: 'functions/leasehold' };
    expect(() => resolveSettings('dev', ok)).not.toThrow();
    expect(() => resolveSettings('dev', { ...ok, worker: { timeoutSeconds: 15 } })).toThrow(/worker\.timeoutSeconds/);
    expect(() => resolveSettings('dev', { ...ok, worker: { drainMs: 10_000 } })).toThrow(/drainMs/);
    expect(() => resolveSettings('dev', { ...ok, worker: { timeoutSeconds: 901 } })).toThrow(/1\.\.900/);
    expect(() => resolveSettings('dev', { ...ok, api: { timeoutSeconds: 40 } })).toThrow(/api\.timeoutSeconds/);
    expect(() => resolveSettings('dev', { handlers: '' })).toThrow(/handlers: required/);
    expect(() => resolveSettings('dev', { handlers: '../elsewhere/leasehold' })).toThrow(/handlers: .* inside the app/);
    expect(() =>
      resolveSettings('dev', { ...ok, network: { existing: { privateSubnets: ['subnet-1'], securityGroups: ['sg-1'] } } }),
    ).toThrow(/network\.existing: a database the component creates needs its own VPC/);
    expect(() => resolveSettings('dev', { ...ok, database: { existing: { host: 'db', resourceId: 'cluster-x' } } })).toThrow(
      /resourceId/,
    );
  });

  it('lets only the functions that dispatch invoke the worker: scheduler, API, trigger and the worker itself', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const worker = fn(world, 'Worker');
    // The trigger dispatches the batch it starts (src/trigger/trigger.ts); the migration never does.
    expect(invokersOf(world, worker)).toEqual(['RunnerApi', 'RunnerScheduler', 'RunnerTrigger', 'RunnerWorker']);
    expect((worker.instance as { name: string }).name).toBe('leasehold-dev-runner-worker');
    // No cron, bus rule or route targets the worker either.
    for (const c of world.of('sst.aws.CronV2')) expect(c.args.function, c.name).not.toBe(worker.instance);
    for (const c of world.calls) expect(c.args[1], `${c.on.name}.${c.method}`).not.toBe(worker.instance);
    for (const c of world.calls) expect(c.args[1], `${c.on.name}.${c.method}`).not.toBe((worker.instance as { arn: string }).arn);
    // With no invokable functions, the worker's own ARN is all anyone may invoke.
    const workerArn = (worker.instance as { arn: string }).arn;
    expect(invokeGrants(world)).toEqual({
      RunnerApi: [workerArn],
      RunnerScheduler: [workerArn],
      RunnerTrigger: [workerArn],
      RunnerWorker: [workerArn],
    });
  });

  it('grants nothing wider than named resources', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    for (const r of functions(world)) {
      for (const p of permissionsOf(r)) {
        for (const a of p.actions) expect(a, r.name).not.toMatch(/\*/);
        for (const res of p.resources) expect(res, r.name).not.toMatch(/\*/);
      }
      expect(r.args.link ?? [], r.name).toEqual([]);
      expect(r.args.policies ?? [], r.name).toEqual([]);
    }
  });

  it('puts IAM auth on every route but the three callback routes, covering the routes of docs/api.md', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const api = fn(world, 'Api');
    const routes = world.calls.filter((c) => c.method === 'route');
    expect(routes.length).toBeGreaterThan(0);
    // Exactly these are public: the callback token's HMAC authorises them (docs/api.md, "Callbacks").
    const open = ['POST /callbacks/{token}/succeed', 'POST /callbacks/{token}/fail', 'POST /callbacks/{token}/heartbeat'];
    expect(routes.filter((c) => c.args[2]?.auth === false).map((c) => String(c.args[0]))).toEqual(open);
    for (const { args } of routes) {
      expect(args[2]?.auth, String(args[0])).toEqual(open.includes(String(args[0])) ? false : { iam: true });
      expect(args[1], String(args[0])).toBe((api.instance as { arn: string }).arn);
    }
    // No other method reaches a callback path: it is routed for POST only.
    expect(routes.filter((c) => String(c.args[0]).includes('/callbacks/')).map((c) => String(c.args[0]))).toEqual(open);
    // Any later route defaults to IAM too; one declared public stays public.
    const gateway = world.one('sst.aws.ApiGatewayV2', 'RunnerHttpApi');
    expect(applyTransform(gateway.args.transform.route.args, {}).args.auth).toEqual({ iam: true });
    expect(applyTransform(gateway.args.transform.route.args, { auth: false }).args.auth).toBe(false);

    const shape = (path: string) => path.replace(/\{[^}]+\}/g, '{}');
    const declared = routes.map((c) => {
      const [method, path] = String(c.args[0]).split(' ') as [string, string];
      return { method, path: shape(path) };
    });
    // docs/api.md gives each route a heading: "### `GET /batches/{id}`".
    const reference = readFileSync(join(root, 'docs', 'api.md'), 'utf8');
    const headings = reference
      .split('\n')
      .filter((line) => line.startsWith('#'))
      .join('\n');
    const documented = [...headings.matchAll(/`(GET|POST|PUT|DELETE|PATCH) (\/[^`?\s]*)[^`]*`/g)].map((m) => ({
      method: m[1]!,
      path: shape(m[2]!),
    }));
    expect(documented.length).toBeGreaterThan(10);
    // The progress stream is the events function's (its URL), not the HTTP API's (docs/api.md,
    // "GET /batches/{id}/events").
    const streamOnly = (d: { method: string; path: string }) => d.method === 'GET' && d.path === '/batches/{}/events';
    expect(documented.filter(streamOnly)).toHaveLength(1);
    for (const d of documented.filter((x) => !streamOnly(x))) {
      expect(
        declared.some((r) => r.path === d.path && (r.method === 'ANY' || r.method === d.method)),
        `${d.method} ${d.path}`,
      ).toBe(true);
    }
    for (const r of declared)
      expect(
        documented.some((d) => d.path === r.path),
        r.path,
      ).toBe(true);
    // …and its "Routes" list (the one the README links to) names each of them.
    const list = reference.slice(reference.indexOf('## Routes'), reference.indexOf('\n## ', reference.indexOf('## Routes') + 1));
    const listed = new Set(
      [...list.matchAll(/`(GET|POST|PUT|DELETE|PATCH) (\/[^`?\s]*)`/g)].map((m) => `${m[1]} ${shape(m[2]!)}`),
    );
    for (const d of documented)
      expect(listed.has(`${d.method} ${shape(d.path)}`), `Routes lists ${d.method} ${d.path}`).toBe(true);
  });

  it('serves the progress stream from its own function URL: IAM auth, response streaming, a one-connection pool', async () => {
    noExistingDatabase();
    const { world, outputs } = await deploy();
    const events = fn(world, 'Events');
    expect(events.args.handler).toBe('functions/leasehold.events');
    expect(events.args.url).toEqual({ authorization: 'iam' });
    expect(events.args.streaming).toBe(true);
    expect(seconds(events.args.timeout)).toBe(900);
    expect(events.args.environment.LEASEHOLD_DB_POOL_MAX).toBe('1');
    expect(events.args.environment.LEASEHOLD_DB_USER).toBe('leasehold');
    // It reads batches only: no invoke, no events, no S3.
    expect(permissionsOf(events).flatMap((p) => p.actions)).toEqual(['rds-db:connect']);
    const url = (events.instance as { url: string }).url;
    expect(url).toMatch(/^https:\/\/.+\.lambda-url\..+\.on\.aws\/$/);
    expect((outputs as { events?: string }).events).toBe(url);
    // Only this function has a URL: the API stays behind API Gateway.
    expect(
      functions(world)
        .filter((r) => r.args.url)
        .map((r) => r.name),
    ).toEqual(['RunnerEvents']);
  });

  it("enables IAM database auth and TLS on the instance, and grants rds-db:connect for each function's own user only", async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const pg = world.one('sst.aws.Postgres', 'RunnerDatabase');
    expect(pg.args.vpc).toBe(world.one('sst.aws.Vpc', 'RunnerVpc').instance);
    const instance = applyTransform(pg.args.transform?.instance, { engine: 'postgres' }).args;
    expect(instance.iamDatabaseAuthenticationEnabled).toBe(true);
    // SST's parameter group sets rds.force_ssl=0; the transform must end with 1.
    const params = applyTransform(pg.args.transform?.parameterGroup, {
      family: 'postgres17',
      parameters: [{ name: 'rds.force_ssl', value: '0' }],
    }).args.parameters as { name: string; value: string }[];
    expect(params.filter((p) => p.name === 'rds.force_ssl').map((p) => p.value)).toEqual(['1']);

    const userArn = (user: string) => `arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:${DB_RESOURCE_ID}/${user}`;
    const connecting = functions(world).filter((r) => permissionsOf(r).some((p) => p.actions.includes('rds-db:connect')));
    expect(connecting.map((r) => r.name).sort()).toEqual(RUNNER_FUNCTIONS);
    for (const r of connecting) {
      const resources = permissionsOf(r)
        .filter((p) => p.actions.includes('rds-db:connect'))
        .flatMap((p) => p.resources);
      // The scheduler connects as its own user, outside the fleet's connection limit.
      const user = r.name === 'RunnerScheduler' ? 'leasehold_scheduler' : 'leasehold';
      expect(resources, r.name).toEqual([userArn(user)]);
      expect(r.args.environment.LEASEHOLD_DB_USER, r.name).toBe(user);
    }
  });

  it('gives the runner functions the agreed environment, with IAM auth and no password', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const workerName = (fn(world, 'Worker').instance as { name: string }).name;
    for (const name of RUNNER_FUNCTIONS) {
      const env = world.one('sst.aws.Function', name).args.environment as Record<string, string>;
      expect(env, name).toEqual({
        LEASEHOLD_DB_HOST: DB_HOST,
        LEASEHOLD_DB_PORT: '5432',
        LEASEHOLD_DB_NAME: 'leasehold',
        LEASEHOLD_DB_USER: name === 'RunnerScheduler' ? 'leasehold_scheduler' : 'leasehold',
        LEASEHOLD_DB_IAM_AUTH: 'true',
        LEASEHOLD_DB_POOL_MAX: name === 'RunnerEvents' ? '1' : '4',
        LEASEHOLD_WORKER_FUNCTION: workerName,
        LEASEHOLD_MAX_WORKERS: '10',
        LEASEHOLD_DEADLINE_MARGIN_MS: '10000',
        LEASEHOLD_WORKER_TIMEOUT_MS: '900000',
        LEASEHOLD_DRAIN_MS: '5000',
        LEASEHOLD_EVENT_BUS: (world.one('sst.aws.Bus', 'RunnerEvents').instance as { name: string }).name,
      });
    }
    // Only the migration gets the master password, to create the IAM user.
    const migrate = fn(world, 'Migrate').args.environment as Record<string, string>;
    // It also provisions the scheduler's user, and the runner's user's connection limit less the reserve.
    expect(migrate).toMatchObject({
      LEASEHOLD_DB_IAM_AUTH: 'false',
      LEASEHOLD_DB_USER: 'postgres',
      LEASEHOLD_DB_IAM_USER: 'leasehold',
      LEASEHOLD_DB_SCHEDULER_USER: 'leasehold_scheduler',
      LEASEHOLD_DB_RESERVED_CONNECTIONS: '8',
    });
    expect(migrate.LEASEHOLD_DB_PASSWORD).toBeTruthy();
  });

  it('sets only variables the runtime configuration reads', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const config = readFileSync(join(root, 'src/runtime/config.ts'), 'utf8');
    const names = new Set(functions(world).flatMap((r) => Object.keys(r.args.environment ?? {})));
    expect(names.size).toBeGreaterThan(8);
    for (const name of names) expect(config, name).toMatch(new RegExp(`\\b${name}:`));
  });

  it('ships the migration files with the migrate function and tells it where they are', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    for (const r of functions(world)) {
      for (const { from } of (r.args.copyFiles ?? []) as { from: string }[])
        expect(existsSync(join(root, from)), from).toBe(true);
    }
    const migrate = fn(world, 'Migrate');
    const [copy, ...more] = migrate.args.copyFiles as { from: string; to: string }[];
    expect(more).toHaveLength(0);
    // In a clone, the sources: a build that is behind never ships old migrations.
    expect(copy!.from).toBe('src/store/migrations');
    expect(readdirSync(join(root, copy!.from)).filter((f) => /^\d+_.+\.sql$/.test(f)).length).toBeGreaterThan(0);
    expect(migrate.args.environment.LEASEHOLD_MIGRATIONS_DIR).toBe(`/var/task/${copy!.to}`);
  });

  it('subscribes the trigger to start-batch events on the bus', async () => {
    noExistingDatabase();
    const { world, outputs } = await deploy();
    const trigger = fn(world, 'Trigger');
    const subscriptions = world.calls.filter((c) => c.method === 'subscribe');
    expect(subscriptions).toHaveLength(1);
    const [sub] = subscriptions;
    expect(sub!.on.type).toBe('sst.aws.Bus');
    expect(sub!.args[1]).toBe(trigger.instance);
    expect(sub!.args[2].pattern.detailType).toEqual([START_BATCH_DETAIL_TYPE]);
    expect(outputs.bus).toBe((sub!.on.instance as { name: string }).name);
  });

  it('runs the scheduler every minute', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const cron = world.one('sst.aws.CronV2', 'RunnerSchedulerCron');
    expect(cron.args.function).toBe(fn(world, 'Scheduler').instance);
    expect(cron.args.schedule).toBe('rate(1 minute)');
  });

  it('sends each declared schedule to the trigger with a valid start-batch event of a job the runner has', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const trigger = fn(world, 'Trigger');
    const component = world.one('leasehold:aws:Leasehold', 'Runner');
    const declared = (component.instance as { settings: { schedules: ScheduleDeclaration[] } }).settings.schedules;
    const crons = world.of('sst.aws.CronV2').filter((c) => c.name !== 'RunnerSchedulerCron');
    expect(crons).toHaveLength(declared.length);
    expect(declared.length).toBeGreaterThan(0);
    // functions/leasehold.ts runs the built-in jobs.
    const jobs = builtinJobs.map((j) => j.name);
    const name = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;
    for (const [i, c] of crons.entries()) {
      const s = declared[i]!;
      expect(c.name).toBe(
        `RunnerSchedule${s.name
          .split('-')
          .map((p) => p[0]!.toUpperCase() + p.slice(1))
          .join('')}`,
      );
      expect(c.args.function, c.name).toBe(trigger.instance);
      expect(c.args.schedule).toBe(s.schedule);
      expect(c.args.enabled).toBe(s.enabled ?? true);
      const event = c.args.event;
      expect(event['detail-type']).toBe(START_BATCH_DETAIL_TYPE);
      // The request key: the schedule's name plus the time EventBridge Scheduler fills in.
      expect(event.id).toBe(`schedule:${s.name}:<aws.scheduler.scheduled-time>`);
      expect(jobs).toContain(event.detail.job);
      expect(event.detail.tenant).toMatch(name);
      expect(event.detail.datasource).toMatch(name);
      expect(event.detail.params).toEqual(expect.any(Object));
      expect(Array.isArray(event.detail.params)).toBe(false);
      // It survives the JSON the schedule's input is.
      expect(JSON.parse(JSON.stringify(event))).toEqual(event);
    }
  });

  it('makes schedule and bus events the trigger reads, keyed once per firing and per event', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    // The runtime's reader, by a computed path: this test checks the contract, tsc the types.
    const runtime = (await import(/* @vite-ignore */ join(root, 'src/trigger/trigger.ts'))) as {
      readTriggerEvent(event: unknown): { job: string; tenant: string; datasource: string; params: object; requestKey: string };
    };
    // EventBridge Scheduler replaces its placeholders in the input text when a schedule fires.
    const fire = (c: Recorded, time: string) =>
      JSON.parse(
        JSON.stringify(c.args.event)
          .replaceAll('<aws.scheduler.scheduled-time>', time)
          .replaceAll(
            '<aws.scheduler.schedule-arn>',
            `arn:aws:scheduler:${REGION}:${ACCOUNT}:schedule/default/leasehold-dev-${c.name}-abc`,
          ),
      ) as unknown;
    for (const c of world.of('sst.aws.CronV2').filter((x) => x.name !== 'RunnerSchedulerCron')) {
      const first = runtime.readTriggerEvent(fire(c, '2026-11-30T03:00:00Z'));
      expect(first).toMatchObject({
        job: c.args.event.detail.job,
        tenant: c.args.event.detail.tenant,
        params: c.args.event.detail.params,
      });
      expect(runtime.readTriggerEvent(fire(c, '2026-11-30T03:00:00Z')).requestKey).toBe(first.requestKey);
      expect(runtime.readTriggerEvent(fire(c, '2026-12-01T03:00:00Z')).requestKey).not.toBe(first.requestKey);
    }
    // A bus event as `aws events put-events` makes it (docs/deploy.md), matched by the rule.
    const sub = world.calls.find((x) => x.method === 'subscribe')!;
    const busEvent = {
      version: '0',
      id: '6a7e8feb-b491-4cf7-a9f1-bf3703467718',
      'detail-type': sub.args[2].pattern.detailType[0],
      source: 'my.app',
      account: ACCOUNT,
      time: '2026-11-30T10:00:00Z',
      region: REGION,
      resources: [],
      detail: { job: 'checksum', tenant: 'acme', datasource: 'files', params: { dir: '/var/task' } },
    };
    const started = runtime.readTriggerEvent(busEvent);
    expect(started.requestKey).toContain(busEvent.id);
    expect(runtime.readTriggerEvent({ ...busEvent }).requestKey).toBe(started.requestKey);
  });

  it('refuses schedules that could not start a batch', () => {
    const good: ScheduleDeclaration = {
      name: 'hourly',
      schedule: 'rate(1 hour)',
      job: 'checksum',
      tenant: 'acme',
      datasource: 'files',
      params: {},
    };
    expect(() => checkSchedules([good])).not.toThrow();
    expect(() => checkSchedules([good, good])).toThrow(/declared twice/);
    expect(() => checkSchedules([{ ...good, name: 'Hourly Run' }])).toThrow(/name/);
    expect(() => checkSchedules([{ ...good, schedule: 'every hour' as never }])).toThrow(/schedule/);
    expect(() => checkSchedules([{ ...good, tenant: '' }])).toThrow(/tenant/);
    expect(() => checkSchedules([{ ...good, datasource: '-x' }])).toThrow(/datasource/);
    expect(() => checkSchedules([{ ...good, params: [] as never }])).toThrow(/params/);
    expect(() => checkSchedules([{ ...good, toleratedFailures: { count: 2 } }])).not.toThrow();
    expect(() => checkSchedules([{ ...good, toleratedFailures: { percent: 12.5 } }])).not.toThrow();
    for (const t of [{ count: -1 }, { count: 1.5 }, { percent: 101 }, { count: 1, percent: 1 }, {}, null]) {
      expect(() => checkSchedules([{ ...good, toleratedFailures: t as never }]), JSON.stringify(t)).toThrow(/toleratedFailures/);
    }
    // The tolerance travels in the schedule's event, as the trigger reads it.
    expect(scheduleEvent({ ...good, toleratedFailures: { percent: 5 } }).detail).toEqual({
      job: 'checksum',
      tenant: 'acme',
      datasource: 'files',
      params: {},
      toleratedFailures: { percent: 5 },
    });
    expect(scheduleEvent(good).detail).not.toHaveProperty('toleratedFailures');
  });

  it('runs migrations on every deploy before any function takes traffic', async () => {
    noExistingDatabase();
    const before = Date.now();
    const { world } = await deploy();
    const migrate = fn(world, 'Migrate');
    const [invocation, ...more] = world.of('aws.lambda.Invocation');
    expect(more).toHaveLength(0);
    expect(invocation!.args.functionName).toBe((migrate.instance as { name: string }).name);
    expect(invocation!.opts?.dependsOn).toContain(migrate.instance);
    // A new trigger value every deploy replaces the invocation, so it runs again.
    expect(Number(invocation!.args.triggers.deployedAt)).toBeGreaterThanOrEqual(before);
    expect(Number(invocation!.args.triggers.deployedAt)).toBeLessThanOrEqual(Date.now());
    for (const r of functions(world)) {
      const { opts } = applyTransform(r.args.transform?.function, {}, {});
      const deps = [opts.dependsOn ?? []].flat();
      if (r.name === 'RunnerMigrate') expect(deps, r.name).not.toContain(invocation!.instance);
      else expect(deps, r.name).toContain(invocation!.instance);
    }
  });

  it('keeps production data: deletion protection and a final snapshot', async () => {
    noExistingDatabase();
    const { world } = await deploy('production');
    const instance = applyTransform(world.one('sst.aws.Postgres', 'RunnerDatabase').args.transform?.instance, {}).args;
    expect(instance).toMatchObject({
      iamDatabaseAuthenticationEnabled: true,
      deletionProtection: true,
      skipFinalSnapshot: false,
      finalSnapshotIdentifier: 'leasehold-production-runner-final',
    });
  });

  it('uses an existing database given at deploy time instead of creating one', async () => {
    vi.stubEnv('LEASEHOLD_DATABASE_HOST', 'db.example.internal');
    vi.stubEnv('LEASEHOLD_DATABASE_PORT', '6432');
    vi.stubEnv('LEASEHOLD_DATABASE_NAME', 'runner');
    vi.stubEnv('LEASEHOLD_DATABASE_USER', 'runner_iam');
    vi.stubEnv('LEASEHOLD_DATABASE_RESOURCE_ID', 'db-EXISTING123');
    vi.stubEnv('LEASEHOLD_VPC_SUBNETS', 'subnet-1, subnet-2');
    vi.stubEnv('LEASEHOLD_VPC_SECURITY_GROUPS', 'sg-1');
    const { world, outputs } = await deploy();
    expect(world.of('sst.aws.Postgres')).toHaveLength(0);
    expect(world.of('sst.aws.Vpc')).toHaveLength(0);
    const userArn = `arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:db-EXISTING123/runner_iam`;
    for (const r of functions(world)) {
      expect(r.args.vpc, r.name).toEqual({ privateSubnets: ['subnet-1', 'subnet-2'], securityGroups: ['sg-1'] });
      expect(r.args.environment, r.name).toMatchObject({
        LEASEHOLD_DB_HOST: 'db.example.internal',
        LEASEHOLD_DB_PORT: '6432',
        LEASEHOLD_DB_NAME: 'runner',
        LEASEHOLD_DB_USER: 'runner_iam',
        LEASEHOLD_DB_IAM_AUTH: 'true',
      });
      expect(r.args.environment.LEASEHOLD_DB_PASSWORD, r.name).toBeUndefined();
      const connect = permissionsOf(r).filter((p) => p.actions.includes('rds-db:connect'));
      expect(
        connect.flatMap((p) => p.resources),
        r.name,
      ).toEqual([userArn]);
    }
    expect(outputs.database).toBe('db.example.internal');
  });

  it('refuses an existing database without its resource id', () => {
    expect(() => databaseFromEnv({ LEASEHOLD_DATABASE_HOST: 'db.example.internal' })).toThrow(/LEASEHOLD_DATABASE_RESOURCE_ID/);
    expect(() =>
      databaseFromEnv({
        LEASEHOLD_DATABASE_HOST: 'db.example.internal',
        LEASEHOLD_DATABASE_RESOURCE_ID: 'db-ABC',
        LEASEHOLD_VPC_SUBNETS: 'subnet-1',
      }),
    ).toThrow(/LEASEHOLD_VPC_SECURITY_GROUPS/);
  });

  it('returns the API URL, the progress stream URL, the bus, the worker and the database host as outputs', async () => {
    noExistingDatabase();
    const { world, outputs } = await deploy();
    expect(outputs).toEqual({
      api: (world.one('sst.aws.ApiGatewayV2', 'RunnerHttpApi').instance as { url: string }).url,
      events: (fn(world, 'Events').instance as { url: string }).url,
      bus: (world.one('sst.aws.Bus', 'RunnerEvents').instance as { name: string }).name,
      worker: 'leasehold-dev-runner-worker',
      database: DB_HOST,
    });
    const registered = world.calls.find((c) => c.method === 'registerOutputs');
    expect(registered?.args[0]).toMatchObject({ url: outputs.api, busName: outputs.bus, workerName: outputs.worker });
  });
});

describe('the Leasehold component, constructed directly', () => {
  async function component(args: Record<string, unknown>, stage = 'dev') {
    const world = installStandIns(stage, { root });
    const { Leasehold } = await import('../../infra/index.js');
    const runner = new Leasehold('Jobs', { handlers: 'functions/leasehold', ...args } as never);
    return { world, runner };
  }
  const arnOf = (world: World, name: string) => (world.one('sst.aws.Function', name).instance as { arn: string }).arn;

  it('grants the worker invoke on each invokable function, named by function, name or ARN, and tells the runtime their names', async () => {
    const { world } = await component({ handlers: './functions/leasehold.ts' });
    const legacyArn = 'arn:aws:lambda:eu-west-1:123456789012:function:legacy-report:live';
    removeStandIns();
    const score = { name: 'score-fn', arn: `arn:aws:lambda:${REGION}:${ACCOUNT}:function:score-fn` };
    const built = await component({ invokable: { score, legacy: legacyArn, resize: 'resize-images' } });
    const worker = arnOf(built.world, 'JobsWorker');
    expect(invokeGrants(built.world).JobsWorker).toEqual(
      [worker, score.arn, legacyArn, `arn:aws:lambda:${REGION}:${ACCOUNT}:function:resize-images`].sort(),
    );
    for (const role of ['Api', 'Scheduler', 'Trigger']) expect(invokeGrants(built.world)[`Jobs${role}`], role).toEqual([worker]);
    expect(built.world.one('sst.aws.Function', 'JobsWorker').args.environment.LEASEHOLD_INVOKABLE).toBe(
      `score=${score.arn},legacy=${legacyArn},resize=resize-images`,
    );
    // The variable is one the runtime reads the same way.
    const { parseInvokable } = await import('../../src/runtime/config.js');
    expect(parseInvokable(built.world.one('sst.aws.Function', 'JobsApi').args.environment.LEASEHOLD_INVOKABLE)).toEqual({
      score: score.arn,
      legacy: legacyArn,
      resize: 'resize-images',
    });
    // A list of names and ARNs: each known by its function name.
    removeStandIns();
    const listed = await component({ invokable: ['resize-images', legacyArn] });
    expect(listed.world.one('sst.aws.Function', 'JobsWorker').args.environment.LEASEHOLD_INVOKABLE).toBe(
      `resize-images=resize-images,legacy-report=${legacyArn}`,
    );
    expect(world.of('sst.aws.Function').every((f) => String(f.args.handler).startsWith('functions/leasehold.'))).toBe(true);
  });

  it('grants S3 least privilege: read on the source buckets, put on the result prefixes, checks for the API and trigger', async () => {
    removeStandIns();
    const { world } = await component({
      s3: { sources: ['in-bucket', 'in-bucket', 'more-in'], results: [{ bucket: 'out-bucket', prefix: 'results/' }] },
    });
    const s3Of = (fn: string) =>
      permissionsOf(world.one('sst.aws.Function', fn)).filter((p) => p.actions.some((a) => a.startsWith('s3:')));
    expect(s3Of('JobsWorker')).toEqual([
      { actions: ['s3:ListBucket'], resources: ['arn:aws:s3:::in-bucket', 'arn:aws:s3:::more-in'] },
      { actions: ['s3:GetObject', 's3:GetObjectVersion'], resources: ['arn:aws:s3:::in-bucket/*', 'arn:aws:s3:::more-in/*'] },
      { actions: ['s3:PutObject', 's3:AbortMultipartUpload'], resources: ['arn:aws:s3:::out-bucket/results/*'] },
      { actions: ['s3:ListBucketMultipartUploads'], resources: ['arn:aws:s3:::out-bucket'] },
    ]);
    expect(s3Of('JobsScheduler')).toEqual([
      { actions: ['s3:PutObject', 's3:AbortMultipartUpload'], resources: ['arn:aws:s3:::out-bucket/results/*'] },
      { actions: ['s3:ListBucketMultipartUploads'], resources: ['arn:aws:s3:::out-bucket'] },
    ]);
    for (const fn of ['JobsApi', 'JobsTrigger']) {
      expect(s3Of(fn), fn).toEqual([
        { actions: ['s3:ListBucket'], resources: ['arn:aws:s3:::in-bucket', 'arn:aws:s3:::more-in', 'arn:aws:s3:::out-bucket'] },
        { actions: ['s3:GetObject'], resources: ['arn:aws:s3:::in-bucket/*', 'arn:aws:s3:::more-in/*'] },
      ]);
    }
    expect(s3Of('JobsMigrate')).toEqual([]);
    // Never a wildcard bucket, and nothing on S3 without the option.
    for (const p of functions(world).flatMap((r) => permissionsOf(r))) {
      for (const r of p.resources) if (String(r).startsWith('arn:aws:s3')) expect(String(r)).not.toMatch(/^arn:aws:s3:::\*/);
    }
    removeStandIns();
    await expect(component({ s3: { sources: ['*'] } })).rejects.toThrow(/"\*" is not an S3 bucket name/);
    removeStandIns();
    await expect(component({ s3: { results: [{ bucket: 'out-bucket', prefix: 'a*' }] } })).rejects.toThrow(/holds a wildcard/);
    removeStandIns();
    const plain = await component({});
    expect(
      functions(plain.world)
        .flatMap((r) => permissionsOf(r))
        .filter((p) => p.actions.some((a) => a.startsWith('s3:'))),
    ).toEqual([]);
  });

  it('refuses a wildcard, a bad name or a component in a list', async () => {
    await expect(component({ invokable: ['arn:aws:lambda:us-east-1:123456789012:function:*'] })).rejects.toThrow(
      /wildcards are refused/,
    );
    removeStandIns();
    await expect(component({ invokable: { all: '*' } })).rejects.toThrow(
      /invokable\.all: "\*" is not a Lambda function name or ARN/,
    );
    removeStandIns();
    await expect(component({ invokable: { 'not ok': 'fn' } })).rejects.toThrow(/"not ok" is not a name batches can use/);
    removeStandIns();
    await expect(component({ invokable: [{ name: 'x', arn: 'arn:x' }] })).rejects.toThrow(/give functions by name/);
  });

  it('refuses a handler file that is not there, and environment variables the component sets itself', async () => {
    await expect(component({ handlers: 'src/missing' })).rejects.toThrow(/handlers: no src\/missing\.ts/);
    removeStandIns();
    await expect(component({ environment: { LEASEHOLD_DB_HOST: 'elsewhere' } })).rejects.toThrow(
      /environment\.LEASEHOLD_DB_HOST: the component sets it/,
    );
  });

  it('applies transforms the way SST components do: objects merged, functions editing args; migrations stay first', async () => {
    const seen: string[] = [];
    const { world } = await component({
      environment: { MY_SETTING: 'on', LEASEHOLD_MAX_RUNS: '8' },
      link: ['bucket'],
      permissions: [{ actions: ['s3:GetObject'], resources: ['arn:aws:s3:::my-bucket/*'] }],
      worker: { reservedConcurrency: 3, memory: '2048 MB' },
      api: { timeoutSeconds: 20 },
      transform: {
        function: (args: Record<string, unknown>, _opts: unknown, name: string) => {
          seen.push(name);
          args.architecture = 'arm64';
        },
        worker: { memory: '3008 MB' },
        httpApi: { cors: false },
        vpc: (args: Record<string, unknown>) => {
          args.az = 3;
        },
      },
    });
    expect(seen.sort()).toEqual(['JobsApi', 'JobsEvents', 'JobsMigrate', 'JobsScheduler', 'JobsTrigger', 'JobsWorker']);
    const worker = world.one('sst.aws.Function', 'JobsWorker');
    expect(worker.args).toMatchObject({
      memory: '3008 MB',
      architecture: 'arm64',
      concurrency: { reserved: 3 },
      link: ['bucket'],
    });
    expect(worker.args.environment).toMatchObject({ MY_SETTING: 'on', LEASEHOLD_MAX_RUNS: '8' });
    expect(permissionsOf(worker).some((p) => p.actions.includes('s3:GetObject'))).toBe(true);
    expect(permissionsOf(world.one('sst.aws.Function', 'JobsMigrate'))).toEqual(
      expect.not.arrayContaining([expect.objectContaining({ actions: ['s3:GetObject'] })]),
    );
    expect(seconds(world.one('sst.aws.Function', 'JobsApi').args.timeout)).toBe(20);
    expect(world.one('sst.aws.ApiGatewayV2', 'JobsHttpApi').args.cors).toBe(false);
    expect(world.one('sst.aws.Vpc', 'JobsVpc').args.az).toBe(3);
    const invocation = world.one('aws.lambda.Invocation', 'JobsMigrations');
    for (const name of ['JobsWorker', 'JobsApi']) {
      const { opts } = applyTransform(world.one('sst.aws.Function', name).args.transform?.function, {}, {});
      expect([opts.dependsOn].flat(), name).toContain(invocation.instance);
    }
    // Function names carry the component's name.
    expect((worker.instance as { name: string }).name).toBe('leasehold-dev-jobs-worker');
  });

  it("sizes the worker's reserved concurrency so that its pools fit the runner's user's connection limit", async () => {
    // db.t4g.micro: max_connections about 70 (estimated, erring low), 3 for superusers, 8 reserved.
    const { world, runner } = await component({});
    expect(runner.settings.budget).toEqual({
      maxConnections: 70,
      superuserReserved: 3,
      reservedConnections: 8,
      poolMax: 4,
      runtimeLimit: 59,
      workerConnections: 40,
    });
    const worker = world.one('sst.aws.Function', 'JobsWorker');
    const reserved = worker.args.concurrency.reserved as number;
    const poolMax = Number(worker.args.environment.LEASEHOLD_DB_POOL_MAX);
    expect(reserved).toBe(10);
    expect(reserved * poolMax).toBeLessThanOrEqual(runner.settings.budget!.runtimeLimit);
    removeStandIns();

    // Bigger pools: the default comes down to what fits (58 / 8 → 7 workers), and every function gets the pool size.
    const big = await component({ database: { poolMax: 8, reservedConnections: 9 } });
    expect(big.world.one('sst.aws.Function', 'JobsWorker').args.concurrency.reserved).toBe(7);
    for (const name of ['JobsWorker', 'JobsScheduler', 'JobsApi', 'JobsTrigger']) {
      expect(big.world.one('sst.aws.Function', name).args.environment.LEASEHOLD_DB_POOL_MAX, name).toBe('8');
    }
    // The reserve holds the scheduler's pool and the migration: it must be at least 9 here.
    removeStandIns();
    expect(() => resolveSettings('dev', { handlers: 'functions/leasehold', database: { poolMax: 8 } })).toThrow(
      /database\.reservedConnections: 8 cannot hold/,
    );
    // A larger instance, or its max_connections given, leaves room for more.
    const large = resolveSettings('dev', {
      handlers: 'functions/leasehold',
      database: { instance: 'm7g.large', reservedConnections: 12 },
      worker: { reservedConcurrency: 150 },
    });
    expect(large.budget).toMatchObject({ maxConnections: 858, runtimeLimit: 843, workerConnections: 600 });
    const given = resolveSettings('dev', {
      handlers: 'functions/leasehold',
      database: { instance: 'x2g.large', maxConnections: 500 },
    });
    expect(given.budget).toMatchObject({ maxConnections: 500, runtimeLimit: 489 });
    expect(given.worker.reservedConcurrency).toBe(10);
  });

  it('with database.proxy, puts an RDS Proxy with end-to-end IAM auth in front of the instance for the worker, the API and the trigger, in pooler mode; the scheduler and the migration stay on the instance', async () => {
    const { world, runner } = await component({ database: { proxy: true }, worker: { reservedConcurrency: 40 } });
    const proxy = world.one('aws.rds.Proxy', 'JobsDatabaseProxy');
    const vpc = world.one('sst.aws.Vpc', 'JobsVpc').instance as { privateSubnets: string[]; securityGroups: string[] };
    const role = world.one('aws.iam.Role', 'JobsDatabaseProxyRole');
    // IAM from the clients to the proxy and from the proxy to the instance: no secret anywhere.
    expect(proxy.args).toEqual({
      name: 'leasehold-dev-jobs-proxy',
      engineFamily: 'POSTGRESQL',
      defaultAuthScheme: 'IAM_AUTH',
      requireTls: true,
      roleArn: (role.instance as { arn: string }).arn,
      vpcSubnetIds: vpc.privateSubnets,
      vpcSecurityGroupIds: vpc.securityGroups,
    });
    expect(JSON.parse(role.args.assumeRolePolicy as string).Statement).toEqual([
      { Effect: 'Allow', Principal: { Service: 'rds.amazonaws.com' }, Action: 'sts:AssumeRole' },
    ]);
    // The proxy may log in as the runner's user only.
    const [inline] = role.args.inlinePolicies as { policy: string }[];
    expect(JSON.parse(inline!.policy).Statement).toEqual([
      {
        Effect: 'Allow',
        Action: 'rds-db:connect',
        Resource: `arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:${DB_RESOURCE_ID}/leasehold`,
      },
    ]);
    // Its pool keeps to the runner's user's limit: 84 % of about 70 is 58 of 59.
    expect(runner.settings.budget).toMatchObject({
      runtimeLimit: 59,
      workerConnections: 160,
      proxy: { maxConnectionsPercent: 84, connections: 58 },
    });
    const group = world.one('aws.rds.ProxyDefaultTargetGroup', 'JobsDatabaseProxyTargetGroup');
    expect(group.args).toEqual({
      dbProxyName: proxy.args.name,
      connectionPoolConfig: { maxConnectionsPercent: 84, connectionBorrowTimeout: 10 },
    });
    expect(world.one('aws.rds.ProxyTarget', 'JobsDatabaseProxyTarget').args).toEqual({
      dbProxyName: proxy.args.name,
      targetGroupName: 'default',
      dbInstanceIdentifier: 'leasehold-database-standin',
    });

    // 40 workers × 4 connections reach the proxy; without it they would not fit the 59.
    expect(world.one('sst.aws.Function', 'JobsWorker').args.concurrency.reserved).toBe(40);
    const endpoint = (proxy.instance as { endpoint: string }).endpoint;
    const { loadConfig } = await import('../../src/runtime/config.js');
    for (const name of ['JobsWorker', 'JobsApi', 'JobsTrigger', 'JobsScheduler']) {
      const f = world.one('sst.aws.Function', name);
      const env = f.args.environment as Record<string, string>;
      const connects = permissionsOf(f)
        .filter((p) => p.actions.includes('rds-db:connect'))
        .flatMap((p) => p.resources);
      const config = loadConfig({ ...env, AWS_REGION: REGION });
      if (name === 'JobsScheduler') {
        // Inside the reserve, on the instance, as its own user.
        expect(env.LEASEHOLD_DB_HOST, name).toBe(DB_HOST);
        expect(config.db.pooler, name).toBe('none');
        expect(connects, name).toEqual([`arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:${DB_RESOURCE_ID}/leasehold_scheduler`]);
      } else {
        // IAM tokens for the proxy's endpoint, granted on the proxy, in pooler mode.
        expect(env.LEASEHOLD_DB_HOST, name).toBe(endpoint);
        expect(env.LEASEHOLD_DB_PORT, name).toBe('5432');
        expect(config.db, name).toMatchObject({
          host: endpoint,
          pooler: 'transaction',
          iamAuth: true,
          tls: 'rds',
          user: 'leasehold',
        });
        expect(connects, name).toEqual([`arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:${PROXY_RESOURCE_ID}/leasehold`]);
      }
    }
    // The migration connects to the instance as the master user, as without the proxy.
    const migrate = world.one('sst.aws.Function', 'JobsMigrate').args.environment as Record<string, string>;
    expect(migrate.LEASEHOLD_DB_HOST).toBe(DB_HOST);
    expect(migrate.LEASEHOLD_DB_POOLER).toBeUndefined();
    removeStandIns();

    // Without the option: no proxy, no pooler mode, and 40 workers are refused.
    const plain = await component({});
    expect(plain.world.of('aws.rds.Proxy')).toEqual([]);
    for (const f of plain.world.of('sst.aws.Function')) expect(f.args.environment.LEASEHOLD_DB_POOLER, f.name).toBeUndefined();
    expect(() => resolveSettings('dev', { handlers: 'functions/leasehold', worker: { reservedConcurrency: 40 } })).toThrow(
      /or put database\.proxy in front of it/,
    );
  });

  it('refuses a connection budget that cannot fit the database, naming the option', () => {
    const ok = { handlers: 'functions/leasehold' };
    // 20 workers × 4 connections = 80 > 59.
    expect(() => resolveSettings('dev', { ...ok, worker: { reservedConcurrency: 20 } })).toThrow(
      /^worker\.reservedConcurrency: 20 workers × database\.poolMax 4 = 80 connections exceed the runner's user's limit of 59 .*at most 14 workers fit/,
    );
    expect(() => resolveSettings('dev', { ...ok, worker: { reservedConcurrency: 14 } })).not.toThrow();
    // A class whose max_connections is not known.
    expect(() => resolveSettings('dev', { ...ok, database: { instance: 'x2g.large' } })).toThrow(
      /^database\.maxConnections: required with instance "x2g\.large"/,
    );
    // A reserve that leaves the runner's user less than one pool.
    expect(() => resolveSettings('dev', { ...ok, database: { maxConnections: 14 } })).toThrow(
      /^database\.reservedConnections: the runner's user would have 3 connections/,
    );
    // Exactly one pool fits: one worker.
    expect(resolveSettings('dev', { ...ok, database: { maxConnections: 15 } }).worker.reservedConcurrency).toBe(1);
    // Nonsense values.
    expect(() => resolveSettings('dev', { ...ok, database: { poolMax: 0 } })).toThrow(/^database\.poolMax/);
    expect(() => resolveSettings('dev', { ...ok, database: { maxConnections: -1 } })).toThrow(/^database\.maxConnections/);
    expect(() => resolveSettings('dev', { ...ok, database: { schedulerUser: 'leasehold' } })).toThrow(/^database\.schedulerUser/);
    // An existing database is checked when its max_connections is given, and not otherwise.
    const existing = { host: 'db.example', resourceId: 'db-ABC123' };
    expect(resolveSettings('dev', { ...ok, database: { existing } }).budget).toBeUndefined();
    expect(() =>
      resolveSettings('dev', {
        ...ok,
        database: { existing: { ...existing, maxConnections: 40 } },
        worker: { reservedConcurrency: 10 },
      }),
    ).toThrow(/^worker\.reservedConcurrency: 10 workers .* limit of 29/);
  });

  it("sets the worker's recursive loop detection deliberately: Terminate unless told Allow", async () => {
    const { world } = await component({});
    const worker = world.one('sst.aws.Function', 'JobsWorker');
    const [config, ...more] = world.of('aws.lambda.FunctionRecursionConfig');
    expect(more).toHaveLength(0);
    expect(config!.args).toEqual({ functionName: (worker.instance as { name: string }).name, recursiveLoop: 'Terminate' });
    expect([config!.opts?.dependsOn].flat()).toContain(worker.instance);
    removeStandIns();
    const allowed = await component({ worker: { recursiveLoop: 'Allow' } });
    expect(allowed.world.one('aws.lambda.FunctionRecursionConfig', 'JobsWorkerRecursion').args.recursiveLoop).toBe('Allow');
    removeStandIns();
    expect(() => resolveSettings('dev', { handlers: 'functions/leasehold', worker: { recursiveLoop: 'Off' as never } })).toThrow(
      /^worker\.recursiveLoop/,
    );
  });

  it('drops worker events older than maxEventAgeSeconds (60 s unless told) and never retries them', async () => {
    const { world } = await component({ worker: { maxEventAgeSeconds: 300 } });
    const worker = world.one('sst.aws.Function', 'JobsWorker');
    expect(worker.args.retries).toBe(0);
    expect(applyTransform(worker.args.transform?.eventInvokeConfig, { maximumRetryAttempts: 2 }).args).toEqual({
      maximumRetryAttempts: 0,
      maximumEventAgeInSeconds: 300,
    });
    removeStandIns();
    for (const bad of [30, 21_601, 90.5]) {
      expect(() => resolveSettings('dev', { handlers: 'functions/leasehold', worker: { maxEventAgeSeconds: bad } })).toThrow(
        /^worker\.maxEventAgeSeconds/,
      );
    }
  });

  it('puts Batch Finished events on its one bus only, from the functions that end batches', async () => {
    const { world } = await component({});
    const bus = world.one('sst.aws.Bus', 'JobsEvents').instance as { arn: string; name: string };
    const putters = functions(world).filter((r) => permissionsOf(r).some((p) => p.actions.includes('events:PutEvents')));
    expect(putters.map((r) => r.name).sort()).toEqual(['JobsApi', 'JobsScheduler', 'JobsWorker']);
    for (const r of putters) {
      expect(
        permissionsOf(r).filter((p) => p.actions.includes('events:PutEvents')),
        r.name,
      ).toEqual([{ actions: ['events:PutEvents'], resources: [bus.arn] }]);
      expect(r.args.environment.LEASEHOLD_EVENT_BUS).toBe(bus.name);
    }
    // No rules: one subscription (start-batch), no LEASEHOLD_RULES.
    expect(world.calls.filter((c) => c.method === 'subscribe')).toHaveLength(1);
    expect(world.one('sst.aws.Function', 'JobsTrigger').args.environment.LEASEHOLD_RULES).toBeUndefined();
  });

  it('subscribes the trigger to the Batch Finished events of the jobs its rules follow (after: on rules and schedules)', async () => {
    const { world } = await component({
      webhookSecret: 'a-secret-of-enough-length',
      rules: [{ name: 'then-transform', after: { job: 'extract', status: 'succeeded' }, job: 'transform', params: { f: 1 } }],
      schedules: [
        { name: 'nightly', schedule: 'rate(1 day)', job: 'extract', tenant: 'acme', datasource: 'files', params: {} },
        { name: 'report-failures', after: { job: 'transform', status: ['failed', 'cancelled'] }, job: 'report', tenant: 'ops' },
      ],
    });
    const trigger = world.one('sst.aws.Function', 'JobsTrigger');
    const subs = world.calls.filter((c) => c.method === 'subscribe');
    expect(subs.map((s) => s.args[0])).toEqual(['JobsStartBatch', 'JobsAfterJobs']);
    const after = subs[1]!;
    expect(after.args[1]).toBe(trigger.instance);
    expect(after.args[2]).toEqual({
      pattern: { source: ['leasehold'], detailType: ['Batch Finished'], detail: { job: ['extract', 'transform'] } },
    });
    // Only the real schedule became a schedule; both rules reach the trigger's configuration.
    expect(world.of('sst.aws.CronV2').map((c) => c.name)).toEqual(['JobsSchedulerCron', 'JobsScheduleNightly']);
    const rules = JSON.parse(trigger.args.environment.LEASEHOLD_RULES as string) as { name: string }[];
    expect(rules.map((r) => r.name)).toEqual(['then-transform', 'report-failures']);
    // The runtime reads them as the component wrote them.
    const { parseChainRules } = await import('../../src/trigger/index.js');
    expect(parseChainRules(trigger.args.environment.LEASEHOLD_RULES as string)).toMatchObject([
      { name: 'then-transform', after: { job: 'extract', status: ['succeeded'] }, job: 'transform', params: { f: 1 } },
      { name: 'report-failures', after: { job: 'transform', status: ['failed', 'cancelled'] }, job: 'report', tenant: 'ops' },
    ]);
    expect(trigger.args.environment.LEASEHOLD_WEBHOOK_SECRET).toBe('a-secret-of-enough-length');
  });

  it('refuses rules that could not start a batch, naming the rule and field', async () => {
    const { checkRules } = await import('../../infra/settings.js');
    expect(() => checkRules([{ name: 'Bad', after: { job: 'x' }, job: 'y' }])).toThrow(/rules\["Bad"\]\.name/);
    expect(() => checkRules([{ name: 'a', after: { job: 'x', status: 'done' as never }, job: 'y' }])).toThrow(/after\.status/);
    expect(() => checkRules([{ name: 'a', after: { job: '' }, job: 'y' }])).toThrow(/after\.job/);
    expect(() =>
      checkRules([
        { name: 'a', after: { job: 'x' }, job: 'y' },
        { name: 'a', after: { job: 'x' }, job: 'z' },
      ]),
    ).toThrow(/declared twice/);
  });

  it("keeps trigger events whose start failed after Lambda's retries in a dead-letter queue only the trigger may write", async () => {
    const { world, runner } = await component({});
    const queue = world.one('sst.aws.Queue', 'JobsTriggerFailures');
    const arn = (queue.instance as { arn: string }).arn;
    expect(applyTransform(queue.args.transform?.queue, {}).args.messageRetentionSeconds).toBe(1_209_600);
    const trigger = world.one('sst.aws.Function', 'JobsTrigger');
    // The Lambda function resource gets the queue as its dead-letter target.
    const lambda = applyTransform(trigger.args.transform?.function, { handler: 'x' }).args;
    expect(lambda.deadLetterConfig).toEqual({ targetArn: arn });
    const senders = functions(world).filter((r) => permissionsOf(r).some((p) => p.actions.includes('sqs:SendMessage')));
    expect(senders.map((r) => r.name)).toEqual(['JobsTrigger']);
    expect(permissionsOf(trigger).filter((p) => p.actions.includes('sqs:SendMessage'))).toEqual([
      { actions: ['sqs:SendMessage'], resources: [arn] },
    ]);
    expect(runner.nodes.triggerFailures).toBe(queue.instance);
    // The migrations still come first for it.
    const { opts } = applyTransform(trigger.args.transform?.function, {}, {});
    expect([opts.dependsOn].flat()).toContain(world.one('aws.lambda.Invocation', 'JobsMigrations').instance);
  });
});
