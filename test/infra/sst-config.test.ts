// sst.config.ts and infra/, evaluated with recording stand-ins for SST's globals and components
// (test/infra/stand-ins.ts): what a deploy would create, checked without AWS.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  APP_NAME,
  checkSchedules,
  checkSettings,
  PRODUCTION_STAGES,
  RUNTIME,
  schedules,
  stageSettings,
  START_BATCH_DETAIL_TYPE,
  type ScheduleDeclaration,
} from '../../infra/config.js';
import { builtinJobs } from '../../src/jobs/index.js';
import {
  ACCOUNT,
  applyTransform,
  DB_HOST,
  DB_RESOURCE_ID,
  installStandIns,
  REGION,
  removeStandIns,
  type Recorded,
  type World,
} from './stand-ins.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

interface SstConfig {
  app(input: { stage: string }): Record<string, unknown>;
  run(): Promise<Record<string, unknown>>;
}

/** Evaluate sst.config.ts afresh for `stage`, as `sst deploy --stage` would. */
async function deploy(stage = 'dev') {
  const world = installStandIns(stage);
  vi.resetModules();
  // A computed path: tsc must not follow it (sst.config.ts is typed by SST, not by this project).
  const path = join(root, 'sst.config.ts');
  const config = ((await import(/* @vite-ignore */ path)) as { default: SstConfig }).default;
  const app = config.app({ stage });
  const outputs = await config.run();
  return { world, app, outputs };
}

afterEach(() => {
  removeStandIns();
  vi.unstubAllEnvs();
});

/** Deploy-time variables of an existing database, unset unless a test sets them. */
function noExistingDatabase() {
  for (const name of ['LEASEHOLD_DATABASE_HOST', 'LEASEHOLD_VPC_SUBNETS', 'LEASEHOLD_VPC_SECURITY_GROUPS']) vi.stubEnv(name, '');
}

const functions = (w: World) => w.of('sst.aws.Function');
const fn = (w: World, name: string) => w.one('sst.aws.Function', name);

/** A function's handler string, with where it was declared. */
interface HandlerRef {
  where: string;
  handler: string;
}

/** Every handler the config names: functions, and any FunctionArgs or handler strings given to crons, buses and routes. */
function handlersOf(w: World): HandlerRef[] {
  const refs: HandlerRef[] = functions(w).map((r) => ({ where: `Function ${r.name}`, handler: r.args.handler }));
  const add = (where: string, target: unknown) => {
    if (typeof target === 'string' && !target.startsWith('arn:')) refs.push({ where, handler: target });
    else if (target && typeof target === 'object' && 'handler' in target) refs.push({ where, handler: String(target.handler) });
  };
  for (const c of w.of('sst.aws.CronV2')) add(`CronV2 ${c.name}`, c.args.function ?? c.args.job);
  for (const c of w.calls) add(`${c.on.name}.${c.method}(${String(c.args[0])})`, c.args[1]);
  return refs;
}

/**
 * What is wrong with `refs`: a handler `dir/file.export` must name `dir/file.ts` (or .js/.mjs)
 * under the project root that exports `export`.
 */
function handlerProblems(refs: HandlerRef[]): string[] {
  const problems: string[] = [];
  for (const { where, handler } of refs) {
    const m = /^([\w./-]+)\.([A-Za-z_$][\w$]*)$/.exec(handler ?? '');
    if (!m) {
      problems.push(`${where}: handler "${handler}" is not "path/file.export"`);
      continue;
    }
    const [, base, exported] = m as unknown as [string, string, string];
    const file = ['.ts', '.js', '.mjs'].map((ext) => join(root, base + ext)).find((f) => existsSync(f));
    if (!file) {
      problems.push(`${where}: handler "${handler}": ${base}.ts does not exist`);
      continue;
    }
    const source = readFileSync(file, 'utf8');
    const exports = new RegExp(
      `export\\s+(const|let|var|(async\\s+)?function)\\s+${exported}\\b|export\\s*\\{[^}]*\\b${exported}\\b[^}]*\\}`,
    );
    if (!exports.test(source)) problems.push(`${where}: handler "${handler}": ${base}.ts has no export "${exported}"`);
  }
  return problems;
}

/** `"900 seconds"` / `"15 minutes"` → seconds. */
function seconds(duration: string): number {
  const m = /^(\d+) (second|minute)s?$/.exec(duration);
  if (!m) throw new Error(`not a duration: ${duration}`);
  return Number(m[1]) * (m[2] === 'minute' ? 60 : 1);
}

interface Permission {
  actions: string[];
  resources: string[];
}
const permissionsOf = (r: Recorded): Permission[] => (r.args.permissions ?? []) as Permission[];

/** Does an IAM `pattern` (with `*` and `?`) match `value`? */
function iamMatches(pattern: string, value: string): boolean {
  const re = new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`);
  return re.test(value);
}

/** Functions allowed to invoke `target` through permissions or links. */
function invokersOf(w: World, target: Recorded): string[] {
  const arn = (target.instance as { arn: string }).arn;
  return functions(w)
    .filter(
      (r) =>
        permissionsOf(r).some(
          (p) => p.actions.some((a) => iamMatches(a, 'lambda:InvokeFunction')) && p.resources.some((res) => iamMatches(res, arn)),
        ) || ((r.args.link ?? []) as unknown[]).includes(target.instance),
    )
    .map((r) => r.name)
    .sort();
}

/** The functions that run the runner's code against the database (all but the migration). */
const RUNNER_FUNCTIONS = ['Api', 'Scheduler', 'Trigger', 'Worker'];

describe('sst.config.ts, evaluated', () => {
  it('names the app leasehold, homed on AWS, retaining and protecting only production stages', async () => {
    noExistingDatabase();
    const { app } = await deploy('dev');
    expect(app).toMatchObject({ name: APP_NAME, home: 'aws', removal: 'remove', protect: false });
    expect(app.version).toMatch(/^\^4\./);
    for (const stage of PRODUCTION_STAGES) {
      const prod = await deploy(stage);
      expect(prod.app).toMatchObject({ removal: 'retain', protect: true });
    }
  });

  it('points every handler at a file that exports it', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const refs = handlersOf(world);
    expect(refs.map((r) => r.handler).sort()).toEqual([
      'functions/api.handler',
      'functions/migrate.handler',
      'functions/scheduler.handler',
      'functions/trigger.handler',
      'functions/worker.handler',
    ]);
    expect(handlerProblems(refs)).toEqual([]);
  });

  it('reports a wrong handler path, file or export', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const refs = handlersOf(world).map((r) =>
      r.where === 'Function Worker'
        ? { ...r, handler: 'functions/wroker.handler' }
        : r.where === 'Function Scheduler'
          ? { ...r, handler: 'functions/scheduler.handle' }
          : r.where === 'Function Api'
            ? { ...r, handler: 'functions/api' }
            : r,
    );
    // Exactly the three mutated handlers are reported, beyond what the real config reports.
    const before = new Set(handlerProblems(handlersOf(world)));
    const added = handlerProblems(refs).filter((p) => !before.has(p));
    expect(added).toEqual([
      'Function Worker: handler "functions/wroker.handler": functions/wroker.ts does not exist',
      'Function Scheduler: handler "functions/scheduler.handle": functions/scheduler.ts has no export "handle"',
      'Function Api: handler "functions/api" is not "path/file.export"',
    ]);
  });

  it('runs every function on nodejs22.x in the VPC', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const vpc = world.one('sst.aws.Vpc', 'Vpc');
    expect(functions(world).length).toBe(5);
    for (const r of functions(world)) {
      expect(r.args.runtime, r.name).toBe(RUNTIME);
      expect(RUNTIME).toBe('nodejs22.x');
      expect(r.args.vpc, r.name).toBe(vpc.instance);
    }
  });

  it('lets functions in the VPC reach the Lambda Invoke API (NAT or a Lambda endpoint)', async () => {
    noExistingDatabase();
    for (const stage of ['dev', 'production']) {
      const { world } = await deploy(stage);
      const nat = world.one('sst.aws.Vpc', 'Vpc').args.nat;
      const endpoints = world.of('aws.ec2.VpcEndpoint').filter((e) => String(e.args.serviceName).endsWith('.lambda'));
      expect(['ec2', 'managed'].includes(nat) || endpoints.length > 0, stage).toBe(true);
      if (stage === 'production') expect(nat).toBe('managed');
    }
  });

  it("gives the worker a timeout beyond its deadline margin plus drain, and reserved concurrency", async () => {
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
  });

  it('refuses worker settings whose timeout leaves no room for margin and drain', () => {
    const s = stageSettings('dev', {});
    expect(() => checkSettings({ ...s, worker: { ...s.worker, timeoutSeconds: 15 } })).toThrow(/timeoutSeconds/);
    expect(() => checkSettings({ ...s, worker: { ...s.worker, drainMs: 10_000 } })).toThrow(/drainMs/);
    expect(() => checkSettings({ ...s, worker: { ...s.worker, timeoutSeconds: 901 } })).toThrow(/1\.\.900/);
    expect(() => checkSettings(s)).not.toThrow();
  });

  it('lets only the functions that dispatch invoke the worker: scheduler, API, trigger and the worker itself', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const worker = fn(world, 'Worker');
    // The trigger dispatches the batch it starts (src/runtime/trigger.ts); the migration never does.
    expect(invokersOf(world, worker)).toEqual(['Api', 'Scheduler', 'Trigger', 'Worker']);
    expect((worker.instance as { name: string }).name).toBe(`leasehold-dev-worker`);
    // No cron, bus rule or route targets the worker either.
    for (const c of world.of('sst.aws.CronV2')) expect(c.args.function, c.name).not.toBe(worker.instance);
    for (const c of world.calls) expect(c.args[1], `${c.on.name}.${c.method}`).not.toBe(worker.instance);
    for (const c of world.calls) expect(c.args[1], `${c.on.name}.${c.method}`).not.toBe((worker.instance as { arn: string }).arn);
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

  it('puts IAM auth on every route, covering README\'s HTTP API table', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const api = fn(world, 'Api');
    const routes = world.calls.filter((c) => c.method === 'route');
    expect(routes.length).toBeGreaterThan(0);
    for (const { args } of routes) {
      expect(args[2]?.auth, String(args[0])).toEqual({ iam: true });
      expect(args[1], String(args[0])).toBe((api.instance as { arn: string }).arn);
    }
    // Any later route defaults to IAM too.
    const gateway = world.one('sst.aws.ApiGatewayV2', 'HttpApi');
    expect(applyTransform(gateway.args.transform.route.args, {}).args.auth).toEqual({ iam: true });

    const shape = (path: string) => path.replace(/\{[^}]+\}/g, '{}');
    const declared = routes.map((c) => {
      const [method, path] = String(c.args[0]).split(' ') as [string, string];
      return { method, path: shape(path) };
    });
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const table = readme.slice(readme.indexOf('## HTTP API'), readme.indexOf('\n## ', readme.indexOf('## HTTP API') + 1));
    const documented = [...table.matchAll(/`(GET|POST|PUT|DELETE|PATCH) (\/[^`?\s]*)[^`]*`/g)].map((m) => ({
      method: m[1]!,
      path: shape(m[2]!),
    }));
    expect(documented.length).toBeGreaterThan(10);
    for (const d of documented) {
      expect(
        declared.some((r) => r.path === d.path && (r.method === 'ANY' || r.method === d.method)),
        `${d.method} ${d.path}`,
      ).toBe(true);
    }
    for (const r of declared) expect(documented.some((d) => d.path === r.path), r.path).toBe(true);
  });

  it('enables IAM database auth and TLS on the instance, and grants rds-db:connect for the runner user only', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const pg = world.one('sst.aws.Postgres', 'Database');
    expect(pg.args.vpc).toBe(world.one('sst.aws.Vpc', 'Vpc').instance);
    const instance = applyTransform(pg.args.transform?.instance, { engine: 'postgres' }).args;
    expect(instance.iamDatabaseAuthenticationEnabled).toBe(true);
    // SST's parameter group sets rds.force_ssl=0; the transform must end with 1.
    const params = applyTransform(pg.args.transform?.parameterGroup, {
      family: 'postgres17',
      parameters: [{ name: 'rds.force_ssl', value: '0' }],
    }).args.parameters as { name: string; value: string }[];
    expect(params.filter((p) => p.name === 'rds.force_ssl').map((p) => p.value)).toEqual(['1']);

    const userArn = `arn:aws:rds-db:${REGION}:${ACCOUNT}:dbuser:${DB_RESOURCE_ID}/leasehold`;
    const connecting = functions(world).filter((r) => permissionsOf(r).some((p) => p.actions.includes('rds-db:connect')));
    expect(connecting.map((r) => r.name).sort()).toEqual(RUNNER_FUNCTIONS);
    for (const r of connecting) {
      const resources = permissionsOf(r)
        .filter((p) => p.actions.includes('rds-db:connect'))
        .flatMap((p) => p.resources);
      expect(resources, r.name).toEqual([userArn]);
    }
  });

  it('gives the runner functions the agreed environment, with IAM auth and no password', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const workerName = (fn(world, 'Worker').instance as { name: string }).name;
    for (const name of RUNNER_FUNCTIONS) {
      const env = fn(world, name).args.environment as Record<string, string>;
      expect(env, name).toEqual({
        LEASEHOLD_DB_HOST: DB_HOST,
        LEASEHOLD_DB_PORT: '5432',
        LEASEHOLD_DB_NAME: 'leasehold',
        LEASEHOLD_DB_USER: 'leasehold',
        LEASEHOLD_DB_IAM_AUTH: 'true',
        LEASEHOLD_WORKER_FUNCTION: workerName,
        LEASEHOLD_DEADLINE_MARGIN_MS: '10000',
        LEASEHOLD_DRAIN_MS: '5000',
      });
    }
    // Only the migration gets the master password, to create the IAM user.
    const migrate = fn(world, 'Migrate').args.environment as Record<string, string>;
    expect(migrate).toMatchObject({ LEASEHOLD_DB_IAM_AUTH: 'false', LEASEHOLD_DB_USER: 'postgres', LEASEHOLD_DB_IAM_USER: 'leasehold' });
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
      for (const { from } of (r.args.copyFiles ?? []) as { from: string }[]) expect(existsSync(join(root, from)), from).toBe(true);
    }
    const migrate = fn(world, 'Migrate');
    const [copy, ...more] = migrate.args.copyFiles as { from: string; to: string }[];
    expect(more).toHaveLength(0);
    expect(readdirSync(join(root, copy!.from)).filter((f) => /^\d+_.+\.sql$/.test(f)).length).toBeGreaterThan(0);
    expect(migrate.args.environment.LEASEHOLD_MIGRATIONS_DIR).toBe(`/var/task/${copy!.to}`);
  });

  it('subscribes the trigger to start-batch events on the stage bus', async () => {
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
    const cron = world.one('sst.aws.CronV2', 'SchedulerCron');
    expect(cron.args.function).toBe(fn(world, 'Scheduler').instance);
    expect(cron.args.schedule).toBe('rate(1 minute)');
  });

  it('sends each declared schedule to the trigger with a valid start-batch event', async () => {
    noExistingDatabase();
    const { world } = await deploy();
    const trigger = fn(world, 'Trigger');
    const crons = world.of('sst.aws.CronV2').filter((c) => c.name !== 'SchedulerCron');
    expect(crons).toHaveLength(schedules.length);
    expect(schedules.length).toBeGreaterThan(0);
    const jobs = builtinJobs.map((j) => j.name);
    const name = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;
    for (const [i, c] of crons.entries()) {
      const declared = schedules[i]!;
      expect(c.args.function, c.name).toBe(trigger.instance);
      expect(c.args.schedule).toBe(declared.schedule);
      expect(c.args.enabled).toBe(declared.enabled ?? true);
      const event = c.args.event;
      expect(event['detail-type']).toBe(START_BATCH_DETAIL_TYPE);
      // The request key: the schedule's name plus the time EventBridge Scheduler fills in.
      expect(event.id).toBe(`schedule:${declared.name}:<aws.scheduler.scheduled-time>`);
      expect(jobs).toContain(event.detail.job);
      expect(event.detail.tenant).toMatch(name);
      expect(event.detail.datasource).toMatch(name);
      expect(event.detail.params).toEqual(expect.any(Object));
      expect(Array.isArray(event.detail.params)).toBe(false);
      // It survives the JSON the schedule's input is.
      expect(JSON.parse(JSON.stringify(event))).toEqual(event);
    }
  });

  it("makes schedule and bus events the trigger reads, keyed once per firing and per event", async () => {
    noExistingDatabase();
    const { world } = await deploy();
    // The runtime's reader, by a computed path: this test checks the contract, tsc the types.
    const runtime = (await import(/* @vite-ignore */ join(root, 'src/runtime/trigger.ts'))) as {
      readTriggerEvent(event: unknown): { job: string; tenant: string; datasource: string; params: object; requestKey: string };
    };
    // EventBridge Scheduler replaces its placeholders in the input text when a schedule fires.
    const fire = (c: Recorded, time: string) =>
      JSON.parse(
        JSON.stringify(c.args.event)
          .replaceAll('<aws.scheduler.scheduled-time>', time)
          .replaceAll('<aws.scheduler.schedule-arn>', `arn:aws:scheduler:${REGION}:${ACCOUNT}:schedule/default/leasehold-dev-${c.name}-abc`),
      ) as unknown;
    for (const c of world.of('sst.aws.CronV2').filter((x) => x.name !== 'SchedulerCron')) {
      const first = runtime.readTriggerEvent(fire(c, '2026-11-30T03:00:00Z'));
      expect(first).toMatchObject({ job: c.args.event.detail.job, tenant: c.args.event.detail.tenant, params: c.args.event.detail.params });
      expect(runtime.readTriggerEvent(fire(c, '2026-11-30T03:00:00Z')).requestKey).toBe(first.requestKey);
      expect(runtime.readTriggerEvent(fire(c, '2026-12-01T03:00:00Z')).requestKey).not.toBe(first.requestKey);
    }
    // A bus event as `aws events put-events` makes it (README, Deploy), matched by the rule.
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
      if (r.name === 'Migrate') expect(deps, r.name).not.toContain(invocation!.instance);
      else expect(deps, r.name).toContain(invocation!.instance);
    }
  });

  it('keeps production data: deletion protection and a final snapshot', async () => {
    noExistingDatabase();
    const { world } = await deploy('production');
    const instance = applyTransform(world.one('sst.aws.Postgres', 'Database').args.transform?.instance, {}).args;
    expect(instance).toMatchObject({
      iamDatabaseAuthenticationEnabled: true,
      deletionProtection: true,
      skipFinalSnapshot: false,
      finalSnapshotIdentifier: 'leasehold-production-final',
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
      expect(connect.flatMap((p) => p.resources), r.name).toEqual([userArn]);
    }
    expect(outputs.database).toBe('db.example.internal');
  });

  it('refuses an existing database without its resource id', () => {
    expect(() => stageSettings('dev', { LEASEHOLD_DATABASE_HOST: 'db.example.internal' })).toThrow(
      /LEASEHOLD_DATABASE_RESOURCE_ID/,
    );
    expect(() =>
      stageSettings('dev', {
        LEASEHOLD_DATABASE_HOST: 'db.example.internal',
        LEASEHOLD_DATABASE_RESOURCE_ID: 'db-ABC',
        LEASEHOLD_VPC_SUBNETS: 'subnet-1',
      }),
    ).toThrow(/LEASEHOLD_VPC_SECURITY_GROUPS/);
  });

  it('returns the API URL, the bus, the worker and the database host as outputs', async () => {
    noExistingDatabase();
    const { world, outputs } = await deploy();
    expect(outputs).toEqual({
      api: (world.one('sst.aws.ApiGatewayV2', 'HttpApi').instance as { url: string }).url,
      bus: (world.one('sst.aws.Bus', 'Events').instance as { name: string }).name,
      worker: 'leasehold-dev-worker',
      database: DB_HOST,
    });
  });
});
