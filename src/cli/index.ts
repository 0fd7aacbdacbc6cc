// The `leasehold` command line (bin/leasehold.js runs the built copy of this file): the program
// and its subcommands, one file per group, and the one place errors become a line and exit 1.
import { Command } from 'commander';
import { LeaseholdError } from '../errors.js';
import { ConfigError } from '../runtime/config.js';
import { ApiCallError } from '../client/index.js';
import { addActionCommands } from './actions.js';
import { addBatchCommands } from './batch.js';
import { addCallbackCommands } from './callback.js';
import { addFleetCommands } from './fleet.js';
import { addLocalCommands } from './local.js';
import { addS3Commands } from './s3-commands.js';
import { addPoolCommands } from './pools.js';
import { addTenantCommands } from './tenants.js';
import { addUnitsCommands } from './units.js';

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

addLocalCommands(program);
addBatchCommands(program);
addActionCommands(program);
addCallbackCommands(program);
addUnitsCommands(program);
addFleetCommands(program);
addTenantCommands(program);
addPoolCommands(program);
addS3Commands(program);

program.parseAsync().catch((e: unknown) => {
  if (e instanceof ApiCallError) {
    // An app's code that threw (a job's expand, say) is a 500 whose details only the log has.
    const where = e.status === 500 ? '; with leasehold dev, the log is .leasehold/dev.log where it runs' : '';
    console.error(`leasehold: ${e.message}${e.status ? ` (HTTP ${e.status}${where})` : ''}`);
  }
  // leasehold's own errors say what is wrong and what to do: their message, not a stack.
  else if (e instanceof ConfigError || e instanceof LeaseholdError) console.error(`leasehold: ${e.message}`);
  else console.error(`leasehold: ${(e as Error)?.stack ?? e}`);
  process.exitCode = process.exitCode || 1;
});
