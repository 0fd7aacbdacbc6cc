// `leasehold batch …`: start, change, list, cancel and redrive batches, and read their results,
// through the API (`batch show` is in batch-show.ts).
import type { Command } from 'commander';
import {
  apiOption,
  client,
  collectParam,
  concurrencyArg,
  count,
  notifyArg,
  deadlineArg,
  deadlineMsArg,
  positiveInt,
  priorityArg,
  rateArg,
  resultsArg,
  scopeOption,
  sourceArg,
  tenantName,
  timeoutArg,
  tolerance,
} from './args.js';
import { addShow, resultLine } from './batch-show.js';
import { followToEnd } from './follow.js';
import { formatTable } from './table.js';

/** Add `batch` and its subcommands to `program`. */
export function addBatchCommands(program: Command): void {
  const batch = program
    .command('batch')
    .description(
      'start, change (update), show, list, pause, resume, cancel and redrive batches, and read their results, through the API',
    );
  addStart(batch);
  addUpdate(batch);
  addShow(batch);
  addResults(batch);
  addList(batch);
  addCancel(batch);
  addPauseResume(batch);
  addRedrive(batch);
}

/** `batch start`. */
function addStart(batch: Command): void {
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
    .option('--pool <name>', "the concurrency pool its items count against, one that exists (default: the job's pool, or none)")
    .option(
      '--min-succeeded <n>',
      'end the batch succeeded once N items are done; the rest never run',
      positiveInt('--min-succeeded'),
    )
    .option('--first-succeeded', 'end the batch succeeded at its first done item (--min-succeeded 1)')
    .option(
      '--source <s3url|json>',
      "read the items from S3 instead of expanding the params: s3://BUCKET/PREFIX/ (one item per object), s3://BUCKET/KEY.jsonl, .csv or .tsv, each also .gz (one per line or row), or the API's source as JSON (CSV options: delimiter, header, quote)",
      sourceArg,
    )
    .option(
      '--results <s3url>',
      'write the results to s3://BUCKET/PREFIX when the batch ends (JSON Lines parts, a manifest last)',
      resultsArg,
    )
    .option(
      '--notify <url>',
      "POST the batch's Batch Finished event to URL as a signed webhook when it ends (needs LEASEHOLD_WEBHOOK_SECRET)",
      notifyArg,
    )
    .option('--deadline <instant>', 'not finished by this ISO 8601 instant, the batch ends failed (reason deadline)', deadlineArg)
    .option(
      '--deadline-ms <ms>',
      'not finished this many ms after its start, the batch ends failed (reason deadline)',
      deadlineMsArg,
    )
    .option('--follow', 'show progress until the batch finishes; exit 1 unless it succeeded')
    .option('--json', 'print the batch as JSON')
    .addOption(apiOption)
    .action(async (job: string, opts) => {
      // The start's own tenant's routes (/tenants/TENANT/batches…), for the start and the follow.
      const api = client(opts);
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
        ...(opts.pool === undefined ? {} : { pool: opts.pool as string }),
        ...(opts.firstSucceeded
          ? { completion: 'firstSucceeded' as const }
          : opts.minSucceeded === undefined
            ? {}
            : { completion: { minSucceeded: opts.minSucceeded as number } }),
        ...(opts.source === undefined ? {} : { source: opts.source }),
        ...(opts.results === undefined ? {} : { results: opts.results }),
        ...(opts.notify === undefined ? {} : { notify: opts.notify }),
        ...(opts.deadline === undefined ? {} : { deadline: opts.deadline }),
        ...(opts.deadlineMs === undefined ? {} : { deadlineMs: opts.deadlineMs }),
      });
      if (opts.json) console.log(JSON.stringify(b));
      else
        console.log(
          `${created ? 'started' : 'already started by this request key:'} batch ${b.id} (${b.reading ? 'its workers read the source: the items count grows as they do' : count(b.total, 'item')})`,
        );
      if (opts.follow) await followToEnd(api, b.id);
    });
}

/** `batch update`. */
function addUpdate(batch: Command): void {
  batch
    .command('update')
    .description('change an open batch while it runs: how many runs may work it at once, its rate limit, its deadline')
    .argument('<id>')
    .option('--concurrency <n>', 'most runs at once, 1..10000 (lowered: the newest runs hand off within a beat)', concurrencyArg)
    .option('--rate <perSecond>', 'most items started per second per rate-limit key, fleet-wide', rateArg)
    .option('--deadline <instant>', 'its deadline, an ISO 8601 instant', deadlineArg)
    .option('--deadline-ms <ms>', 'its deadline, ms from its start', deadlineMsArg)
    .option('--no-deadline', 'clear its deadline')
    .option('--json', 'print JSON')
    .addOption(scopeOption())
    .addOption(apiOption)
    .action(async (id: string, opts) => {
      // --no-deadline makes opts.deadline false; absent, commander sets it true.
      const deadline =
        opts.deadline === false ? { deadline: null } : typeof opts.deadline === 'string' ? { deadline: opts.deadline } : {};
      if (
        opts.concurrency === undefined &&
        opts.rate === undefined &&
        !('deadline' in deadline) &&
        opts.deadlineMs === undefined
      ) {
        console.error('leasehold: batch update needs --concurrency, --rate, --deadline, --deadline-ms or --no-deadline');
        process.exitCode = 1;
        return;
      }
      const b = await client(opts).updateBatch(id, {
        ...(opts.concurrency === undefined ? {} : { maxConcurrency: opts.concurrency }),
        ...(opts.rate === undefined ? {} : { rateLimit: { perSecond: opts.rate } }),
        ...deadline,
        ...(opts.deadlineMs === undefined ? {} : { deadlineMs: opts.deadlineMs }),
      });
      if (opts.json) return console.log(JSON.stringify(b, null, 2));
      console.log(
        `batch ${b.id}: maxConcurrency ${b.maxConcurrency}, target ${b.target}, ${b.liveRuns.length} live run${b.liveRuns.length === 1 ? '' : 's'}` +
          (b.rateLimit ? `, rate ${b.rateLimit.perSecond}/s` : '') +
          (b.deadline ? `, deadline ${b.deadline}` : ''),
      );
    });
}

/** `batch results`. */
function addResults(batch: Command): void {
  batch
    .command('results')
    .description(
      'print one JSON line per item: key, state, attempts, output, error (and notRun: true for an item a finished batch left unrun)',
    )
    .argument('<id>')
    .option('--state <state>', 'only items in this state: pending | running | waiting | done | failed')
    .addOption(scopeOption())
    .addOption(apiOption)
    .action(async (id: string, opts) => {
      const api = client(opts);
      // The batch's status as the listing starts: a batch that ends meanwhile is read as open.
      const batch = await api.getBatch(id);
      for await (const item of api.items(id, 1000, opts.state)) process.stdout.write(resultLine(item, batch) + '\n');
    });
}

/** `batch list`. */
function addList(batch: Command): void {
  batch
    .command('list')
    .description('list batches, newest first')
    .option('--tenant <tenant>', 'only this tenant (through its own route, /tenants/TENANT/batches)', tenantName)
    .option('--status <status>', 'open (running or paused) | running | paused | succeeded | failed | cancelled')
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
          b.paused ? 'paused' : b.status,
          b.job,
          b.priority,
          `${b.counts.done + b.counts.failed}/${b.total}`,
          `${b.tenant}/${b.datasource}`,
          b.createdAt,
        ]),
      );
      for (const line of lines) console.log(line);
    });
}

/** `batch cancel`. */
function addCancel(batch: Command): void {
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
}

/** `batch pause` and `batch resume`. */
function addPauseResume(batch: Command): void {
  batch
    .command('pause')
    .description('pause an open batch: it keeps its items, its runs hand off within a beat, nothing runs until it resumes')
    .argument('<id>')
    .addOption(scopeOption())
    .addOption(apiOption)
    .action(async (id: string, opts) => {
      const b = await client(opts).pauseBatch(id);
      console.log(`batch ${b.id} paused (${b.liveRuns.length} run${b.liveRuns.length === 1 ? '' : 's'} handing off)`);
    });
  batch
    .command('resume')
    .description('resume a paused batch: workers are sent to it again')
    .argument('<id>')
    .addOption(scopeOption())
    .addOption(apiOption)
    .action(async (id: string, opts) => {
      const b = await client(opts).resumeBatch(id);
      console.log(`batch ${b.id} resumed (target ${b.target} run${b.target === 1 ? '' : 's'})`);
    });
}

/** `batch redrive`. */
function addRedrive(batch: Command): void {
  batch
    .command('redrive')
    .description(
      "put a finished batch's failed items back to pending with fresh attempts and run it again (with the items its deadline left unrun)",
    )
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
}
