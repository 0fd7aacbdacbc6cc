// `leasehold outbox …` and `leasehold tenants …`: a tenant's outbox, its batches and its usage, through the API.
import type { Command } from 'commander';
import { ApiCallError, type ApiTenant } from '../client/index.js';
import { apiOption, client, formatAge } from './args.js';
import { usageLines } from './usage-text.js';

/** Add `outbox` and `tenants` with their subcommands to `program`. */
export function addTenantCommands(program: Command): void {
  const outbox = program
    .command('outbox')
    .description("enqueue messages in a tenant's outbox, and show how its endpoints fare, through the API");
  addOutboxShow(outbox);
  addOutboxSend(outbox);
  const tenants = program
    .command('tenants')
    .description("show a tenant's running and waiting batches and its usage, and set its limit, through the API");
  addTenantShow(tenants);
  addTenantLimit(tenants);
  addTenantUsage(tenants);
}

/**
 * `call`, its `no_outbox_units` answer told as the command that registers units
 * (`leasehold units put TENANT --job outbox-delivery …`) rather than the API's request.
 * @throws {ApiCallError} what `call` throws (that one with the CLI's wording).
 */
async function withUnitsHint<T>(tenant: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (e) {
    if (!(e instanceof ApiCallError) || e.code !== 'no_outbox_units') throw e;
    throw new ApiCallError(
      e.status,
      e.code,
      `tenant "${tenant}" has no outbox-delivery units of weight > 0 (nothing would deliver): register them first with ` +
        `leasehold units put ${tenant} --job outbox-delivery --shards N --endpoint URL`,
    );
  }
}

/** `outbox show`. */
function addOutboxShow(outbox: Command): void {
  outbox
    .command('show')
    .description(
      "per endpoint of TENANT's outbox: the backlog, the oldest undelivered message, the last error and any Retry-After pause",
    )
    .argument('<tenant>')
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (tenant: string, opts) => {
      const status = await withUnitsHint(tenant, () => client({ api: opts.api }).outboxStatus(tenant));
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
        if (e.pause) {
          console.log(
            `    paused by Retry-After until ${e.pause.until} (${formatAge(e.pause.remainingMs)} left; asked ${formatAge(e.pause.askedMs)} at ${e.pause.at})`,
          );
        }
      }
    });
}

/** `outbox send`. */
function addOutboxSend(outbox: Command): void {
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
      const r = await withUnitsHint(tenant, () => client({ api: opts.api }).sendOutbox(tenant, { key: opts.key, payload }));
      if (opts.json) return console.log(JSON.stringify(r));
      console.log(`enqueued message ${r.id} on ${tenant}/${r.shard}`);
    });
}

/** `tenants show`. */
function addTenantShow(tenants: Command): void {
  tenants
    .command('show')
    .description("TENANT's running and waiting batches (waiting ones in the order they will run), its limit and its oldest wait")
    .argument('<tenant>')
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (tenant: string, opts) => {
      const t = await client({ api: opts.api }).getTenant(tenant);
      if (opts.json) return console.log(JSON.stringify(t, null, 2));
      printTenant(t);
    });
}

/** `tenants usage`: what TENANT's workers used over a time range, for charging back. */
function addTenantUsage(tenants: Command): void {
  tenants
    .command('usage')
    .description(
      "what TENANT's batches used in [--from, --to): worker time, GB-seconds, invocations, item attempts, S3 requests and an estimated cost",
    )
    .argument('<tenant>')
    .option('--from <instant>', 'ISO 8601 instant with its offset (default: 30 days before --to)')
    .option('--to <instant>', 'ISO 8601 instant with its offset (default: now)')
    .option('--json', 'print JSON (the usage alone)')
    .addOption(apiOption)
    .action(async (tenant: string, opts) => {
      const t = await client({ api: opts.api }).getTenant(tenant, { from: opts.from, to: opts.to });
      if (opts.json) return console.log(JSON.stringify(t.usage ?? null, null, 2));
      if (!t.usage) {
        console.error('leasehold: the API answered no usage (an older version?)');
        process.exitCode = 1;
        return;
      }
      console.log(`${t.tenant}: from ${t.usage.from} to ${t.usage.to}`);
      console.log(usageLines(t.usage).join('\n'));
    });
}

/** `tenants limit`. */
function addTenantLimit(tenants: Command): void {
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
      const t = await client({ api: opts.api }).setTenantLimit(tenant, maxRunning);
      if (opts.json) return console.log(JSON.stringify(t, null, 2));
      printTenant(t);
    });
}

/** A tenant's line and its running and waiting batches. */
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
