// `leasehold batch show`: a batch's status, items, runs and usage, each number with what it counts, and
// with --follow its progress to the end (a batch this command did not start too).
import type { Command } from 'commander';
import type { ApiBatch, ApiItem } from '../client/index.js';
import { apiOption, client, scopeOption } from './args.js';
import { followToEnd } from './follow.js';
import { usageLines } from './usage-text.js';

/** How a batch's tolerance reads: `2 failed items` or `5% of the items (2 of 40)`; null when none. */
function toleranceText(b: ApiBatch): string | null {
  const t = b.toleratedFailures;
  if (!t) return null;
  if ('count' in t) return `${t.count} failed item${t.count === 1 ? '' : 's'}`;
  return `${t.percent}% of the items (${b.allowedFailures} of ${b.total})`;
}

/**
 * The items line. `running` is the items' state as stored: an item a run claimed counts as
 * running from its claim, whether it is being worked or waits in the run's claim-ahead queue for
 * a free slot (docs/design.md, "Batches"); the API does not tell the two apart, so the line says so.
 */
function itemsLine(b: ApiBatch): string {
  const reading = b.reading ? ' so far (its source is still being read)' : '';
  const rest =
    b.status === 'cancelled' || b.notRun > 0
      ? `${b.notRun} not run (${notRunWhy(b)})`
      : `${b.counts.running} running (claimed by its runs: being worked or queued ahead in a run), ${b.counts.waiting} waiting (callbacks and sleeps), ${b.counts.pending} pending`;
  return `items     ${b.total}${reading}: ${b.counts.done} done, ${b.counts.failed} failed, ${rest}`;
}

/** Why a finished batch's unfinished items will not run: how it ended. */
function notRunWhy(b: ApiBatch): string {
  if (b.status === 'cancelled') return 'cancelled';
  if (b.status === 'succeeded') return 'it succeeded without them';
  return b.reason === 'deadline' ? 'past its deadline' : 'the batch failed';
}

/**
 * One line of `batch results`: the item's `key`, `state`, `attempts`, `output` and `error` as
 * JSON, and `"notRun": true` for an item of a finished `batch` (any status but `open`) still
 * pending, running or waiting: no run works it any more (until a redrive reopens the batch), as
 * the API's `notRun` counts it and `batch show` and the dashboard show it. The item's state stays
 * the one stored.
 */
export function resultLine(item: ApiItem, batch: Pick<ApiBatch, 'status'>): string {
  const { key, state, attempts, output, error } = item;
  const notRun = batch.status !== 'open' && (state === 'pending' || state === 'running' || state === 'waiting');
  return JSON.stringify(notRun ? { key, state, attempts, output, error, notRun } : { key, state, attempts, output, error });
}

/**
 * The runs line: live runs against the target (a finished batch wants none: `none (finished)`),
 * and `runs`, every run the batch ever had (each join, each takeover of a stale run, and each
 * time slice a worker handed off at its deadline starts a new one), so a short batch can count many.
 */
function runsLine(b: ApiBatch): string {
  const redriven = b.redrives ? `; redriven ${b.redrives} time${b.redrives === 1 ? '' : 's'}` : '';
  // A finished batch wants no run: its target is no longer read. Runs still live are ending. A
  // paused batch wants none either: it is not waiting for workers.
  const live =
    b.status !== 'open'
      ? b.liveRuns.length
        ? `${b.liveRuns.length} live, ending (finished)`
        : 'none (finished)'
      : b.paused
        ? `${b.liveRuns.length} live, paused since ${b.pausedAt}, none wanted (maxConcurrency ${b.maxConcurrency})`
        : `${b.liveRuns.length} live of ${b.target} wanted (maxConcurrency ${b.maxConcurrency})`;
  return `runs      ${live}; ${b.runs} in all (every run it ever had: joins, takeovers and time slices)${redriven}`;
}

/** The lines of `batch show`. */
export function showLines(b: ApiBatch): string[] {
  return [
    `batch     ${b.id}`,
    `job       ${b.job} ${JSON.stringify(b.params)}`,
    `tenant    ${b.tenant} / datasource ${b.datasource} / priority ${b.priority}`,
    `status    ${b.status === 'open' && b.paused ? 'open, paused' : b.status}${b.reason ? ` (${b.reason})` : ''}` +
      (b.deadline ? `; deadline ${b.deadline}` : ''),
    itemsLine(b),
    `tolerates ${toleranceText(b) ?? 'no failed item (any failure fails the batch once all items ran)'}`,
    runsLine(b),
    ...b.liveRuns.map(
      (r) => `  run ${r.id}  process ${r.process}  ${r.itemsPerSecond} items/s  ${r.settled} settled  beat ${r.beatAt}`,
    ),
    `created   ${b.createdAt}${b.finishedAt ? `\nfinished  ${b.finishedAt}` : ''}`,
    ...(b.usage ? usageLines(b.usage) : []),
  ];
}

/** Add `batch show` to `batch`. */
export function addShow(batch: Command): void {
  batch
    .command('show')
    .description('show a batch: status, item counts and runs; with --follow, its progress until it finishes')
    .argument('<id>')
    .option('--follow', 'then show progress until the batch finishes; exit 1 unless it succeeded')
    .option('--json', 'print JSON')
    .addOption(scopeOption())
    .addOption(apiOption)
    .action(async (id: string, opts) => {
      const api = client(opts);
      const b = await api.getBatch(id);
      if (opts.json) console.log(JSON.stringify(b, null, 2));
      else console.log(showLines(b).join('\n'));
      if (opts.follow) await followToEnd(api, b.id);
    });
}
