// `leasehold units …`: register, list, remove and release tenants' units through the API.
import type { Command } from 'commander';
import { apiOption, client, collect, count, nonNegativeInt, positiveInt, tenantName } from './args.js';
import { formatTable } from './table.js';

/** Add `units` and its subcommands to `program`. */
export function addUnitsCommands(program: Command): void {
  const units = program.command('units').description("register, list and remove tenants' units through the API");
  addPut(units);
  addDelete(units);
  addList(units);
  addRelease(units);
}

/** `units put`. */
function addPut(units: Command): void {
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
      const r = await client({ api: opts.api }).putUnits(tenant, {
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
}

/** `units delete`. */
function addDelete(units: Command): void {
  units
    .command('delete')
    .description('remove every unit of TENANT')
    .argument('<tenant>')
    .addOption(apiOption)
    .action(async (tenant: string, opts) => {
      const removed = await client({ api: opts.api }).deleteUnits(tenant);
      console.log(`${tenant}: ${count(removed, 'unit')} removed`);
    });
}

/** `units list`. */
function addList(units: Command): void {
  units
    .command('list')
    .description('list units with their owner process, by tenant and shard')
    .option('--tenant <tenant>', 'only this tenant', tenantName)
    .option('--limit <n>', 'most units (1..10000, default 1000)', positiveInt('--limit'))
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (opts) => {
      const list = await client({ api: opts.api }).listUnits({ tenant: opts.tenant, limit: opts.limit });
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
}

/** `units release`. */
function addRelease(units: Command): void {
  units
    .command('release')
    .description("lift the quarantine of TENANT's unit SHARD and forget its crashes (it is claimable at once)")
    .argument('<tenant>')
    .argument('<shard>', 'the shard (0..9999)', nonNegativeInt('<shard>'))
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (tenant: string, shard: number, opts) => {
      const u = await client({ api: opts.api }).releaseUnit(tenant, shard);
      if (opts.json) return console.log(JSON.stringify(u));
      console.log(`${u.tenant}/${u.shard}: released (${u.owner ? `owner ${u.owner}` : 'claimable'})`);
    });
}
