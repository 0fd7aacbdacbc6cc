// `leasehold processes` and `leasehold concurrency`: the fleet of live processes against the
// desired count, through the API.
import type { Command } from 'commander';
import type { ApiConcurrency } from '../client/index.js';
import { apiOption, client, nonNegativeInt } from './args.js';

/** Add `processes` and `concurrency` to `program`. */
export function addFleetCommands(program: Command): void {
  addProcesses(program);
  addConcurrency(program);
}

/** The exact share with at most two decimals (2.67), or `–` from an API that sends none. */
function evenShareText(evenShare: number | undefined): string {
  return evenShare === undefined ? '–' : String(Math.round(evenShare * 100) / 100);
}

/**
 * The fleet against the desired count, each figure said once: `live 3 of 3 desired; 3
 * invocations on their way (…)`. `coming` counts workers invoked and not live yet (their first
 * heartbeat not seen; fleet replacements a worker sends at its deadline, the scheduler's and
 * batch workers'), never part of `live`: written as `(3 coming)` next to the live count it read
 * as 6. With `totalWeight` 0 (no unit has weight) and a desired count above 0, it says why none
 * is live: fleet processes are invoked only while some unit has weight (docs/design.md, "Process
 * membership and unit ownership").
 */
export function concurrencyLine(c: ApiConcurrency, totalWeight?: number): string {
  const parts = [`live ${c.live} of ${c.desired} desired`];
  if (totalWeight === 0 && c.desired > 0 && c.live === 0) {
    parts.push('no units have weight, so no fleet process is invoked (`leasehold units put` registers some)');
  }
  if (c.coming)
    parts.push(
      `${c.coming} invocation${c.coming === 1 ? '' : 's'} on ${c.coming === 1 ? 'its' : 'their'} way (invoked, not live yet)`,
    );
  if (c.retiring) parts.push(`${c.retiring} retiring`);
  if (c.batch) parts.push(`${c.batch} batch worker${c.batch === 1 ? '' : 's'} (not counted)`);
  return parts.join('; ');
}

/** `processes`. */
function addProcesses(program: Command): void {
  program
    .command('processes')
    .description(
      'show live against desired and the fair share, then list processes (live and expired, not yet swept) with role and the weight each owns',
    )
    .option('--json', 'print JSON')
    .addOption(apiOption)
    .action(async (opts) => {
      const { fleet, processes } = await client({ api: opts.api }).listProcesses();
      if (opts.json) return console.log(JSON.stringify({ fleet, processes }, null, 2));
      console.log(concurrencyLine(fleet, fleet.totalWeight));
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
}

/** `concurrency [n]`. */
function addConcurrency(program: Command): void {
  program
    .command('concurrency')
    .description('show the desired count of live processes against the live count, or set it to N (0..1000)')
    .argument('[n]', 'the new desired count', nonNegativeInt('N'))
    .addOption(apiOption)
    .action(async (n: number | undefined, opts) => {
      const api = client({ api: opts.api });
      const c = n === undefined ? await api.getConcurrency() : await api.setConcurrency(n);
      // None live while some are desired: the fleet's weight says whether that is for want of units.
      const weight = c.live === 0 && c.desired > 0 ? (await api.listProcesses()).fleet.totalWeight : undefined;
      console.log(concurrencyLine(c, weight));
    });
}
