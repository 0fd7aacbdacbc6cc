// The end of `--follow` (batch start, show and redrive): progress to the end, then how it ended.
import type { ApiBatch, ApiClient } from '../client/index.js';
import { followBatch } from '../terminal/index.js';

/** Most failed items the end of a follow lists (all are in `leasehold batch results`). */
const LISTED_FAILURES = 10;

/**
 * How a followed batch ended: `batch ID failed: 3 done, 1 failed, 26 not run; <reason>`. Its
 * items no run will work (`notRun`: a cancelled batch's, or those a batch ended without, by its
 * deadline, its failures or an early success) are said, as `batch show` says them.
 */
export function endLine(end: ApiBatch): string {
  const tolerated = end.status === 'succeeded' && end.counts.failed > 0 ? ' (tolerated)' : '';
  return (
    `batch ${end.id} ${end.status}: ${end.counts.done} done, ${end.counts.failed} failed${tolerated}` +
    (end.status === 'cancelled' || end.notRun > 0 ? `, ${end.notRun} not run` : '') +
    (end.reason ? `; ${end.reason}` : '')
  );
}

/**
 * Show batch `id`'s progress until it finishes, say how it ended (the reason, and its failed
 * items with their errors), and exit 1 unless it succeeded.
 */
export async function followToEnd(api: ApiClient, id: string): Promise<void> {
  const end = await followBatch(api, id);
  console.log(endLine(end));
  if (end.counts.failed > 0) {
    let n = 0;
    for await (const item of api.items(end.id, LISTED_FAILURES, 'failed')) {
      if (n++ === LISTED_FAILURES) break;
      console.log(`  failed ${item.key}: ${item.error ?? ''}`);
    }
    if (end.counts.failed > LISTED_FAILURES)
      console.log(`  … ${end.counts.failed - LISTED_FAILURES} more: leasehold batch results ${end.id} --state failed`);
  }
  if (end.status !== 'succeeded') process.exitCode = 1;
}
