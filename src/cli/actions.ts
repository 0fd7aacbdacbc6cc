// `leasehold action …`: cancel, pause, resume or redrive every batch a filter matches, as one
// tracked bulk action through the API (docs/cli.md, "Bulk actions"), and follow an action.
import { randomUUID } from 'node:crypto';
import { Option, type Command } from 'commander';
import type { ApiAction, ApiClient } from '../client/index.js';
import { apiOption, client } from './args.js';

const KINDS = ['cancel', 'pause', 'resume', 'redrive'] as const;

/** How often `--follow` reads the action again, ms. */
const FOLLOW_EVERY_MS = 1_000;

/** Add `action` with its subcommands to `program`. */
export function addActionCommands(program: Command): void {
  const action = program
    .command('action')
    .description('cancel, pause, resume or redrive many batches by filter as one tracked action, through the API');
  for (const kind of KINDS) addKind(action, kind);
  action
    .command('show')
    .description('show an action: matched, done, skipped (and why), remaining')
    .argument('<id>')
    .option('--follow', 'read it again every second until it is finished')
    .addOption(apiOption)
    .action(async (id: string, opts: { follow?: boolean; api?: string }) => {
      const api = client(opts);
      const a = opts.follow ? await follow(api, await api.getAction(id)) : await api.getAction(id);
      print(a);
    });
}

function addKind(action: Command, kind: (typeof KINDS)[number]): void {
  const defaults = { cancel: 'open', pause: 'running', resume: 'paused', redrive: 'failed' };
  action
    .command(kind)
    .description(`${kind} every batch the filter matches (at least one filter option; status defaults to ${defaults[kind]})`)
    .option('--tenant <tenant>', 'the batches of this tenant')
    .option('--datasource <datasource>', 'the batches of this datasource')
    .option('--job <job>', 'the batches of this job')
    .addOption(
      new Option('--status <status...>', 'any of these states').choices([
        'open',
        'running',
        'paused',
        'succeeded',
        'failed',
        'cancelled',
      ]),
    )
    .option('--created-after <instant>', 'created at or after this ISO 8601 instant')
    .option('--created-before <instant>', 'created before this ISO 8601 instant')
    .option('--key <requestKey>', 'request key: the same key answers the action it made (default: a new one, printed)')
    .option('--follow', 'follow it until it is finished')
    .addOption(apiOption)
    .action(async (opts: Record<string, string | string[] | boolean | undefined>) => {
      const filter = Object.fromEntries(
        (
          [
            ['tenant', opts.tenant],
            ['datasource', opts.datasource],
            ['job', opts.job],
            ['status', opts.status],
            ['createdAfter', opts.createdAfter],
            ['createdBefore', opts.createdBefore],
          ] as const
        ).filter(([, v]) => v !== undefined),
      );
      const requestKey = typeof opts.key === 'string' ? opts.key : `cli-${randomUUID()}`;
      const api = client(opts as { api?: string });
      const made = await api.startAction({ action: kind, filter, requestKey });
      console.log(`action ${made.id} ${made.created ? 'made' : 'answered by its key'} (key ${made.requestKey})`);
      print(opts.follow ? await follow(api, made) : made);
    });
}

async function follow(api: ApiClient, a: ApiAction): Promise<ApiAction> {
  while (a.finishedAt === null) {
    console.log(`  ${a.done + a.skipped} of ${a.matched} worked (${a.done} done, ${a.skipped} skipped)`);
    await new Promise((r) => setTimeout(r, FOLLOW_EVERY_MS));
    a = await api.getAction(a.id);
  }
  return a;
}

function print(a: ApiAction): void {
  const state = a.finishedAt === null ? `working, ${a.remaining} left` : `finished ${a.finishedAt}`;
  console.log(`action ${a.id} ${a.action}: matched ${a.matched}, done ${a.done}, skipped ${a.skipped}; ${state}`);
  for (const r of a.skippedReasons) console.log(`  skipped ${r.count}: ${r.reason}`);
  if (a.finishedAt === null) console.log(`  follow it: leasehold action show ${a.id} --follow`);
}
