// The `leasehold` command line (bin/leasehold.js runs the built copy of this file).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { connect, migrate } from './store/index.js';
import { ConfigError, loadConfig } from './runtime/config.js';
import { ApiCallError, ApiClient, type ApiBatch, type ApiTenant, type ApiConcurrency } from './cli/client.js';
import { followBatch } from './cli/follow.js';
import { formatTable } from './cli/table.js';

// The AWS SDK warns on Node.js 20 that its 2027 releases will need Node.js 22; leasehold pins its
// SDK and supports Node.js 20 on a developer's machine (deploys run nodejs22.x), so the command
// does not print that warning with every S3 call. Set the variable to false to see it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const program = new Command();
program
  .name('leasehold')
  .description('A job runner for AWS Lambda with all of its state in PostgreSQL')
  .version('0.1.0')
  // A usage error prints its one line and this hint; the whole help pushed the line off screen.
  .showHelpAfterError('(run with --help for usage)');

const port = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('--port must be 0 (any free port) to 65535');
  return n;
};

const positiveInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive whole number`);
  return n;
};

/**
 * `k=v` pairs into params; values that parse as JSON (numbers such as `1e1`, booleans, null,
 * strings in quotes, arrays, objects) are taken as JSON, others as text. A whole number past
 * 2^53 stays text, so it keeps every digit.
 */
function collectParam(pair: string, params: Record<string, unknown> = {}): Record<string, unknown> {
  const at = pair.indexOf('=');
  if (at <= 0) throw new InvalidArgumentError(`--param takes key=value, got "${pair}"`);
  const key = pair.slice(0, at);
  const raw = pair.slice(at + 1);
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (e) {
    value = raw;
    // Text that starts like JSON but is not (a bracket left open) is most likely a mistake: say so.
    if (/^\s*[[{"]/.test(raw))
      process.stderr.write(`leasehold: --param ${key}: not valid JSON (${(e as Error).message}); sent as a string\n`);
  }
  // A number JSON cannot carry exactly (an id of 20 digits) stays the text it was.
  if (typeof value === 'number' && !Number.isSafeInteger(value) && /^-?\d+$/.test(raw.trim())) value = raw;
  return { ...params, [key]: value };
}

/** `1 item`, `2 items`: a count with its noun ("1 items" read wrong). */
const count = (n: number, noun: string) => `${n} ${noun}${n === 1 ? '' : 's'}`;

/** The API base URL: --api, LEASEHOLD_API_URL, the running `leasehold dev`, or the default. */
function apiUrl(opt?: string): string {
  if (opt) return opt;
  if (process.env.LEASEHOLD_API_URL) return process.env.LEASEHOLD_API_URL;
  const state = join(process.cwd(), '.leasehold', 'dev.json');
  if (existsSync(state)) {
    try {
      const url = JSON.parse(readFileSync(state, 'utf8')).apiUrl;
      if (typeof url === 'string') return url;
    } catch {
      // fall through to the default
    }
  }
  return `http://127.0.0.1:${process.env.PORT ?? 3000}`;
}

/** `--tolerate`: `N` (a whole number of failed items) or `P%` (a percent of the items, 0..100). */
function tolerance(v: string): { count: number } | { percent: number } {
  const percent = /^\s*(\d+(?:\.\d+)?)\s*%\s*$/.exec(v);
  if (percent) {
    const p = Number(percent[1]);
    if (p <= 100) return { percent: p };
  } else if (/^\s*\d+\s*$/.test(v)) {
    return { count: Number(v) };
  }
  throw new InvalidArgumentError('--tolerate takes N (failed items) or P% (0..100% of the items), e.g. 3 or 5%');
}

/** How a batch's tolerance reads: `2 failed items` or `5% of the items (2 of 40)`; null when none. */
function toleranceText(b: ApiBatch): string | null {
  const t = b.toleratedFailures;
  if (!t) return null;
  if ('count' in t) return `${t.count} failed item${t.count === 1 ? '' : 's'}`;
  return `${t.percent}% of the items (${b.allowedFailures} of ${b.total})`;
}

/** Most failed items the end of a follow lists (all are in `leasehold batch results`). */
const LISTED_FAILURES = 10;

/**
 * Show batch `id`'s progress until it finishes, say how it ended (the reason, and its failed
 * items with their errors), and exit 1 unless it succeeded.
 */
async function followToEnd(api: ApiClient, id: string): Promise<void> {
  const end = await followBatch(api, id);
  const tolerated = end.status === 'succeeded' && end.counts.failed > 0 ? ' (tolerated)' : '';
  console.log(
    `batch ${end.id} ${end.status}: ${end.counts.done} done, ${end.counts.failed} failed${tolerated}` +
      (end.status === 'cancelled' ? `, ${end.counts.running + end.counts.pending} not run` : '') +
      (end.reason ? `; ${end.reason}` : ''),
  );
  if (end.counts.failed > 0) {
    let n = 0;
    for await (const item of api.items(end.id, LISTED_FAILURES, 'failed')) {
      if (n++ === LISTED_FAILURES) break;
      console.log(`  failed ${item.key}: ${item.error ?? ''}`);
    }
    if (end.counts.failed > LISTED_FAILURES)
      console.log(`  … ${end.counts.failed - LISTED_FAILURES} more: leasehold batch results ${end.id} --state failed`);
  }
  if (end.status !== 'succeeded') process.exitCode = 1;
}

/** A tenant name given as an option: an empty one made a path the API answered 405 to. */
const tenantName = (v: string) => {
  if (v.trim() === '') throw new InvalidArgumentError('a tenant name is not empty');
  return v;
};

/** `--tenant` of the commands on one batch: the tenant-scoped routes. */
const scopeOption = () =>
  new Option(
    '--tenant <tenant>',
    "use the tenant's own routes (/tenants/TENANT/batches/…), as a per-tenant IAM policy requires; another tenant's batch answers 404",
  ).argParser(tenantName);

/** A client on the API, scoped to `tenant` when given. */
const client = (opts: { api?: string; tenant?: string }) =>
  new ApiClient(apiUrl(opts.api), opts.tenant === undefined ? {} : { tenant: opts.tenant });

const apiOption = new Option(
  '--api <url>',
  'API base URL (default: LEASEHOLD_API_URL, the running `leasehold dev`, or http://127.0.0.1:3000)',
);

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
    const { runDev } = await import('./local/dev.js');
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
  .addOption(new Option('--port <port>', 'port on 127.0.0.1 (0: any free port)').default(3300).argParser(port))
  .option('--region <region>', "region to sign for (default: from an execute-api URL, else AWS_REGION or the profile's)")
  .option('--profile <profile>', 'AWS profile of the credential chain (default: AWS_PROFILE, else default)')
  .action(async (opts) => {
    const { runDashboard } = await import('./local/dashboard-proxy.js');
    process.exitCode = await runDashboard({ apiUrl: opts.api, port: opts.port, region: opts.region, profile: opts.profile });
  });

program
  .command('migrate')
  .description('apply pending database migrations (DATABASE_URL, else the embedded database)')
  .action(async () => {
    // Checked as the functions check it (a postgres:// URL; a bad one named, its password not shown).
    const checked = loadConfig({ DATABASE_URL: process.env.DATABASE_URL, LEASEHOLD_DB_POOLER: process.env.LEASEHOLD_DB_POOLER });
    let url = checked.databaseUrl;
    let stop: (() => Promise<void>) | undefined;
    if (!url) {
      const { startEmbedded } = await import('./local/embedded/index.js');
      const db = await startEmbedded({});
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

const batch = program
  .command('batch')
  .description('start, show, list, cancel and redrive batches, and read their results, through the API');

/** `--concurrency`: a whole number from 1 to 10,000. */
const concurrencyArg = (v: string) => {
  const n = Number(v);
  if (!/^\d{1,5}$/.test(v.trim()) || n < 1 || n > 10_000) {
    throw new InvalidArgumentError('--concurrency must be a whole number from 1 to 10000');
  }
  return n;
};

/** `--rate`: items per second, from 0.001 (one every 1,000 s) to 1,000,000 (fractions allowed: 0.5 is one every 2 s). */
const rateArg = (v: string) => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0.001 || n > 1_000_000) {
    throw new InvalidArgumentError('--rate must be a number of items per second from 0.001 to 1000000');
  }
  return n;
};

/** `--timeout-ms`: a whole number of ms from 1 to 900,000 (the API checks it against the workers' timeout). */
const timeoutArg = (v: string) => {
  const n = Number(v);
  if (!/^\d{1,6}$/.test(v.trim()) || n < 1 || n > 900_000) {
    throw new InvalidArgumentError('--timeout-ms must be a whole number of ms from 1 to 900000');
  }
  return n;
};

/** `--priority`: a whole number from 0 to 9. */
const priorityArg = (v: string) => {
  const n = Number(v);
  if (!/^\d$/.test(v.trim())) throw new InvalidArgumentError('--priority must be a whole number from 0 to 9');
  return n;
};

batch
  .command('start')
  .description('start a batch of JOB')
  .argument('<job>', 'job name, e.g. checksum')
  .option('--param <key=value>', 'a job param (repeatable); JSON values are parsed', collectParam)
  .option('--tenant <tenant>', 'tenant', tenantName, 'local')
  .option('--datasource <name>', 'datasource the batch reads from', 'local')
  .option('--request-key <key>', 'idempotency key: the same key never starts a second batch')
  .option(
    '--tolerate <N|P%>',
    'failed items tolerated: N items or P% of them; past that the batch ends failed at once (default: any failed item fails the batch once all ran)',
    tolerance,
  )
  .option('--priority <0-9>', "order among the tenant's own batches, 9 first (default 5)", priorityArg)
  .option(
    '--concurrency <n>',
    "most runs (workers) at once, 1..10000 (default: the deployment's LEASEHOLD_BATCH_CONCURRENCY)",
    concurrencyArg,
  )
  .option('--timeout-ms <ms>', "most time one attempt of an item may take (default: the job's timeoutMs, or none)", timeoutArg)
  .option(
    '--rate <perSecond>',
    "most items started per second per rate-limit key, fleet-wide (default: the job's rateLimit, or none)",
    rateArg,
  )
  .option('--follow', 'show progress until the batch finishes; exit 1 unless it succeeded')
  .option('--json', 'print the batch as JSON')
  .addOption(apiOption)
  .action(async (job: string, opts) => {
    // The start's own tenant's routes (/tenants/TENANT/batches…), for the start and the follow.
    const api = new ApiClient(apiUrl(opts.api), { tenant: opts.tenant });
    const { batch: b, created } = await api.startBatch({
      tenant: opts.tenant,
      datasource: opts.datasource,
      job,
      params: opts.param ?? {},
      requestKey: opts.requestKey,
      ...(opts.tolerate ? { toleratedFailures: opts.tolerate } : {}),
      priority: opts.priority,
      maxConcurrency: opts.concurrency,
      timeoutMs: opts.timeoutMs,
      ...(opts.rate === undefined ? {} : { rateLimit: { perSecond: opts.rate } }),
    });
    if (opts.json) console.log(JSON.stringify(b));
    else console.log(`${created ? 'started' : 'already started by this request key:'} batch ${b.id} (${count(b.total, 'item')})`);
    if (opts.follow) await followToEnd(api, b.id);
  });

batch
  .command('update')
  .description('change an open batch while it runs: how many runs may work it at once, its rate limit')
  .argument('<id>')
  .option('--concurrency <n>', 'most runs at once, 1..10000 (lowered: the newest runs hand off within a beat)', concurrencyArg)
  .option('--rate <perSecond>', 'most items started per second per rate-limit key, fleet-wide', rateArg)
  .option('--json', 'print JSON')
  .addOption(scopeOption())
  .addOption(apiOption)
  .action(async (id: string, opts) => {
    if (opts.concurrency === undefined && opts.rate === undefined) {
      console.error('leasehold: batch update needs --concurrency, --rate or both');
      process.exitCode = 1;
      return;
    }
    const b = await client(opts).updateBatch(id, {
      ...(opts.concurrency === undefined ? {} : { maxConcurrency: opts.concurrency }),
      ...(opts.rate === undefined ? {} : { rateLimit: { perSecond: opts.rate } }),
    });
    if (opts.json) return console.log(JSON.stringify(b, null, 2));
    console.log(
      `batch ${b.id}: maxConcurrency ${b.maxConcurrency}, target ${b.target}, ${b.liveRuns.length} live run${b.liveRuns.length === 1 ? '' : 's'}` +
        (b.rateLimit ? `, rate ${b.rateLimit.perSecond}/s` : ''),
    );
  });

batch
  .command('show')
  .description('show a batch: status and item counts')
  .argument('<id>')
  .option('--json', 'print JSON')
  .addOption(scopeOption())
  .addOption(apiOption)
  .action(async (id: string, opts) => {
    const b = await client(opts).getBatch(id);
    if (opts.json) return console.log(JSON.stringify(b, null, 2));
    console.log(
      [
        `batch     ${b.id}`,
        `job       ${b.job} ${JSON.stringify(b.params)}`,
        `tenant    ${b.tenant} / datasource ${b.datasource} / priority ${b.priority}`,
        `status    ${b.status}${b.reason ? ` (${b.reason})` : ''}`,
        `items     ${b.total}: ${b.counts.done} done, ${b.counts.failed} failed, ` +
          (b.status === 'cancelled'
            ? `${b.counts.running + b.counts.pending} not run (cancelled)`
            : `${b.counts.running} running, ${b.counts.pending} pending`),
        `tolerates ${toleranceText(b) ?? 'no failed item (any failure fails the batch once all items ran)'}`,
        `runs      ${b.liveRuns.length} live of ${b.target} wanted (maxConcurrency ${b.maxConcurrency}); ${b.runs} in all${b.redrives ? `; redriven ${b.redrives} time${b.redrives === 1 ? '' : 's'}` : ''}`,
        ...b.liveRuns.map(
          (r) => `  run ${r.id}  process ${r.process}  ${r.itemsPerSecond} items/s  ${r.settled} settled  beat ${r.beatAt}`,
        ),
        `created   ${b.createdAt}${b.finishedAt ? `\nfinished  ${b.finishedAt}` : ''}`,
      ].join('\n'),
    );
  });

batch
  .command('results')
  .description('print one JSON line per item: key, state, attempts, output, error')
  .argument('<id>')
  .option('--state <state>', 'only items in this state: pending | running | done | failed')
  .addOption(scopeOption())
  .addOption(apiOption)
  .action(async (id: string, opts) => {
    for await (const item of client(opts).items(id, 1000, opts.state)) {
      const { key, state, attempts, output, error } = item;
      process.stdout.write(JSON.stringify({ key, state, attempts, output, error }) + '\n');
    }
  });

batch
  .command('list')
  .description('list batches, newest first')
  .option('--tenant <tenant>', 'only this tenant (through its own route, /tenants/TENANT/batches)', tenantName)
  .option('--status <status>', 'open | succeeded | failed | cancelled')
  .option('--limit <n>', 'most batches (1..1000, default 100)', positiveInt('--limit'))
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (opts) => {
    // With --tenant, the tenant's own route (/tenants/TENANT/batches), as a per-tenant IAM policy requires.
    const list = await client(opts).listBatches({ status: opts.status, limit: opts.limit });
    if (opts.json) return console.log(JSON.stringify(list, null, 2));
    if (list.length === 0) return console.log('no batches');
    const lines = formatTable(
      [
        { title: 'id' },
        { title: 'status' },
        { title: 'job' },
        { title: 'prio', align: 'right' },
        { title: 'finished/total', align: 'right' },
        { title: 'tenant/datasource' },
        { title: 'created' },
      ],
      list.map((b) => [
        b.id,
        b.status,
        b.job,
        b.priority,
        `${b.counts.done + b.counts.failed}/${b.total}`,
        `${b.tenant}/${b.datasource}`,
        b.createdAt,
      ]),
    );
    for (const line of lines) console.log(line);
  });

batch
  .command('cancel')
  .description('cancel an open batch for good')
  .argument('<id>')
  .addOption(scopeOption())
  .addOption(apiOption)
  .action(async (id: string, opts) => {
    const b = await client(opts).cancelBatch(id);
    console.log(`batch ${b.id} ${b.status}`);
  });

batch
  .command('redrive')
  .description("put a finished batch's failed items back to pending with fresh attempts and run it again")
  .argument('<id>')
  .option('--idempotency-key <key>', 'a repeat with the same key answers the first redrive and does nothing')
  .option('--follow', 'show progress until the batch finishes; exit 1 unless it succeeded')
  .option('--json', 'print the batch and the redrive as JSON')
  .addOption(scopeOption())
  .addOption(apiOption)
  .action(async (id: string, opts) => {
    const api = client(opts);
    const { batch: b, redrive, redriven } = await api.redriveBatch(id, opts.idempotencyKey);
    if (opts.json) console.log(JSON.stringify({ ...b, redrive, redriven }));
    else if (redriven)
      console.log(
        `batch ${b.id} redriven (redrive ${redrive.number}): ${redrive.items} failed item${redrive.items === 1 ? '' : 's'} pending again`,
      );
    else
      console.log(
        `already redriven by this idempotency key: batch ${b.id} redrive ${redrive.number} (${count(redrive.items, 'item')}) at ${redrive.at}; now ${b.status}`,
      );
    if (opts.follow) await followToEnd(api, b.id);
  });

const units = program.command('units').description("register, list and remove tenants' units through the API");

const nonNegativeInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isInteger(n)) throw new InvalidArgumentError(`${name} must be a whole number ≥ 0`);
  return n;
};

const collect = (v: string, all: string[] | undefined) => [...(all ?? []), v];

units
  .command('put')
  .description("set TENANT's units: shards 0..N-1 of a unit job (changing N adds or removes units)")
  .argument('<tenant>')
  .requiredOption('--job <job>', 'unit job, e.g. outbox-delivery')
  .requiredOption('--shards <n>', 'number of shards (1..10000)', positiveInt('--shards'))
  .option(
    '--weight <w>',
    "weight of each unit (default: the job's, e.g. the endpoint count; 0: never claimed)",
    nonNegativeInt('--weight'),
  )
  .option('--endpoint <url>', 'a webhook endpoint (repeatable; outbox-delivery)', collect)
  .option('--config <json>', 'the unit config as a JSON object')
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, opts) => {
    let config: Record<string, unknown> | undefined;
    if (opts.config !== undefined) {
      try {
        config = JSON.parse(opts.config);
      } catch (e) {
        console.error(`leasehold: --config must be a JSON object: ${(e as Error).message}`);
        process.exitCode = 1;
        return;
      }
    }
    if (opts.endpoint && opts.job !== 'outbox-delivery')
      console.error(`leasehold: --endpoint is for outbox-delivery units; ${opts.job} does not use it`);
    const r = await new ApiClient(apiUrl(opts.api)).putUnits(tenant, {
      job: opts.job,
      shards: opts.shards,
      weight: opts.weight,
      endpoints: opts.endpoint,
      config,
    });
    if (opts.json) return console.log(JSON.stringify(r));
    console.log(
      `${r.tenant}: ${r.shards} ${r.job} unit${r.shards === 1 ? '' : 's'} of weight ${r.weight} (${r.added} added, ${r.removed} removed)`,
    );
  });

units
  .command('delete')
  .description('remove every unit of TENANT')
  .argument('<tenant>')
  .addOption(apiOption)
  .action(async (tenant: string, opts) => {
    const removed = await new ApiClient(apiUrl(opts.api)).deleteUnits(tenant);
    console.log(`${tenant}: ${count(removed, 'unit')} removed`);
  });

units
  .command('list')
  .description('list units with their owner process, by tenant and shard')
  .option('--tenant <tenant>', 'only this tenant', tenantName)
  .option('--limit <n>', 'most units (1..10000, default 1000)', positiveInt('--limit'))
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (opts) => {
    const list = await new ApiClient(apiUrl(opts.api)).listUnits({ tenant: opts.tenant, limit: opts.limit });
    if (opts.json) return console.log(JSON.stringify(list, null, 2));
    if (list.length === 0) return console.log('no units');
    const lines = formatTable(
      [{ title: 'tenant/shard' }, { title: 'job' }, { title: 'weight', align: 'right' }, { title: 'owner' }],
      list.map((u) => {
        const crashes = u.crashes ? `  ${u.crashes} crash${u.crashes === 1 ? '' : 'es'} in a row` : '';
        const held = u.quarantinedUntil ? `quarantined until ${u.quarantinedUntil} (quarantine ${u.quarantines})` : undefined;
        return [
          `${u.tenant}/${u.shard}`,
          u.job,
          u.weight,
          `${held ?? (u.owner ? `${u.owner} since ${u.claimedAt}` : 'unowned')}${crashes}`,
        ];
      }),
    );
    for (const line of lines) console.log(line);
  });

units
  .command('release')
  .description("lift the quarantine of TENANT's unit SHARD and forget its crashes (it is claimable at once)")
  .argument('<tenant>')
  .argument('<shard>', 'the shard (0..9999)', nonNegativeInt('<shard>'))
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, shard: number, opts) => {
    const u = await new ApiClient(apiUrl(opts.api)).releaseUnit(tenant, shard);
    if (opts.json) return console.log(JSON.stringify(u));
    console.log(`${u.tenant}/${u.shard}: released (${u.owner ? `owner ${u.owner}` : 'claimable'})`);
  });

/** `desired 3, live 3 (1 coming, 2 retiring); 1 batch worker` */
/** The exact share with at most two decimals (2.67), or `–` from an API that sends none. */
function evenShareText(evenShare: number | undefined): string {
  return evenShare === undefined ? '–' : String(Math.round(evenShare * 100) / 100);
}

function concurrencyLine(c: ApiConcurrency): string {
  const extra = [c.coming ? `${c.coming} coming` : '', c.retiring ? `${c.retiring} retiring` : ''].filter(Boolean).join(', ');
  const batch = c.batch ? `; ${c.batch} batch worker${c.batch === 1 ? '' : 's'} (not counted)` : '';
  return `desired ${c.desired}, live ${c.live}${extra ? ` (${extra})` : ''}${batch}`;
}

program
  .command('processes')
  .description(
    'show live against desired and the fair share, then list processes (live and expired, not yet swept) with role and the weight each owns',
  )
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (opts) => {
    const { fleet, processes } = await new ApiClient(apiUrl(opts.api)).listProcesses();
    if (opts.json) return console.log(JSON.stringify({ fleet, processes }, null, 2));
    console.log(concurrencyLine(fleet));
    console.log(
      `fair share ${fleet.fairShare} of weight ${fleet.totalWeight} (even share ${evenShareText(fleet.evenShare)});` +
        ` owned min ${fleet.minWeight}, max ${fleet.maxWeight}` +
        (fleet.starving ? `; ${fleet.starving} starving` : ''),
    );
    if (processes.length === 0) return console.log('no processes');
    for (const p of processes) {
      const state = p.live ? (p.retiring ? 'retiring' : 'live') : 'expired';
      const share =
        p.role === 'fleet' && p.live && (fleet.evenShare ?? 0) > 0
          ? ` (${Math.round((1000 * p.weight) / fleet.evenShare) / 10} % of even share)`
          : '';
      // Its chain (docs/design.md, "Process chains"): a worker replaced at its deadline is no failure.
      const chain =
        p.replacements > 0 && p.replaces
          ? `  replaced ${p.replacements} time${p.replacements === 1 ? '' : 's'} since ${p.chainStartedAt} (after ${p.replaces})`
          : '';
      console.log(
        `${p.id}  ${p.role.padEnd(5)}  ${state.padEnd(8)}  ${String(p.units).padStart(5)} ${p.units === 1 ? 'unit ' : 'units'}  weight ${String(p.weight).padStart(5)}${share}  ${p.hostname} ${p.version}  started ${p.startedAt}${chain}`,
      );
    }
  });

program
  .command('concurrency')
  .description('show the desired count of live processes against the live count, or set it to N (0..1000)')
  .argument('[n]', 'the new desired count', nonNegativeInt('N'))
  .addOption(apiOption)
  .action(async (n: number | undefined, opts) => {
    const api = new ApiClient(apiUrl(opts.api));
    const c = n === undefined ? await api.getConcurrency() : await api.setConcurrency(n);
    console.log(concurrencyLine(c));
  });

const outbox = program
  .command('outbox')
  .description("enqueue messages in a tenant's outbox, and show how its endpoints fare, through the API");

outbox
  .command('show')
  .description("per endpoint of TENANT's outbox: the backlog, the oldest undelivered message and the last error")
  .argument('<tenant>')
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, opts) => {
    const status = await new ApiClient(apiUrl(opts.api)).outboxStatus(tenant);
    if (opts.json) return console.log(JSON.stringify(status, null, 2));
    console.log(
      `${status.tenant}: ${status.shards} shard${status.shards === 1 ? '' : 's'}, ${status.endpoints.length} endpoint${status.endpoints.length === 1 ? '' : 's'}`,
    );
    for (const e of status.endpoints) {
      const oldest = e.oldest ? `oldest #${e.oldest.id}, ${formatAge(e.oldest.ageMs)} old` : 'nothing pending';
      console.log(`  ${e.url}`);
      console.log(
        `    backlog ${e.backlog} (${oldest}); ${e.failures} failure${e.failures === 1 ? '' : 's'} in a row; last delivered ${e.lastDeliveredAt ?? 'never'}`,
      );
      if (e.lastError) console.log(`    last error at ${e.lastError.at}: ${e.lastError.message}`);
    }
  });

/** `950 ms`, `12.3 s`, `4 min 5 s`, `2 h 3 min`. */
function formatAge(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1_000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
}

outbox
  .command('send')
  .description("enqueue a message for TENANT's webhook endpoints, on the shard its key hashes to")
  .argument('<tenant>')
  .requiredOption('--key <key>', 'message key (picks the shard)')
  .requiredOption('--payload <json>', 'the message payload, JSON')
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, opts) => {
    let payload: unknown;
    try {
      payload = JSON.parse(opts.payload);
    } catch (e) {
      console.error(`leasehold: --payload must be JSON: ${(e as Error).message}`);
      process.exitCode = 1;
      return;
    }
    const r = await new ApiClient(apiUrl(opts.api)).sendOutbox(tenant, { key: opts.key, payload });
    if (opts.json) return console.log(JSON.stringify(r));
    console.log(`enqueued message ${r.id} on ${tenant}/${r.shard}`);
  });

const tenants = program
  .command('tenants')
  .description("show a tenant's running and waiting batches, and set its limit, through the API");

tenants
  .command('show')
  .description("TENANT's running and waiting batches (waiting ones in the order they will run), its limit and its oldest wait")
  .argument('<tenant>')
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, opts) => {
    const t = await new ApiClient(apiUrl(opts.api)).getTenant(tenant);
    if (opts.json) return console.log(JSON.stringify(t, null, 2));
    printTenant(t);
  });

tenants
  .command('limit')
  .description("set how many of TENANT's batches may run at once (0 pauses it), or `default` for the configured default")
  .argument('<tenant>')
  .argument('<maxRunning>', 'a whole number ≥ 0, or default')
  .option('--json', 'print JSON')
  .addOption(apiOption)
  .action(async (tenant: string, value: string, opts) => {
    let maxRunning: number | null;
    if (value === 'default') maxRunning = null;
    else if (/^\d{1,10}$/.test(value.trim())) maxRunning = Number(value);
    else {
      console.error('leasehold: maxRunning must be a whole number ≥ 0 or "default"');
      process.exitCode = 1;
      return;
    }
    const t = await new ApiClient(apiUrl(opts.api)).setTenantLimit(tenant, maxRunning);
    if (opts.json) return console.log(JSON.stringify(t, null, 2));
    printTenant(t);
  });

function printTenant(t: ApiTenant): void {
  const limit =
    t.effectiveMaxRunning === null
      ? 'no limit'
      : `${t.effectiveMaxRunning === 0 ? 'paused: limit 0' : `at most ${t.effectiveMaxRunning} running`}${t.maxRunning === null ? ' (the default)' : ''}`;
  const oldest = t.oldestWaitMs === null ? '' : `; oldest wait ${formatAge(t.oldestWaitMs)}`;
  console.log(`${t.tenant}: ${t.running} running, ${t.waiting} waiting (${limit})${oldest}`);
  for (const [title, list] of [
    ['running', t.runningBatches],
    ['waiting', t.waitingBatches],
  ] as const) {
    if (list.length === 0) continue;
    console.log(`  ${title}:`);
    for (const b of list)
      console.log(`    ${b.id}  prio ${b.priority}  ${b.job.padEnd(12)} ${b.datasource}  for ${formatAge(b.forMs)}`);
  }
}

const s3 = program.command('s3').description("load test data into S3 (locally: leasehold dev's S3-compatible server)");
s3.command('put')
  .description(
    'upload a file as one object (or each file of a directory under the key as a prefix); creates the bucket when missing',
  )
  .argument('<file>', 'file or directory to upload')
  .argument('<bucket>', 'bucket name')
  .argument('[key]', "object key, or the prefix of a directory's files; default the file name")
  .option('--endpoint <url>', "S3 endpoint; default AWS_ENDPOINT_URL_S3, else leasehold dev's (.leasehold/s3.json)")
  .action(async (file: string, bucket: string, key: string | undefined, opts: { endpoint?: string }) => {
    const { putFiles, S3PutError } = await import('./cli/s3.js');
    try {
      const n = await putFiles({ file, bucket, key, endpoint: opts.endpoint });
      console.log(`uploaded ${n} object${n === 1 ? '' : 's'} to s3://${bucket}/${key ?? ''}`);
    } catch (e) {
      if (!(e instanceof S3PutError)) throw e;
      console.error(`leasehold: ${e.message}`);
      process.exitCode = 1;
    }
  });

program.parseAsync().catch((e: unknown) => {
  if (e instanceof ApiCallError) console.error(`leasehold: ${e.message}${e.status ? ` (HTTP ${e.status})` : ''}`);
  else if (e instanceof ConfigError) console.error(`leasehold: ${e.message}`);
  else console.error(`leasehold: ${(e as Error)?.stack ?? e}`);
  process.exitCode = process.exitCode || 1;
});
