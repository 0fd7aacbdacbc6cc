// `leasehold dev`: the same handlers as on AWS, with local drivers (docs/design.md, "Local mode").
// runDev checks its options and loads the app (app-file.ts), starts the services one by one
// (each with its stop step), prints the banner, runs the demos, waits, and stops in reverse order.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createWriteStream, existsSync, readFileSync, realpathSync, statSync, type WriteStream } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { delimiter, join, relative, resolve } from 'node:path';
import type { Context } from 'aws-lambda';
import { systemClock } from '../clock.js';
import { ApiClient, type ApiBatch } from '../client/index.js';
import { followBatch, Terminal } from '../terminal/index.js';
import { BatchWatcher, countOpenBatches } from '../batch/index.js';
import { loadConfig, type Config } from '../runtime/config.js';
import { requestWorkerShutdown, resetRuntimeDeps, setLogSink } from '../runtime/index.js';
import { forgetInvocations } from '../lease/index.js';
import { connect, migrate, type Sql } from '../store/index.js';
import { AppFileError, loadApp, type LocalApp } from './app-file.js';
import { createLambdaContext } from './context.js';
import { startEmbedded } from './embedded/index.js';
import { dashboardAssets } from './dashboard-assets.js';
import { batchEventsRoute } from './batch-events.js';
import { startLocalTraces, type LocalTracesMode } from './traces.js';
import { startHttpServer } from './http-server.js';
import { startLocalS3 } from './s3.js';
import { startSink } from './sink.js';
import { LocalPortInUseError } from './http-util.js';
import { createInvokeEndpoint, localLambdaEnv } from './invoke-endpoint.js';
import { createEventsEndpoint, localEventsEnv } from './events-endpoint.js';
import { parseChainRules } from '../trigger/index.js';

/** Options of {@link runDev}; durations in ms. */
export interface DevOptions {
  /** API port on 127.0.0.1. Default 3000. */
  port: number;
  /** Allow this directory and start a `checksum` batch over it. Default none. */
  demoDir?: string;
  /** Exit once no batch is open, printing `{ batchId, done, failed, seconds }` last. Default false. */
  exitWhenIdle?: boolean;
  /** Timeout of a local worker invocation, ms. Default 30,000. */
  timeoutMs?: number;
  /** Most local worker invocations at once. Default 8. */
  concurrency?: number;
  /** Scheduler interval, ms. Default 5,000. */
  scheduleMs?: number;
  /** Print the functions' JSON logs instead of writing them to `.leasehold/dev.log`. */
  verbose?: boolean;
  /**
   * Register two demo tenants with `outbox-delivery` units whose endpoints are the local sink,
   * and enqueue this many messages per second to them. Default 0: no demo tenants.
   */
  unitsDemoPerSecond?: number;
  /** How often the units status line is printed while units exist, ms. Default 3,000. */
  statusMs?: number;
  /** Project folder (data, logs, dev.json). Default the working directory. */
  cwd?: string;
  /**
   * The app file whose handlers to run (`export const { worker, scheduler, api, … } =
   * createHandlers(…)`, optionally `export const localFunctions = { name: handler }`), relative
   * to `cwd`; TypeScript is loaded with tsx. Default: this package's own runner (the built-in jobs).
   */
  appFile?: string;
}

/** What the options resolve to once checked, and the loaded app. */
interface Prepared {
  demoDir: string | undefined;
  config: Config;
  app: LocalApp;
  localNames: string[];
  timeoutMs: number;
  concurrency: number;
  scheduleMs: number;
  /** Local traces (`LEASEHOLD_TRACES`): what they are, and what stops them. */
  traces: { mode: LocalTracesMode; endpoint?: string; stop: () => Promise<void> };
}

/** The running stack's voice and what stopping it undoes. */
interface Stack {
  cwd: string;
  stateDir: string;
  /** One writer for the terminal: status lines and stop messages go above the demo's progress bar. */
  terminal: Terminal;
  say: (line: string) => void;
  /** The functions' logs (`.leasehold/dev.log`); undefined with `--verbose` (printed). */
  logStream: WriteStream | undefined;
  logFile: string;
  /**
   * Stopping runs these last-in first-out: first the services (servers, workers), then the
   * database, so what is still owned can be checked in between.
   */
  stopServices: (() => Promise<void>)[];
  stopDatabase: (() => Promise<void>)[];
}

/**
 * Run the local stack until Ctrl-C (or, with `exitWhenIdle`, until no batch is open): the
 * embedded PostgreSQL unless `DATABASE_URL` is set, migrations, the API behind a local HTTP
 * server, workers behind a local Lambda invoke endpoint, and the scheduler on a timer.
 * Stopping is graceful: workers hand off their runs and return owning nothing, then the
 * database stops. Resolves to the process exit code.
 */
export async function runDev(options: DevOptions): Promise<number> {
  const cwd = options.cwd ?? process.cwd();
  const stateDir = join(cwd, '.leasehold');
  await mkdir(stateDir, { recursive: true });
  const terminal = new Terminal(process.stderr);
  const say = (line: string) => terminal.say(line);
  const prepared = await prepare(options, cwd, say);
  if (typeof prepared === 'number') return prepared;
  // Function logs: a file unless --verbose.
  const logFile = join(stateDir, 'dev.log');
  const logStream = options.verbose ? undefined : createWriteStream(logFile, { flags: 'a' });
  if (logStream) setLogSink((line) => logStream.write(line + '\n'));
  const stack: Stack = { cwd, stateDir, terminal, say, logStream, logFile, stopServices: [], stopDatabase: [] };
  try {
    return await serve(options, prepared, stack);
  } catch (e) {
    say(`leasehold dev: ${(e as Error).message}`);
    await cleanup(stack);
    return 1;
  } finally {
    setLogSink(undefined);
    logStream?.end();
  }
}

/** Run `steps` last-in first-out; a step that fails is said and the rest still run. */
async function unwind(stack: Stack, steps: (() => Promise<void>)[]): Promise<void> {
  while (steps.length) {
    try {
      await steps.pop()!();
    } catch (e) {
      stack.say(`leasehold dev: while stopping: ${(e as Error).message}`);
    }
  }
}

/** Stop what is left: the services, then the database. */
async function cleanup(stack: Stack): Promise<void> {
  await unwind(stack, stack.stopServices);
  await unwind(stack, stack.stopDatabase);
}

/**
 * Check the options, set the environment the handlers read, and load the app. Answers the exit
 * code (2) after saying why, when something is wrong.
 */
async function prepare(options: DevOptions, cwd: string, say: (line: string) => void): Promise<Prepared | number> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const concurrency = options.concurrency ?? 8;
  const scheduleMs = options.scheduleMs ?? 5_000;
  let demoDir: string | undefined;
  if (options.demoDir) {
    demoDir = resolve(cwd, options.demoDir);
    if (!existsSync(demoDir)) {
      say(`leasehold dev: --demo ${options.demoDir}: does not exist`);
      return 2;
    }
    if (!statSync(demoDir).isDirectory()) {
      say(`leasehold dev: --demo ${options.demoDir}: not a directory`);
      return 2;
    }
    demoDir = realpathSync(demoDir);
  }
  // A start checks item timeouts against the worker's own timeout: here, the local workers'.
  if (!process.env.LEASEHOLD_WORKER_TIMEOUT_MS) {
    process.env.LEASEHOLD_WORKER_TIMEOUT_MS = String(Math.min(900_000, Math.max(1_000, timeoutMs)));
  }
  // Local workers live `timeoutMs`; unless told otherwise, leave them two thirds of it to work.
  if (!process.env.LEASEHOLD_DEADLINE_MARGIN_MS) {
    process.env.LEASEHOLD_DEADLINE_MARGIN_MS = String(Math.min(10_000, Math.floor(timeoutMs / 3)));
  }
  let config: Config;
  try {
    config = loadConfig();
  } catch (e) {
    say(`leasehold dev: ${(e as Error).message}`);
    return 2;
  }
  if (config.deadlineMarginMs >= timeoutMs) {
    say(
      `leasehold dev: --timeout-ms (${timeoutMs}) must be above LEASEHOLD_DEADLINE_MARGIN_MS (${config.deadlineMarginMs}): workers would stop before doing anything`,
    );
    return 2;
  }
  // The app's handlers, loaded before anything starts; they read the environment on their first
  // invocation, not when imported.
  let app: LocalApp;
  try {
    app = await loadApp(options.appFile, cwd);
  } catch (e) {
    say(`leasehold dev: ${e instanceof AppFileError ? e.message : ((e as Error)?.stack ?? e)}`);
    return 2;
  }
  const localNames = Object.keys(app.localFunctions);
  if (localNames.includes(config.workerFunction)) {
    say(
      `leasehold dev: localFunctions: "${config.workerFunction}" is the worker's name (LEASEHOLD_WORKER_FUNCTION): choose another`,
    );
    return 2;
  }
  // The app's chain rules, unless the environment names others (as the component sets them).
  if (process.env.LEASEHOLD_RULES === undefined && app.rules !== undefined) {
    try {
      process.env.LEASEHOLD_RULES = JSON.stringify(parseChainRules(app.rules));
    } catch (e) {
      say(`leasehold dev: ${options.appFile ?? 'the built-in runner'}: ${(e as Error).message}`);
      return 2;
    }
  }
  // lambda-invoke batches may call the app's local functions, unless told otherwise.
  if (process.env.LEASEHOLD_INVOKABLE === undefined && localNames.length) process.env.LEASEHOLD_INVOKABLE = localNames.join(',');
  let traces: Prepared['traces'];
  try {
    traces = await startLocalTraces(process.env.LEASEHOLD_TRACES);
  } catch (e) {
    say(`leasehold dev: ${(e as Error).message}`);
    return 2;
  }
  return { demoDir, config, app, localNames, timeoutMs, concurrency, scheduleMs, traces };
}

/** Two `assets` hooks: the first that answers a request wins. */
function either(
  a: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>,
  b: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>,
): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  return async (req, res) => (await a(req, res)) || b(req, res);
}

/** Start everything, run the demos, wait until told to stop (or idle), and stop. Answers the exit code. */
async function serve(options: DevOptions, p: Prepared, stack: Stack): Promise<number> {
  // Last out: spans of the stopping services are still printed.
  stack.stopServices.unshift(() => p.traces.stop());
  const { sql, applied, dbWhere, databaseUrl } = await startDatabase(stack, p.config);
  const invokeUrl = await startInvoke(stack, p, databaseUrl);
  const events = await startEvents(stack, p.app);
  const sink = await startKeptSink(stack);
  const s3Where = await startS3(stack);
  const server = await startHttpServer({
    port: options.port,
    handler: (event, context) => p.app.api(event, context) as never,
    assets: either(batchEventsRoute(new BatchWatcher(sql)), dashboardAssets()),
  });
  stack.stopServices.push(() => server.close());
  const scheduler = startScheduler(stack, p.app, p.scheduleMs);
  stack.stopServices.push(() => scheduler.stop());
  await writeDevJson(stack, server.url, invokeUrl);

  const client = new ApiClient(server.url);
  const { jobs, unitJobs } = await client.allJobs().then(
    (all) => ({ jobs: all.jobs.map((j) => j.name), unitJobs: all.unitJobs.map((j) => j.name) }),
    () => ({ jobs: [], unitJobs: [] }),
  );
  const ruleCount = parseChainRules(process.env.LEASEHOLD_RULES).length;
  const say = stack.say;
  say('leasehold dev');
  // The app's batch jobs and unit jobs, as its API knows them (`GET /jobs`), so a name to start
  // (`batch start`) or to put units of (`units put --job`) is at hand.
  say(
    `  app        ${options.appFile ?? 'the built-in runner'}; jobs: ${jobs.length ? jobs.join(', ') : 'none'}; unit jobs: ${unitJobs.length ? unitJobs.join(', ') : 'none'}`,
  );
  say(`  database   ${dbWhere}${applied.length ? `; applied ${applied.join(', ')}` : ''}`);
  say(`  s3         ${s3Where}`);
  say(`  api        ${server.url}`);
  say(`  dashboard  ${server.url}/`);
  say(
    `  invoke     ${invokeUrl} (worker "${p.config.workerFunction}", timeout ${p.timeoutMs / 1000} s, at most ${p.concurrency} at once)`,
  );
  if (p.localNames.length) say(`  functions  ${p.localNames.join(', ')} (local, for lambda-invoke batches)`);
  say(
    `  events     ${events.url} (PutEvents, bus ${process.env.LEASEHOLD_EVENT_BUS}; ${ruleCount} chain rule${ruleCount === 1 ? '' : 's'}${p.app.trigger ? '' : '; no trigger exported: events are only logged'})`,
  );
  say(`  scheduler  every ${p.scheduleMs / 1000} s (workers for units: the desired count, \`leasehold concurrency\`)`);
  say(
    `  sink       ${sink.url} (webhook endpoints for outbox-delivery units; LEASEHOLD_OUTBOX_ALLOW=${process.env.LEASEHOLD_OUTBOX_ALLOW})`,
  );
  say(`  logs       ${options.verbose ? 'printed' : relative(stack.cwd, stack.logFile)}`);
  if (p.traces.mode === 'console') say('  traces     printed as each span ends (LEASEHOLD_TRACES=console)');
  if (p.traces.mode === 'otlp') say(`  traces     sent to ${p.traces.endpoint} (LEASEHOLD_TRACES=otlp, OTLP/HTTP JSON)`);
  say('Ctrl-C stops (running batches are handed off).');

  const stop = onSignals(stack);
  startUnitsStatus(stack, client, sink, options.statusMs ?? 3_000);
  if (options.unitsDemoPerSecond && options.unitsDemoPerSecond > 0)
    await startUnitsDemo(stack, client, sink.url, options.unitsDemoPerSecond, stop);
  const demo = p.demoDir ? await runDemo(stack, client, p.demoDir, stop) : undefined;

  if (options.exitWhenIdle) {
    while (!stop.aborted && (await countOpenBatches(sql)) > 0) await systemClock.sleep(500, stop);
  } else if (!stop.aborted) {
    say(`serving; try: npx leasehold batch list`);
    await new Promise<void>((r) => stop.addEventListener('abort', () => r(), { once: true }));
  }

  const summary = demo ? await client.getBatch(demo).catch(() => undefined) : undefined;
  await unwind(stack, stack.stopServices);
  const owned = await sql<{ n: number }[]>`select count(*) as n from leasehold_runs`;
  say(owned[0].n === 0 ? 'stopped: nothing left owned' : `stopped: ${owned[0].n} run(s) of batches still live`);
  await cleanup(stack);
  if (options.exitWhenIdle && stop.aborted) return 130;
  if (options.exitWhenIdle) {
    console.log(
      JSON.stringify({
        batchId: demo ?? null,
        done: summary?.counts.done ?? 0,
        failed: summary?.counts.failed ?? 0,
        seconds: summary ? seconds(summary) : 0,
      }),
    );
  }
  return 0;
}

/**
 * The database (DATABASE_URL, else the embedded PostgreSQL), migrated, with a small pool of the
 * stack's own; the names of the migrations applied, and where it is for the banner.
 */
async function startDatabase(
  stack: Stack,
  config: Config,
): Promise<{ sql: Sql; applied: string[]; dbWhere: string; databaseUrl: string }> {
  let databaseUrl = process.env.DATABASE_URL;
  let dbWhere: string;
  if (databaseUrl) {
    dbWhere = `${redact(databaseUrl)} (DATABASE_URL)`;
  } else {
    const log = stack.logStream;
    const db = await startEmbedded({ log: log ? (l) => log.write(`[postgres] ${l}\n`) : undefined });
    stack.stopDatabase.push(() => db.stop());
    databaseUrl = db.url;
    dbWhere = `${redact(db.url)} (embedded PostgreSQL, data in ${relative(stack.cwd, db.dir) || db.dir})`;
  }
  const sql: Sql = connect(databaseUrl, { max: 2, ...(config.db.pooler === 'transaction' ? { pooler: 'transaction' } : {}) });
  stack.stopDatabase.push(() => sql.end({ timeout: 5 }));
  const applied = await migrate(sql);
  // Workers a previous local stack invoked died with it: they must not count as coming.
  await forgetInvocations(sql);
  return { sql, applied: applied.map((m) => m.name), dbWhere, databaseUrl };
}

/** The local Lambda invoke endpoint with the worker and the app's local functions; its URL. */
async function startInvoke(stack: Stack, p: Prepared, databaseUrl: string): Promise<string> {
  const roots = [...p.config.allowedRoots, ...(p.demoDir ? [p.demoDir] : [])];
  const invoke = createInvokeEndpoint({
    functions: { ...p.app.localFunctions, [p.config.workerFunction]: p.app.worker },
    timeoutMs: p.timeoutMs,
    // Local workers' usage is counted at LEASEHOLD_WORKER_MEMORY_MB (docs/design.md, "Usage and cost").
    memoryLimitInMB: p.config.runner.memoryMb,
    concurrency: p.concurrency,
    onError: (error, info) =>
      logLine(stack, {
        level: 'error',
        service: 'invoke',
        message: 'invocation failed',
        awsRequestId: info.awsRequestId,
        error: String(error),
      }),
  });
  const { url: invokeUrl } = await invoke.start();
  // The SDK's notice that its 2027 releases need Node 22 is noise for a local run.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  Object.assign(
    process.env,
    { DATABASE_URL: databaseUrl, LEASEHOLD_ALLOWED_ROOTS: roots.join(delimiter) },
    localLambdaEnv(invokeUrl),
  );
  stack.stopServices.push(async () => {
    requestWorkerShutdown();
    await invoke.stop({ wait: true });
    await resetRuntimeDeps();
  });
  return invokeUrl;
}

/**
 * The local bus: PutEvents from the real SDK client (Batch Finished events, and any the app
 * puts), routed to the trigger as the deployed bus's rules route them.
 */
async function startEvents(stack: Stack, app: LocalApp): Promise<{ url: string }> {
  const trigger = app.trigger;
  const events = await createEventsEndpoint({
    deliver: (event) =>
      trigger ? Promise.resolve(trigger(event, lambdaContext('leasehold-trigger', 120_000))) : Promise.resolve(undefined),
    onEvent: (event, routed) =>
      logLine(stack, {
        level: 'info',
        service: 'events',
        message: 'event put',
        detailType: event['detail-type'],
        source: event.source,
        routed: routed && trigger !== undefined,
        detail: event.detail,
      }),
    onError: (error, event) =>
      logLine(stack, { level: 'error', service: 'events', message: 'trigger failed', eventId: event.id, error: String(error) }),
  });
  Object.assign(process.env, localEventsEnv(events.url));
  process.env.LEASEHOLD_EVENT_BUS ??= 'leasehold-local';
  // Webhooks (notify) are signed: a key of this stack's own unless one is given.
  process.env.LEASEHOLD_WEBHOOK_SECRET ??= `whsec_${randomBytes(24).toString('base64')}`;
  // Stopped after the workers (first in the list: last in, first out), so their last sends land.
  stack.stopServices.unshift(() => events.close());
  return events;
}

/**
 * Webhook endpoints for outbox-delivery units: records what it receives. It listens on
 * loopback, which outbox delivery refuses unless allow-listed: allow its address (the handlers
 * read the variable when they check an endpoint). Its port is kept in the project folder's state
 * (.leasehold/sink.json), so endpoints registered against it (outbox-delivery units) still reach
 * it after a restart; a port taken meanwhile falls back to any free one, and says so.
 */
async function startKeptSink(stack: Stack): Promise<Sink> {
  const sinkState = join(stack.stateDir, 'sink.json');
  const keptPort = readKeptPort(sinkState);
  let sink;
  try {
    sink = await startSink({ port: keptPort ?? 0 });
  } catch (e) {
    if (!(e instanceof LocalPortInUseError) || keptPort === undefined) throw e;
    sink = await startSink({ port: 0 });
    stack.say(
      `leasehold dev: the sink's port ${keptPort} is taken; it now listens on ${sink.url}: endpoints registered against ${keptPort} (units put) do not reach it until put again`,
    );
  }
  await writeFile(sinkState, JSON.stringify({ port: new URL(sink.url).port ? Number(new URL(sink.url).port) : 0 }) + '\n');
  const started = sink;
  stack.stopServices.push(() => started.close());
  const sinkHost = new URL(sink.url).hostname;
  const allow = process.env.LEASEHOLD_OUTBOX_ALLOW?.trim();
  if (!allow?.split(/[\s,]+/).includes(sinkHost)) process.env.LEASEHOLD_OUTBOX_ALLOW = allow ? `${allow},${sinkHost}` : sinkHost;
  return sink;
}

/** The running sink: its URL and delivery figures. */
type Sink = Awaited<ReturnType<typeof startSink>>;

/**
 * A local S3-compatible server (sources and results of batches), its data in the project
 * folder, unless AWS_ENDPOINT_URL_S3 names one; the real SDK clients reach it through
 * AWS_ENDPOINT_URL_S3 (docs/cli.md). Where it is, for the banner.
 */
async function startS3(stack: Stack): Promise<string> {
  if (process.env.AWS_ENDPOINT_URL_S3) return `${process.env.AWS_ENDPOINT_URL_S3} (AWS_ENDPOINT_URL_S3)`;
  const s3State = join(stack.stateDir, 's3.json');
  const kept = readKeptPort(s3State);
  const directory = join(stack.stateDir, 's3');
  const s3 = await startLocalS3({ directory, port: kept ?? 0 }).catch(() => startLocalS3({ directory }));
  await writeFile(s3State, JSON.stringify({ port: s3.port }) + '\n');
  stack.stopServices.push(() => s3.close());
  process.env.AWS_ENDPOINT_URL_S3 = s3.endpoint;
  return `${s3.endpoint} (s3rver, data in ${relative(stack.cwd, directory)})`;
}

/**
 * The scheduler on a timer in place of EventBridge: passes never overlap, and `stop()` waits for
 * the pass under way, so the pools it uses are never ended beneath it (it failed with
 * `CONNECTION_ENDED` when `--exit-when-idle` stopped right after the first pass began).
 */
function startScheduler(stack: Stack, app: LocalApp, scheduleMs: number): { stop(): Promise<void> } {
  let running: Promise<void> | undefined;
  let stopped = false;
  let lastError = '';
  const pass = async () => {
    try {
      await app.scheduler({}, lambdaContext('leasehold-scheduler', 60_000));
    } catch (e) {
      logLine(stack, { level: 'error', service: 'scheduler', message: String(e) });
      // Shown once per distinct failure: a scheduler that cannot run stalls everything.
      if (String(e) !== lastError) stack.say(`scheduler failed: ${String(e)}`);
      lastError = String(e);
    }
  };
  const tick = () => {
    if (running || stopped) return;
    running = pass().finally(() => (running = undefined));
  };
  const timer = setInterval(tick, scheduleMs);
  tick();
  return {
    stop: async () => {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}

/** `.leasehold/dev.json` lets `leasehold batch …` in this folder find the stack; removed on exit only while it is ours. */
async function writeDevJson(stack: Stack, apiUrl: string, invokeUrl: string): Promise<void> {
  const devJson = join(stack.stateDir, 'dev.json');
  await writeFile(devJson, JSON.stringify({ apiUrl, invokeUrl, pid: process.pid }, null, 2));
  stack.stopServices.push(async () => {
    try {
      if (JSON.parse(readFileSync(devJson, 'utf8')).pid === process.pid) await rm(devJson, { force: true });
    } catch {
      // already gone
    }
  });
}

/** Ctrl-C / SIGTERM: stop gracefully (the signal answered aborts); a second one exits at once. */
function onSignals(stack: Stack): AbortSignal {
  const stop = new AbortController();
  let signals = 0;
  const onSignal = () => {
    if (++signals > 1) process.exit(130);
    stack.say('\nstopping: handing off running batches…');
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  stack.stopServices.push(async () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  });
  return stop.signal;
}

/**
 * Units at work, every `everyMs` while units exist: live processes against the desired count,
 * units owned per process, the spread of the weight they own against the fair share, deliveries
 * per second.
 */
function startUnitsStatus(stack: Stack, client: ApiClient, sink: Sink, everyMs: number): void {
  let lastStatus = '';
  const showStatus = async () => {
    try {
      const [units, { fleet, processes }] = await Promise.all([client.listUnits({ limit: 1 }), client.listProcesses()]);
      if (units.length === 0) return;
      const live = processes.filter((p) => p.live && p.role === 'fleet');
      const owned = live.map((p) => `${p.id.slice(0, 8)}:${p.units}${p.retiring ? '(retiring)' : ''}`).join(' ');
      const stats = sink.stats();
      const line =
        `units: ${live.length} live process${live.length === 1 ? '' : 'es'} (desired ${fleet.desired}) [${owned}]` +
        ` | spread: min ${fleet.minWeight}, max ${fleet.maxWeight}, fair share ${fleet.fairShare}` +
        ` | deliveries ${stats.perSecond.toFixed(1)}/s (${stats.accepted} in all)`;
      if (line !== lastStatus) stack.say(line);
      lastStatus = line;
    } catch {
      // the next tick tries again
    }
  };
  // showStatus catches its own errors; setInterval drops the promise.
  const status = setInterval(() => void showStatus(), everyMs);
  stack.stopServices.push(async () => clearInterval(status));
}

/** Two demo tenants with outbox-delivery units to the sink, and about `perSecond` messages to them. */
async function startUnitsDemo(stack: Stack, client: ApiClient, sinkUrl: string, perSecond: number, stop: AbortSignal) {
  for (const tenant of ['acme', 'globex']) {
    // A passing store error must not end the whole stack: try a few times.
    for (let tries = 1; ; tries++) {
      try {
        await client.putUnits(tenant, { job: 'outbox-delivery', shards: 4, endpoints: [`${sinkUrl}/${tenant}/hook`] });
        break;
      } catch (e) {
        if (tries >= 5 || ((e as { status?: number }).status ?? 500) < 500) throw e;
        await systemClock.sleep(500 * tries, stop);
      }
    }
  }
  let n = 0;
  const perTick = Math.max(1, Math.round(perSecond / 10));
  const producer = setInterval(() => {
    for (let i = 0; i < perTick; i++) {
      const tenant = n % 2 ? 'globex' : 'acme';
      void client.sendOutbox(tenant, { key: `order-${n}`, payload: { order: n, at: new Date().toISOString() } }).catch(() => {});
      n++;
    }
  }, 100);
  stack.stopServices.push(async () => clearInterval(producer));
  stack.say(`units demo: tenants acme and globex, 4 outbox-delivery units each; about ${perSecond} messages/s to ${sinkUrl}`);
}

/**
 * The `--demo` checksum batch over `demoDir`, followed to its end (or the stop); an open demo
 * batch over the same folder (left by an earlier Ctrl-C) is resumed, not repeated. Its id.
 */
async function runDemo(stack: Stack, client: ApiClient, demoDir: string, stop: AbortSignal): Promise<string> {
  const open = (await client.listBatches({ tenant: 'demo', status: 'open' })).find(
    (b) => b.job === 'checksum' && (b.params as { dir?: string })?.dir === demoDir,
  );
  const batch: ApiBatch =
    open ?? (await client.startBatch({ tenant: 'demo', datasource: 'files', job: 'checksum', params: { dir: demoDir } })).batch;
  const files = `${batch.total} ${batch.total === 1 ? 'file' : 'files'}`;
  stack.say(
    `demo: checksum batch ${batch.id} over ${relative(stack.cwd, demoDir) || demoDir}: ${files}${open ? ' (resumed)' : ''}`,
  );
  const end = await followBatch(client, batch.id, { signal: stop, terminal: stack.terminal });
  if (end.status !== 'open') {
    stack.say(
      `demo: batch ${end.status}: ${end.counts.done} done, ${end.counts.failed} failed in ${seconds(end)} s over ${end.runs} run(s)`,
    );
  }
  return batch.id;
}

/** A JSON line in the functions' log file (nothing with `--verbose`, as before). */
function logLine(stack: Stack, entry: Record<string, unknown>): void {
  stack.logStream?.write(JSON.stringify(entry) + '\n');
}

/** The port an earlier stack in this folder recorded in `file`, if valid. */
function readKeptPort(file: string): number | undefined {
  try {
    const { port } = JSON.parse(readFileSync(file, 'utf8')) as { port?: unknown };
    return Number.isInteger(port) && (port as number) > 0 && (port as number) < 65536 ? (port as number) : undefined;
  } catch {
    return undefined;
  }
}

function lambdaContext(functionName: string, timeoutMs: number): Context {
  return createLambdaContext({ functionName, timeoutMs });
}

function seconds(b: { createdAt: string; finishedAt: string | null }): number {
  const end = b.finishedAt ? Date.parse(b.finishedAt) : Date.now();
  return Math.round((end - Date.parse(b.createdAt)) / 100) / 10;
}

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url;
  }
}
