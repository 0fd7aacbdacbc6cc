// How `batch show` and `tenants usage` print usage and its estimated cost (docs/design.md, "Usage
// and cost").
import type { ApiUsage } from '../client/index.js';

/** USD with enough digits for a small batch: `$0.000123`. */
function usd(n: number): string {
  return `$${n < 0.01 ? n.toFixed(6) : n.toFixed(4)}`;
}

/** The `usage` and `cost` lines (labels padded to 10 characters, as `batch show`'s). */
export function usageLines(u: ApiUsage): string[] {
  const died = u.diedRuns ? `; ${u.diedRuns} died, counted to their last beat` : '';
  const s3 = u.s3Requests;
  const c = u.estimatedCost;
  return [
    `usage     ${(u.workerMs / 1000).toFixed(1)} s of workers, ${u.gbSeconds} GB-s, in ${u.runs} run${u.runs === 1 ? '' : 's'} ` +
      `(${u.invocations} invocation${u.invocations === 1 ? '' : 's'}${died}); ${u.items} item attempts; ` +
      `S3 ${s3.get} GET, ${s3.put} PUT, ${s3.list} LIST`,
    `cost      ${usd(c.total)} ${c.currency} estimated (Lambda ${usd(c.lambda)}, S3 ${usd(c.s3)}; ${c.region} prices` +
      `${c.overridden ? ', overridden' : ''})`,
  ];
}
