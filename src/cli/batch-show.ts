// `leasehold batch show`: a batch's status, items and runs, each number with what it counts.
import type { Command } from 'commander';
import type { ApiBatch } from '../client/index.js';
import { apiOption, client, scopeOption } from './args.js';

/** How a batch's tolerance reads: `2 failed items` or `5% of the items (2 of 40)`; null when none. */
function toleranceText(b: ApiBatch): string | null {
  const t = b.toleratedFailures;
  if (!t) return null;
  if ('count' in t) return `${t.count} failed item${t.count === 1 ? '' : 's'}`;
  return `${t.percent}% of the items (${b.allowedFailures} of ${b.total})`;
}

/** Add `batch show` to `batch`. */
export function addShow(batch: Command): void {
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
}
