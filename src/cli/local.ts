// `leasehold dev`, `leasehold dashboard` and `leasehold migrate`: the commands that run local mode
// (src/local/) or the store directly; the others call the API.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { type Command, Option } from 'commander';
import { connect, migrate } from '../store/index.js';
import { loadConfig } from '../runtime/config.js';
import { nearestHolding, port, positiveInt } from './args.js';

/** Add `dev`, `dashboard` and `migrate` to `program`. */
export function addLocalCommands(program: Command): void {
  addDev(program);
  addDashboard(program);
  addMigrate(program);
}

/** `leasehold dev`: the local stack (src/local/dev.ts). */
function addDev(program: Command): void {
  program
    .command('dev')
    .description('run the local stack: database, migrations, API, local invoke endpoint, scheduler')
    .option(
      '--app <file>',
      "run the handlers FILE exports (createHandlers from 'leasehold/lambda'; TypeScript is fine) instead of the built-in jobs",
    )
    .addOption(new Option('--port <port>', 'API port (0: any free port)').env('PORT').default(3000).argParser(port))
    .option('--demo <dir>', 'allow DIR and start a checksum batch over it, following its progress')
    .option('--exit-when-idle', 'exit 0 once no batch is open; print a JSON summary as the last line')
    .addOption(
      new Option('--timeout-ms <ms>', 'local worker timeout, ms')
        .env('LEASEHOLD_LOCAL_TIMEOUT_MS')
        .default(30_000)
        .argParser(positiveInt('--timeout-ms')),
    )
    .addOption(
      new Option('--concurrency <n>', 'most local worker invocations at once')
        .env('LEASEHOLD_LOCAL_CONCURRENCY')
        .default(8)
        .argParser(positiveInt('--concurrency')),
    )
    .addOption(
      new Option('--schedule-ms <ms>', 'scheduler interval, ms')
        .env('LEASEHOLD_LOCAL_SCHEDULE_MS')
        .default(5_000)
        .argParser(positiveInt('--schedule-ms')),
    )
    .option('--verbose', "print the functions' JSON logs (default: written to .leasehold/dev.log)")
    .addOption(
      new Option(
        '--units-demo [perSecond]',
        'register demo tenants with outbox-delivery units to the local sink and send messages (default 20/s)',
      ).argParser(positiveInt('--units-demo')),
    )
    .action(async (opts) => {
      const { runDev } = await import('../local/dev.js');
      process.exitCode = await runDev({
        port: opts.port,
        demoDir: opts.demo,
        exitWhenIdle: Boolean(opts.exitWhenIdle),
        timeoutMs: opts.timeoutMs,
        concurrency: opts.concurrency,
        scheduleMs: opts.scheduleMs,
        verbose: Boolean(opts.verbose),
        unitsDemoPerSecond: opts.unitsDemo === true ? 20 : opts.unitsDemo,
        appFile: opts.app,
      });
    });
}

/** `leasehold dashboard`: a deployed stage's dashboard, its API calls signed. */
function addDashboard(program: Command): void {
  program
    .command('dashboard')
    .description(
      "serve the dashboard of a deployed stage on 127.0.0.1: the page's API calls go to the stage's HTTP API, signed (SigV4) with your AWS credentials",
    )
    .addOption(
      new Option('--api <url>', "the stage's HTTP API URL (the `api` output of `sst deploy`)")
        .env('LEASEHOLD_API_URL')
        .makeOptionMandatory(),
    )
    .addOption(
      new Option(
        '--events <url>',
        "the stage's events function URL (the `events` output): the page's progress streams come from there, signed for lambda (default: the page polls)",
      ).env('LEASEHOLD_EVENTS_URL'),
    )
    .addOption(new Option('--port <port>', 'port on 127.0.0.1 (0: any free port)').default(3300).argParser(port))
    .option('--region <region>', "region to sign for (default: from an execute-api URL, else AWS_REGION or the profile's)")
    .option('--profile <profile>', 'AWS profile of the credential chain (default: AWS_PROFILE, else default)')
    .action(async (opts) => {
      const { runDashboard } = await import('../local/dashboard-proxy.js');
      process.exitCode = await runDashboard({
        apiUrl: opts.api,
        eventsUrl: opts.events,
        port: opts.port,
        region: opts.region,
        profile: opts.profile,
      });
    });
}

/** `leasehold migrate`: pending migrations, on DATABASE_URL or the embedded database. */
function addMigrate(program: Command): void {
  program
    .command('migrate')
    .description('apply pending database migrations (DATABASE_URL, else the embedded database)')
    .action(async () => {
      // Checked as the functions check it (a postgres:// URL; a bad one named, its password not shown).
      const checked = loadConfig({
        DATABASE_URL: process.env.DATABASE_URL,
        LEASEHOLD_DB_POOLER: process.env.LEASEHOLD_DB_POOLER,
      });
      let url = checked.databaseUrl;
      let stop: (() => Promise<void>) | undefined;
      if (!url) {
        // Run from a subfolder of a project, it would make a second, empty database there.
        const above = projectAbove(process.cwd());
        if (above !== undefined) {
          console.error(
            `leasehold: no embedded database in this folder, but ${above} has one: run leasehold migrate there ` +
              '(or set DATABASE_URL); a new database here would be empty',
          );
          process.exitCode = 1;
          return;
        }
        const { startEmbedded, EmbeddedDataDirInUseError } = await import('../local/embedded/index.js');
        let db;
        try {
          db = await startEmbedded({});
        } catch (e) {
          // A running `leasehold dev` of this folder migrated its database when it started.
          if (e instanceof EmbeddedDataDirInUseError && e.ownerPid !== undefined) {
            console.log(
              `the embedded database is served by a running leasehold (process ${e.ownerPid}), which applied ` +
                'the migrations when it started: nothing to do (set DATABASE_URL to migrate another database)',
            );
            return;
          }
          throw e;
        }
        url = db.url;
        stop = db.stop;
      }
      // Through a transaction-mode pooler too (LEASEHOLD_DB_POOLER=transaction), as the functions.
      const sql = connect(url, { max: 1, ...(checked.db.pooler === 'transaction' ? { pooler: 'transaction' } : {}) });
      try {
        const applied = await migrate(sql);
        console.log(applied.length ? `applied ${applied.map((m) => m.name).join(', ')}` : 'already up to date');
      } finally {
        await sql.end();
        await stop?.();
      }
    });
}

/**
 * The nearest folder above `cwd` whose embedded database exists (`.leasehold/pgdata`), when `cwd`
 * has none of its own; undefined otherwise.
 */
function projectAbove(cwd: string): string | undefined {
  const data = join('.leasehold', 'pgdata');
  return existsSync(join(cwd, data)) || dirname(cwd) === cwd ? undefined : nearestHolding(dirname(cwd), data);
}
