// `leasehold pool …`: concurrency pools (docs/design.md, "Concurrency pools"), through the API.
import { InvalidArgumentError, type Command } from 'commander';
import type { ApiPool } from '../client/index.js';
import { apiOption, client, positiveInt } from './args.js';

/** Add `pool set|show|list` to `program`. */
export function addPoolCommands(program: Command): void {
  const pool = program
    .command('pool')
    .description(
      'set and show concurrency pools: the items in flight across every batch naming one, fleet-wide, through the API',
    );
  pool
    .command('set')
    .description('create pool NAME or change its limits, also while batches run: --limit N, or --per-key N with --total M')
    .argument('<name>')
    .option('--limit <n>', 'most items in flight at once', positiveInt('--limit'))
    .option('--per-key <n>', 'most items in flight per key', positiveInt('--per-key'))
    .option('--total <n>', 'with --per-key: most in flight across keys (default: --per-key)', positiveInt('--total'))
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (name: string, opts) => {
      if ((opts.limit === undefined) === (opts.perKey === undefined)) {
        throw new InvalidArgumentError('give --limit N, or --per-key N (with --total M)');
      }
      if (opts.limit !== undefined && opts.total !== undefined) throw new InvalidArgumentError('--total goes with --per-key');
      const limits =
        opts.limit !== undefined ? { limit: opts.limit as number } : { perKey: opts.perKey as number, total: opts.total };
      print(await client({ api: opts.api }).setPool(name, limits), opts.json);
    });
  pool
    .command('show')
    .description('pool NAME: its limits, the items in flight now and the busiest keys')
    .argument('<name>')
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (name: string, opts) => print(await client({ api: opts.api }).getPool(name), opts.json));
  pool
    .command('list')
    .description('every pool with its limits and the items in flight now')
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (opts) => {
      const pools = await client({ api: opts.api }).listPools();
      if (opts.json) return console.log(JSON.stringify(pools, null, 2));
      if (pools.length === 0) return console.log('no pools');
      for (const p of pools) console.log(line(p));
    });
}

/** `NAME: N in flight of LIMIT (R runs)`, per-key pools as `of TOTAL, PER per key`. */
function line(p: ApiPool): string {
  const limit = p.perKey === null ? `${p.total}` : `${p.total}, ${p.perKey} per key`;
  return `${p.name}: ${p.inFlight} in flight of ${limit} (${p.runs} run${p.runs === 1 ? '' : 's'})`;
}

function print(p: ApiPool, json: boolean | undefined): void {
  if (json) return console.log(JSON.stringify(p, null, 2));
  console.log(line(p));
  for (const k of p.keys) if (p.perKey !== null) console.log(`  ${JSON.stringify(k.key)}: ${k.inFlight}`);
}
