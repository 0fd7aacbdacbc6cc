// `leasehold dev`: the same handlers as on AWS, with local drivers (docs/design.md, "Local mode").
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { delimiter, extname, join, relative, resolve } from 'node:path';
import { createRequire, Module } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Context } from 'aws-lambda';
import { systemClock } from '../clock.js';
import { ApiClient } from '../client/index.js';
import { followBatch, Terminal } from '../terminal/index.js';
import { countOpenBatches } from '../batch/index.js';
import { loadConfig } from '../runtime/config.js';
import { requestWorkerShutdown, resetRuntimeDeps, setLogSink } from '../runtime/index.js';
import { forgetInvocations } from '../lease/index.js';
import { connect, migrate, type Sql } from '../store/index.js';
import { createLambdaContext } from './context.js';
import { startEmbedded } from './embedded.js';
import { dashboardAssets } from './dashboard-assets.js';
import { startHttpServer } from './http-server.js';
import { startLocalS3 } from './s3.js';
import { startSink } from './sink.js';
import { LocalPortInUseError } from './http-util.js';
import { createInvokeEndpoint, localLambdaEnv, type LocalLambdaHandler } from './invoke-endpoint.js';
import { createEventsEndpoint, localEventsEnv } from './events-endpoint.js';
import { parseChainRules } from '../trigger/index.js';
import { LeaseholdError } from '../errors.js';

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

/** The handlers the local stack runs, and the functions `lambda-invoke` may call locally. */
interface LocalApp {
  worker: LocalLambdaHandler;
  api: LocalLambdaHandler;
  scheduler: LocalLambdaHandler;
  /** The trigger: events put on the local bus go to it (absent: they are only logged). */
  trigger: LocalLambdaHandler | undefined;
  localFunctions: Record<string, LocalLambdaHandler>;
  /** The app's chain rules (`export const rules = [...]`), as LEASEHOLD_RULES takes them; undefined: none exported. */
  rules: unknown[] | undefined;
}

/** An app file that cannot be run; the message says why (printed by `leasehold dev`). Code `invalid_app`. */
class AppFileError extends LeaseholdError {
  constructor(message: string) {
    super('invalid_app', message);
  }
}

/**
 * Load the app file (or, without one, this package's own runner) and check what it exports.
 * TypeScript files are loaded through tsx's loader, registered once for the process.
 * @throws {AppFileError} the file is missing, fails to load, or lacks handlers made by this copy of leasehold.
 */
async function loadApp(appFile: string | undefined, cwd: string): Promise<LocalApp> {
  const { HANDLERS_MARK, HANDLERS_MODULE } = await import('../lambda.js');
  let mod: Record<string, unknown>;
  const shown = appFile ?? 'the built-in runner';
  if (appFile === undefined) {
    mod = await import('../../functions/leasehold.js');
  } else {
    const path = resolve(cwd, appFile);
    if (!existsSync(path) || !statSync(path).isFile()) throw new AppFileError(`--app ${appFile}: no such file`);
    await shareEntryPointsWithRequire();
    if (/^\.[cm]?tsx?$/.test(extname(path))) {
      // Both of tsx's loaders, as `node --import tsx` registers them: a .ts file in a package
      // that is not "type": "module" is loaded as CommonJS.
      if (!tsxRegistered) {
        const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
        esm.register();
        cjs.register();
        tsxRegistered = true;
      }
    }
    try {
      mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
    } catch (e) {
      throw new AppFileError(`--app ${appFile}: could not load it: ${(e as Error)?.stack ?? e}`);
    }
  }
  // A file loaded as CommonJS (its package is not "type": "module") has its exports on `default`.
  if (typeof mod.worker !== 'function' && mod.default !== null && typeof mod.default === 'object')
    mod = mod.default as Record<string, unknown>;
  const missing = (['worker', 'scheduler', 'api'] as const).filter((name) => typeof mod[name] !== 'function');
  if (missing.length) {
    throw new AppFileError(
      `${shown} does not export ${missing.join(', ')}: export the handlers of createHandlers from 'leasehold/lambda' ` +
        '(export const { worker, scheduler, api, trigger, migrate } = createHandlers({ jobs: [...] }))',
    );
  }
  const mark = (mod.worker as unknown as Record<symbol, { url?: string } | undefined>)[HANDLERS_MARK];
  if (mark === undefined) throw new AppFileError(`${shown}: its worker was not made by createHandlers from 'leasehold/lambda'`);
  if (mark !== HANDLERS_MODULE) {
    throw new AppFileError(
      mark.url === HANDLERS_MODULE.url
        ? `${shown} loaded this copy of leasehold a second time (${HANDLERS_MODULE.url}), as another module instance: ` +
            'import leasehold and leasehold/lambda by those names only (never a file under dist/)'
        : `${shown} uses another copy of leasehold (${String(mark.url)}) than this command (${HANDLERS_MODULE.url}): ` +
            "run the app's own: npx leasehold dev --app …",
    );
  }
  const localFunctions: Record<string, LocalLambdaHandler> = {};
  const declared = mod.localFunctions;
  if (declared !== undefined) {
    if (declared === null || typeof declared !== 'object')
      throw new AppFileError(`${shown}: localFunctions must be an object of functions by name`);
    for (const [name, fn] of Object.entries(declared)) {
      if (typeof fn !== 'function') throw new AppFileError(`${shown}: localFunctions.${name} is not a function`);
      if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
        throw new AppFileError(`${shown}: localFunctions: "${name}" is not a Lambda function name (letters, digits, _ and -)`);
      localFunctions[name] = fn as LocalLambdaHandler;
    }
  }
  if (mod.rules !== undefined && !Array.isArray(mod.rules))
    throw new AppFileError(`${shown}: rules must be an array of chain rules`);
  return {
    worker: mod.worker as LocalLambdaHandler,
    api: mod.api as LocalLambdaHandler,
    scheduler: mod.scheduler as LocalLambdaHandler,
    trigger: typeof mod.trigger === 'function' ? (mod.trigger as LocalLambdaHandler) : undefined,
    localFunctions,
    rules: mod.rules as unknown[] | undefined,
  };
}

/** tsx's loaders are registered at most once per process. */
let tsxRegistered = false;

/**
 * Make `require('leasehold')` and `require('leasehold/lambda')` return the modules this command
 * runs. An app whose package is not `"type": "module"` (npm 11's `npm init -y` writes
 * `"commonjs"`) is loaded as CommonJS, and tsx's CommonJS loader compiles leasehold's ESM files
 * into a second copy of every module: the app's handlers would then write their logs past
 * `setLogSink`, never see `requestWorkerShutdown`, and keep a pool `resetRuntimeDeps` does not
 * close. Seeding the require cache with this command's own module namespaces, by the files the
 * package's exports resolve to, leaves one copy for both module kinds.
 */
async function shareEntryPointsWithRequire(): Promise<void> {
  const require = createRequire(import.meta.url);
  for (const entry of ['../index.js', '../lambda.js']) {
    const url = new URL(entry, import.meta.url);
    const file = fileURLToPath(url);
    if (require.cache[file]) continue;
    const shared = new Module(file);
    shared.filename = file;
    shared.loaded = true;
    shared.exports = await import(url.href);
    require.cache[file] = shared;
  }
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
  // One writer for the terminal: status lines and stop messages go above the demo's progress bar.
  const terminal = new Terminal(process.stderr);
  const say = (line: string) => terminal.say(line);
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
  let config;
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
  // Function logs: a file unless --verbose.
  const logFile = join(stateDir, 'dev.log');
  const logStream = options.verbose ? undefined : createWriteStream(logFile, { flags: 'a' });
  if (logStream) setLogSink((line) => logStream.write(line + '\n'));

  // Stopping runs these last-in first-out: first the services (servers, workers), then the
  // database, so what is still owned can be checked in between.
  const stopServices: (() => Promise<void>)[] = [];
  const stopDatabase: (() => Promise<void>)[] = [];
  const unwind = async (steps: (() => Promise<void>)[]) => {
    while (steps.length) {
      try {
        await steps.pop()!();
      } catch (e) {
        say(`leasehold dev: while stopping: ${(e as Error).message}`);
      }
    }
  };
  const runCleanup = async () => {
    await unwind(stopServices);
    await unwind(stopDatabase);
  };

  try {
    // Database.
    let databaseUrl = process.env.DATABASE_URL;
    let dbWhere: string;
    if (databaseUrl) {
      dbWhere = `${redact(databaseUrl)} (DATABASE_URL)`;
    } else {
      const db = await startEmbedded({ log: logStream ? (l) => logStream.write(`[postgres] ${l}\n`) : undefined });
      stopDatabase.push(() => db.stop());
      databaseUrl = db.url;
      dbWhere = `${redact(db.url)} (embedded PostgreSQL, data in ${relative(cwd, db.dir) || db.dir})`;
    }
    const sql: Sql = connect(databaseUrl, { max: 2, ...(config.db.pooler === 'transaction' ? { pooler: 'transaction' } : {}) });
    stopDatabase.push(() => sql.end({ timeout: 5 }));
    const applied = await migrate(sql);
    // Workers a previous local stack invoked died with it: they must not count as coming.
    await forgetInvocations(sql);

    const roots = [...config.allowedRoots, ...(demoDir ? [demoDir] : [])];
    const invoke = createInvokeEndpoint({
      functions: { ...app.localFunctions, [config.workerFunction]: app.worker },
      timeoutMs,
      concurrency,
      onError: (error, info) =>
        logStream?.write(
          JSON.stringify({
            level: 'error',
            service: 'invoke',
            message: 'invocation failed',
            awsRequestId: info.awsRequestId,
            error: String(error),
          }) + '\n',
        ),
    });
    const { url: invokeUrl } = await invoke.start();
    // The SDK's notice that its 2027 releases need Node 22 is noise for a local run.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    Object.assign(
      process.env,
      { DATABASE_URL: databaseUrl, LEASEHOLD_ALLOWED_ROOTS: roots.join(delimiter) },
      localLambdaEnv(invokeUrl),
    );
    stopServices.push(async () => {
      requestWorkerShutdown();
      await invoke.stop({ wait: true });
      await resetRuntimeDeps();
    });

    // The local bus: PutEvents from the real SDK client (Batch Finished events, and any the
    // app puts), routed to the trigger as the deployed bus's rules route them.
    const trigger = app.trigger;
    const events = await createEventsEndpoint({
      deliver: (event) =>
        trigger ? Promise.resolve(trigger(event, lambdaContext('leasehold-trigger', 120_000))) : Promise.resolve(undefined),
      onEvent: (event, routed) =>
        logStream?.write(
          JSON.stringify({
            level: 'info',
            service: 'events',
            message: 'event put',
            detailType: event['detail-type'],
            source: event.source,
            routed: routed && trigger !== undefined,
            detail: event.detail,
          }) + '\n',
        ),
      onError: (error, event) =>
        logStream?.write(
          JSON.stringify({
            level: 'error',
            service: 'events',
            message: 'trigger failed',
            eventId: event.id,
            error: String(error),
          }) + '\n',
        ),
    });
    Object.assign(process.env, localEventsEnv(events.url));
    process.env.LEASEHOLD_EVENT_BUS ??= 'leasehold-local';
    // Webhooks (notify) are signed: a key of this stack's own unless one is given.
    process.env.LEASEHOLD_WEBHOOK_SECRET ??= `whsec_${randomBytes(24).toString('base64')}`;
    // Stopped after the workers (pushed before them: last in, first out), so their last sends land.
    stopServices.unshift(() => events.close());

    // Webhook endpoints for outbox-delivery units: records what it receives. It listens on
    // loopback, which outbox delivery refuses unless allow-listed: allow its address (the
    // handlers read the variable when they check an endpoint).
    // Its port is kept in the project folder's state (.leasehold/sink.json), so endpoints
    // registered against it (outbox-delivery units) still reach it after a restart; a port taken
    // meanwhile falls back to any free one, and says so.
    const sinkState = join(stateDir, 'sink.json');
    const keptPort = readSinkPort(sinkState);
    let sink;
    try {
      sink = await startSink({ port: keptPort ?? 0 });
    } catch (e) {
      if (!(e instanceof LocalPortInUseError) || keptPort === undefined) throw e;
      sink = await startSink({ port: 0 });
      say(
        `leasehold dev: the sink's port ${keptPort} is taken; it now listens on ${sink.url}: endpoints registered against ${keptPort} (units put) do not reach it until put again`,
      );
    }
    await writeFile(sinkState, JSON.stringify({ port: new URL(sink.url).port ? Number(new URL(sink.url).port) : 0 }) + '\n');
    stopServices.push(() => sink.close());
    const sinkHost = new URL(sink.url).hostname;
    const allow = process.env.LEASEHOLD_OUTBOX_ALLOW?.trim();
    if (!allow?.split(/[\s,]+/).includes(sinkHost))
      process.env.LEASEHOLD_OUTBOX_ALLOW = allow ? `${allow},${sinkHost}` : sinkHost;

    // A local S3-compatible server (sources and results of batches), its data in the project
    // folder; the real SDK clients reach it through AWS_ENDPOINT_URL_S3 (docs/cli.md).
    let s3Where = `${process.env.AWS_ENDPOINT_URL_S3} (AWS_ENDPOINT_URL_S3)`;
    if (!process.env.AWS_ENDPOINT_URL_S3) {
      const s3State = join(stateDir, 's3.json');
      const keptS3 = readSinkPort(s3State);
      const s3 = await startLocalS3({ directory: join(stateDir, 's3'), port: keptS3 ?? 0 }).catch(() =>
        startLocalS3({ directory: join(stateDir, 's3') }),
      );
      await writeFile(s3State, JSON.stringify({ port: s3.port }) + '\n');
      stopServices.push(() => s3.close());
      process.env.AWS_ENDPOINT_URL_S3 = s3.endpoint;
      s3Where = `${s3.endpoint} (s3rver, data in ${relative(cwd, join(stateDir, 's3'))})`;
    }

    const server = await startHttpServer({
      port: options.port,
      handler: (event, context) => app.api(event, context) as never,
      assets: dashboardAssets(),
    });
    stopServices.push(() => server.close());

    // The scheduler on a timer in place of EventBridge; runs never overlap.
    let scheduling = false;
    let lastSchedulerError = '';
    const tick = async () => {
      if (scheduling) return;
      scheduling = true;
      try {
        await app.scheduler({}, lambdaContext('leasehold-scheduler', 60_000));
      } catch (e) {
        logStream?.write(JSON.stringify({ level: 'error', service: 'scheduler', message: String(e) }) + '\n');
        // Shown once per distinct failure: a scheduler that cannot run stalls everything.
        if (String(e) !== lastSchedulerError) say(`scheduler failed: ${String(e)}`);
        lastSchedulerError = String(e);
      } finally {
        scheduling = false;
      }
    };
    // tick catches its own errors; setInterval drops the promise.
    const timer = setInterval(() => void tick(), scheduleMs);
    stopServices.push(async () => clearInterval(timer));
    void tick();

    // Lets `leasehold batch …` in this folder find the stack; removed on exit only while it is ours.
    const devJson = join(stateDir, 'dev.json');
    await writeFile(devJson, JSON.stringify({ apiUrl: server.url, invokeUrl, pid: process.pid }, null, 2));
    stopServices.push(async () => {
      try {
        if (JSON.parse(readFileSync(devJson, 'utf8')).pid === process.pid) await rm(devJson, { force: true });
      } catch {
        // already gone
      }
    });

    say('leasehold dev');
    say(`  app        ${options.appFile ?? 'built-in jobs (checksum, lambda-invoke; outbox-delivery)'}`);
    say(`  database   ${dbWhere}${applied.length ? `; applied ${applied.map((m) => m.name).join(', ')}` : ''}`);
    say(`  s3         ${s3Where}`);
    say(`  api        ${server.url}`);
    say(`  dashboard  ${server.url}/`);
    say(
      `  invoke     ${invokeUrl} (worker "${config.workerFunction}", timeout ${timeoutMs / 1000} s, at most ${concurrency} at once)`,
    );
    if (localNames.length) say(`  functions  ${localNames.join(', ')} (local, for lambda-invoke batches)`);
    const ruleCount = parseChainRules(process.env.LEASEHOLD_RULES).length;
    say(
      `  events     ${events.url} (PutEvents, bus ${process.env.LEASEHOLD_EVENT_BUS}; ${ruleCount} chain rule${ruleCount === 1 ? '' : 's'}${trigger ? '' : '; no trigger exported: events are only logged'})`,
    );
    say(`  scheduler  every ${scheduleMs / 1000} s (workers for units: the desired count, \`leasehold concurrency\`)`);
    say(
      `  sink       ${sink.url} (webhook endpoints for outbox-delivery units; LEASEHOLD_OUTBOX_ALLOW=${process.env.LEASEHOLD_OUTBOX_ALLOW})`,
    );
    say(`  logs       ${options.verbose ? 'printed' : relative(cwd, logFile)}`);
    say('Ctrl-C stops (running batches are handed off).');

    // Ctrl-C / SIGTERM: stop gracefully; a second one exits at once.
    const stop = new AbortController();
    let signals = 0;
    const onSignal = () => {
      if (++signals > 1) process.exit(130);
      say('\nstopping: handing off running batches…');
      stop.abort();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    stopServices.push(async () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    });

    let demo: { id: string; started: number } | undefined;
    const client = new ApiClient(server.url);

    // Units at work: live processes against the desired count, units owned per process, the
    // spread of the weight they own against the fair share, deliveries per second.
    const statusEvery = options.statusMs ?? 3_000;
    let lastStatus = '';
    const showStatus = async () => {
      try {
        const [units, { fleet, processes }] = await Promise.all([client.listUnits({ limit: 1 }), client.listProcesses()]);
        if (units.length === 0) return;
        const live = processes.filter((p) => p.live && p.role === 'fleet');
        const owned = live.map((p) => `${p.id.slice(0, 8)}:${p.units}${p.retiring ? '(retiring)' : ''}`).join(' ');
        const line =
          `units: ${live.length} live process${live.length === 1 ? '' : 'es'} (desired ${fleet.desired}) [${owned}]` +
          ` | spread: min ${fleet.minWeight}, max ${fleet.maxWeight}, fair share ${fleet.fairShare}` +
          ` | deliveries ${sink.stats().perSecond.toFixed(1)}/s (${sink.stats().accepted} in all)`;
        if (line !== lastStatus) say(line);
        lastStatus = line;
      } catch {
        // the next tick tries again
      }
    };
    // showStatus catches its own errors; setInterval drops the promise.
    const status = setInterval(() => void showStatus(), statusEvery);
    stopServices.push(async () => clearInterval(status));

    if (options.unitsDemoPerSecond && options.unitsDemoPerSecond > 0) {
      for (const tenant of ['acme', 'globex']) {
        // A passing store error must not end the whole stack: try a few times.
        for (let tries = 1; ; tries++) {
          try {
            await client.putUnits(tenant, { job: 'outbox-delivery', shards: 4, endpoints: [`${sink.url}/${tenant}/hook`] });
            break;
          } catch (e) {
            if (tries >= 5 || ((e as { status?: number }).status ?? 500) < 500) throw e;
            await systemClock.sleep(500 * tries, stop.signal);
          }
        }
      }
      let n = 0;
      const perTick = Math.max(1, Math.round(options.unitsDemoPerSecond / 10));
      const producer = setInterval(() => {
        for (let i = 0; i < perTick; i++) {
          const tenant = n % 2 ? 'globex' : 'acme';
          void client
            .sendOutbox(tenant, { key: `order-${n}`, payload: { order: n, at: new Date().toISOString() } })
            .catch(() => {});
          n++;
        }
      }, 100);
      stopServices.push(async () => clearInterval(producer));
      say(
        `units demo: tenants acme and globex, 4 outbox-delivery units each; about ${options.unitsDemoPerSecond} messages/s to ${sink.url}`,
      );
    }
    if (demoDir) {
      // An open demo batch over the same folder (left by an earlier Ctrl-C) is resumed, not repeated.
      const open = (await client.listBatches({ tenant: 'demo', status: 'open' })).find(
        (b) => b.job === 'checksum' && (b.params as { dir?: string })?.dir === demoDir,
      );
      const batch =
        open ??
        (await client.startBatch({ tenant: 'demo', datasource: 'files', job: 'checksum', params: { dir: demoDir } })).batch;
      demo = { id: batch.id, started: Date.now() };
      const files = `${batch.total} ${batch.total === 1 ? 'file' : 'files'}`;
      say(`demo: checksum batch ${batch.id} over ${relative(cwd, demoDir) || demoDir}: ${files}${open ? ' (resumed)' : ''}`);
      const end = await followBatch(client, batch.id, { signal: stop.signal, terminal });
      if (end.status !== 'open') {
        say(
          `demo: batch ${end.status}: ${end.counts.done} done, ${end.counts.failed} failed in ${seconds(end)} s over ${end.runs} run(s)`,
        );
      }
    }

    if (options.exitWhenIdle) {
      while (!stop.signal.aborted && (await countOpenBatches(sql)) > 0) await systemClock.sleep(500, stop.signal);
    } else if (!stop.signal.aborted) {
      say(`serving; try: npx leasehold batch list`);
      await new Promise<void>((r) => stop.signal.addEventListener('abort', () => r(), { once: true }));
    }

    const summary = demo ? await client.getBatch(demo.id).catch(() => undefined) : undefined;
    await unwind(stopServices);
    const owned = await sql<{ n: number }[]>`select count(*) as n from leasehold_runs`;
    say(owned[0].n === 0 ? 'stopped: nothing left owned' : `stopped: ${owned[0].n} run(s) of batches still live`);
    await runCleanup();
    if (options.exitWhenIdle && stop.signal.aborted) return 130;
    if (options.exitWhenIdle) {
      console.log(
        JSON.stringify({
          batchId: demo?.id ?? null,
          done: summary?.counts.done ?? 0,
          failed: summary?.counts.failed ?? 0,
          seconds: summary ? seconds(summary) : 0,
        }),
      );
    }
    return 0;
  } catch (e) {
    say(`leasehold dev: ${(e as Error).message}`);
    await runCleanup();
    return 1;
  } finally {
    setLogSink(undefined);
    logStream?.end();
  }
}

/** The sink's port an earlier stack in this folder used, if it recorded a valid one. */
function readSinkPort(file: string): number | undefined {
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
