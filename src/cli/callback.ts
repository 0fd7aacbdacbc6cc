// `leasehold callback …`: complete or heartbeat a waiting item's callback through the API
// (docs/api.md, "Callbacks"), with the token its work handed out.
import type { Command } from 'commander';
import { apiOption, client } from './args.js';

/** Add `callback` and its subcommands to `program`. */
export function addCallbackCommands(program: Command): void {
  const callback = program.command('callback').description("complete or heartbeat a waiting item's callback through the API");
  callback
    .command('succeed')
    .description('complete the callback TOKEN names with a JSON result: its item runs on with it')
    .argument('<token>')
    .option('--result <json>', 'the result, any JSON (default null)')
    .addOption(apiOption)
    .action(async (token: string, opts) => {
      let result: unknown = null;
      if (opts.result !== undefined) {
        try {
          result = JSON.parse(opts.result);
        } catch (e) {
          console.error(`leasehold: --result must be JSON: ${(e as Error).message}`);
          process.exitCode = 1;
          return;
        }
      }
      print(await client(opts).completeCallback(token, { action: 'succeed', result }));
    });
  callback
    .command('fail')
    .description('fail the callback TOKEN names with an error text: its item runs on with it')
    .argument('<token>')
    .requiredOption('--error <text>', 'the error')
    .addOption(apiOption)
    .action(async (token: string, opts) =>
      print(await client(opts).completeCallback(token, { action: 'fail', error: opts.error })),
    );
  callback
    .command('heartbeat')
    .description("move the callback's heartbeat deadline (its heartbeatTimeoutMs from now)")
    .argument('<token>')
    .addOption(apiOption)
    .action(async (token: string, opts) => print(await client(opts).completeCallback(token, { action: 'heartbeat' })));
}

function print(r: { batchId: string; key: string; outcome: string; woken: boolean }): void {
  console.log(`item ${JSON.stringify(r.key)} of batch ${r.batchId}: ${r.outcome}${r.woken ? ', due again' : ''}`);
}
